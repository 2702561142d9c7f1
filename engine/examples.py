"""The example manifests and guest programs that ship inside the package.

A checkout has them in ``examples/`` and ``pipelines/``; an installed
wheel has them as the package data of ``hetflow.examples`` and
``hetflow.pipelines``. :func:`copy` writes both trees into a folder of
the user's with the same layout, so the relative paths inside the
manifests (``../examples/guests/fib.elf``) hold there too, and the editor
schema their modelines name beside them (``schemas/pipeline.schema.json``).

Examples
--------
>>> "examples/quickstart.yaml" in shipped()
True
"""

from __future__ import annotations

import contextlib
import os
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

from hetflow.engine.errors import UsageError, name_file

__all__ = ["shipped", "copy"]

_TREES = {"examples": "hetflow.examples", "pipelines": "hetflow.pipelines"}


def _walk(node: Traversable, prefix: str):
    for child in sorted(node.iterdir(), key=lambda c: c.name):
        if child.name.startswith(("__", ".")):
            continue
        name = f"{prefix}/{child.name}"
        if child.is_dir():
            yield from _walk(child, name)
        else:
            yield name, child


# the editor schema the manifests' modelines name (``$schema=../schemas/pipeline.schema.json``)
_SCHEMA = ("schemas/pipeline.schema.json", "hetflow.schemas", "pipeline.schema.json")


def _files() -> dict[str, Traversable]:
    found = {name: node for top, package in _TREES.items() for name, node in _walk(files(package), top)}
    name, package, file = _SCHEMA
    found[name] = files(package) / file
    return found


def shipped() -> list[str]:
    """Every shipped file, as a path relative to the folder :func:`copy` writes."""
    return list(_files())


def copy(dest: str | os.PathLike, force: bool = False) -> list[Path]:
    """Write the shipped examples and pipelines under ``dest``; return the files written.

    Raises
    ------
    UsageError
        Where a file would be overwritten and ``force`` is false; nothing is
        written then.
    OSError
        The disk refused a file (full, over quota, read-only); the files and
        folders this copy made are removed again, so that the next try
        starts clean.
    """
    root = Path(dest)
    sources = _files()
    if root.exists() and not root.is_dir():
        raise UsageError(f"{root} is not a folder")
    clashes = [name for name in sources if (root / name).exists()]
    if clashes and not force:
        more = f" and {len(clashes) - 3} more" if len(clashes) > 3 else ""
        raise UsageError(f"{', '.join(str(root / c) for c in clashes[:3])}{more} already exist; "
                         "choose an empty folder or pass --force to overwrite them")
    written: list[Path] = []
    made: list[Path] = []  # folders and files this copy created, which a failed copy removes again
    tmp, target = None, root
    try:
        for name, node in sources.items():
            target = root / name
            for folder in reversed([target.parent, *target.parent.parents]):
                if not folder.exists():
                    folder.mkdir()
                    made.append(folder)
            tmp = target.with_name(target.name + ".tmp")
            existed = target.exists()
            tmp.write_bytes(node.read_bytes())
            os.replace(tmp, target)
            tmp = None
            written.append(target)
            if not existed:
                made.append(target)
    except OSError as e:
        # a full disk halfway leaves what was there before (a file --force replaced is whole, the shipped one),
        # not half a copy that the next try calls a clash
        name_file(e, str(target))
        for path in reversed(made + ([tmp] if tmp is not None else [])):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        raise
    return written
