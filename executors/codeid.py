"""The identity of a user's op's code: sha256 digests of the files, or the installed distribution, it comes from.

A path plugin is the bytes of its file and of the modules beside it that
it imported; a module or entry-point plugin is its distribution's files
plus its name and version (or the module's file when no distribution
owns it); an op defined outside a plugin load (a notebook, a script) is
its file's bytes, or its source. :mod:`hetflow.executors.plugins` adds
each op's kernel sources; the engine folds the result into the cache key
of every partition that runs the op.

Examples
--------
>>> combine({"/a/ops.py": "sha256:00"}) == combine({"/b/ops.py": "sha256:00"})
True
>>> combine({"ops.py": "sha256:00"}, ["labops", "1.0"]) == combine({"ops.py": "sha256:00"})
False
"""

from __future__ import annotations

import hashlib
import inspect
import os
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

if TYPE_CHECKING:  # importlib.metadata costs 4 ms at start-up; only a user's op needs it
    from importlib import metadata

__all__ = ["file_sha", "combine", "loose_identity", "distribution_of", "distribution_files", "python_files",
           "package_root"]


def file_sha(path: str) -> str | None:
    """``sha256:HEX`` of the file's bytes, or None when it cannot be read."""
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def combine(files: Mapping[str, str], extra: Sequence[str] = ()) -> str:
    """One digest of ``files`` (path -> digest, by base name, in path order) and ``extra`` words."""
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{os.path.basename(path)}\0{files[path]}\n".encode())
    for item in extra:
        h.update(item.encode() + b"\n")
    return "sha256:" + h.hexdigest()


def loose_identity(fn: Callable) -> str | None:
    """The identity of an op defined outside a plugin load (a notebook, a script): its file's bytes."""
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    digest = file_sha(path) if path else None
    if digest is not None:
        return digest
    try:
        return "sha256:" + hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


def distribution_of(module: str) -> metadata.Distribution | None:
    """The installed distribution that owns the top-level package of ``module``, or None."""
    top = module.split(".")[0]
    from importlib import metadata

    for name in metadata.packages_distributions().get(top, []):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def distribution_files(dist: metadata.Distribution) -> dict[str, str]:
    """Every file of ``dist`` but compiled bytecode, by its path in the distribution, with its digest."""
    files: dict[str, str] = {}
    for f in dist.files or ():
        if "__pycache__" in f.parts or f.suffix in (".pyc",):
            continue
        path = str(f.locate())
        digest = file_sha(path)
        if digest is not None:
            files[str(f)] = digest
    return files


def python_files(folder: str) -> dict[str, str]:
    """The Python code an op in ``folder`` can import from beside it, with digests: every ``.py`` file in the
    folder, and in the packages under it (subfolders an import can name, with an ``__init__.py`` or without
    one: namespace packages, which nest through folders of no ``.py`` file), to any depth, symlinked ones too.

    Whatever of it the op imports, at load time or inside its body when
    it runs, is among them: an identity made of fewer would let an edited
    helper leave the op's cache entries in place. A folder no import can
    name (``my-data``, ``.git``) and a virtual environment are not read;
    only the ``.py`` files of the others are.

    >>> import tempfile, pathlib
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for name in ("ops.py", "helper.py", "pkg/__init__.py", "pkg/deep/__init__.py", "pkg/deep/m.py", "ns/u.py",
    ...              "ns2/inner/deep.py", "data/x.csv", "my-data/y.py", "venv/pyvenv.cfg", "venv/lib/site.py"):
    ...     (root / name).parent.mkdir(parents=True, exist_ok=True); _ = (root / name).write_text(name)
    >>> sorted(os.path.relpath(p, root) for p in python_files(str(root)))
    ['helper.py', 'ns/u.py', 'ns2/inner/deep.py', 'ops.py', 'pkg/__init__.py', 'pkg/deep/__init__.py', 'pkg/deep/m.py']
    """
    found: dict[str, str] = {}
    seen: set[str] = set()
    todo, top = [folder], True
    while todo:
        here = todo.pop()
        real = os.path.realpath(here)
        if real in seen:  # a symlink back up the tree
            continue
        seen.add(real)
        try:
            entries = sorted(os.scandir(here), key=lambda e: e.name)
        except OSError:
            continue
        names = {e.name for e in entries}
        if not top and "pyvenv.cfg" in names:
            continue  # a virtual environment
        top = False
        for e in entries:
            try:
                if e.name.endswith(".py") and e.is_file():
                    digest = file_sha(e.path)
                    if digest is not None:
                        found[e.path] = digest
                elif e.is_dir() and e.name.isidentifier() and e.name not in ("__pycache__", "node_modules"):
                    # a folder an import can name, with .py files of its own or not: a namespace package's
                    # folders nest (ns/inner/deep.py imports as ns.inner.deep with no .py in ns)
                    todo.append(e.path)
            except OSError:
                continue
    return found


def package_root(file: str, module: str) -> str | None:
    """The folder of the top-level package that module ``module`` (at ``file``) belongs to; None for a top-level
    module of a single file."""
    depth = module.count(".") + (os.path.basename(file) == "__init__.py")
    if depth == 0:
        return None
    folder = os.path.dirname(os.path.abspath(file))
    for _ in range(depth - 1):
        folder = os.path.dirname(folder)
    return folder
