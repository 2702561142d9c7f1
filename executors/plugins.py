"""Users' ops: the plugins that hold them, found by path, module name or entry point, and loaded.

A plugin is a Python module that defines ops with :func:`op`. A manifest
names its plugins in ``plugins:`` (``.py`` paths relative to the manifest,
or module names); installed packages offer theirs through the
``hetflow.ops`` entry-point group, one entry point per namespace
(``lab = "labops.ops"`` serves every ``lab.*`` op). Discovery reads only
package metadata: a plugin's code runs when a manifest uses one of its
ops, or when ``hetflow executors --ops`` is asked for the whole list.
Nothing else can be imported from a manifest: an op name is looked up,
never imported, so ``op: os.system`` is just an unknown op.

The ``@op`` decorator that a plugin uses, and what an op takes from the
decorated function, are in :mod:`hetflow.executors.userops` (its names
are imported from here too); the digests of code in
:mod:`hetflow.executors.codeid`.

Every op carries the identity of its code: the sha256 of its plugin's
file and of every Python module beside it (the ``.py`` files of its
folder and of the packages under it, whatever the plugin imports, when
it loads or when an op runs), or of the installed distribution's files
and version and of its package's Python files (an editable install's
distribution lists none of them), plus its kernel sources and its body's file name
and line. The engine
folds it into the cache key of every partition that runs the op. A
module plugin whose code changed on disk since this process imported it
runs the code it imported, which no identity names: its ops' partitions
are not cached.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import linecache
import os
import re
import sys
import traceback
import threading
import types
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator, Mapping, Sequence

from hetflow.executors import ops as oplib
from hetflow.executors.codeid import combine, distribution_files, distribution_of, file_sha, package_root, python_files
from hetflow.executors.userops import (  # noqa: F401 - the decorator's names, imported from here by the engine and users
    IN_USE,
    IN_USE_CHANGED,
    LOADING,
    REGISTRY_LOCK,
    OpFunction,
    PluginError,
    UserOpError,
    defined_at,
    in_use_elsewhere,
    is_hetflow_frame,
    op,
)

if TYPE_CHECKING:
    from importlib import metadata

__all__ = ["op", "OpFunction", "Plugin", "PluginError", "UserOpError", "load_plugin", "load_source", "resolve_op",
           "imported_code",
           "entry_points", "load_entry_point", "all_plugins", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "hetflow.ops"


@dataclass(frozen=True)
class Plugin:
    """One loaded plugin: where its code is, its identity, and the ops it defines."""

    spec: str
    kind: str
    """``path``, ``module`` or ``entry point``."""
    module: str
    file: str | None
    digest: str
    ops: tuple[str, ...]
    distribution: str | None = None
    version: str | None = None
    files: Mapping[str, str] = field(default_factory=dict)
    """Every file whose bytes make up ``digest`` (path -> sha256)."""
    imported: Mapping[str, tuple[str, str | None]] = field(default_factory=dict, compare=False)
    """The user's modules the plugin's module names (``import helper``, ``from helper import f``): module ->
    (the file it was imported from, its sha256); see :func:`imported_code`."""
    source: bytes | None = field(default=None, repr=False, compare=False)
    """A path plugin's bytes, which workers load so they run exactly this code."""

    @property
    def label(self) -> str:
        if self.kind == "path" and self.file:
            return os.path.basename(self.file)
        if self.distribution:
            return f"{self.distribution} {self.version}"
        return self.module

    def to_json(self) -> dict:
        return {"spec": self.spec, "kind": self.kind, "module": self.module, "file": self.file,
                "distribution": self.distribution, "version": self.version, "digest": self.digest,
                "ops": list(self.ops), "files": dict(self.files)}


# -- loading ---------------------------------------------------------------------------


_PLUGINS: dict[tuple[str, str], Plugin] = {}


def _ops_of(module: str) -> tuple[str, ...]:
    return tuple(n for n, o in oplib.REGISTRY.items() if o.source == module)


def _finish(module: str, files: Mapping[str, str], base: str | None) -> tuple[str | None, tuple[str, ...]]:
    """Stamp every op of ``module`` with its identity: the plugin's digest plus its kernel sources (None: the
    code that runs is not the code on disk)."""
    names = _ops_of(module)
    with REGISTRY_LOCK:
        for n in names:
            o = oplib.REGISTRY[n]
            # each kernel by its file's name and line, not its path: the plugin's digest holds the file's bytes,
            # and a project moved or copied elsewhere keeps its cache
            kernels = [o.wgsl.expr if o.wgsl else ""] + [f"{v}:{os.path.basename(defined_at(f))}"
                                                         for v, f in sorted(o.kernels.items())]
            # and the op's own body by its file and line: two plugins of one folder hold the same files, so the
            # digest alone named a.py's op and b.py's op of one name alike, and one's cache entries served the other
            kernels.append(f"body:{os.path.basename(o.defined_at)}")
            oplib.REGISTRY[n] = replace(o, identity=combine({"": base}, kernels) if base is not None else None)
        _DEFINED[module] = {n: oplib.REGISTRY[n] for n in names}
    return base, names


# module -> the ops it defined when it last loaded, which another plugin's of the same names may have replaced since
_DEFINED: dict[str, dict[str, oplib.Op]] = {}


def _take_back(module: str, spec: str) -> None:
    """Put back in the registry the ops of ``module``, imported already, that another plugin's of the same names
    replaced: an installed module is imported once a process, so its code would not define them again."""
    with REGISTRY_LOCK:
        for n, o in (_DEFINED.get(module) or {}).items():
            if n in oplib.REGISTRY and oplib.REGISTRY[n].source == module:
                continue
            busy = in_use_elsewhere(n, module)
            if busy is not None:
                raise PluginError(f"plugin {spec!r}: {busy}")
            oplib.REGISTRY[n] = o


def _exec(module_name: str, path: str, code: bytes, spec: str) -> types.ModuleType:
    """Run a plugin's code as module ``module_name``; returns the module."""
    previous = {n: o for n, o in oplib.REGISTRY.items() if o.source == module_name}
    with REGISTRY_LOCK:
        for n in previous:
            busy = in_use_elsewhere(n, module_name)
            if busy is not None:
                raise PluginError(busy.replace("defining it again", f"loading plugin {spec!r} again"), path)
        for n in previous:
            del oplib.REGISTRY[n]
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module
    LOADING.module, LOADING.defined = module_name, {}
    import builtins

    real_import, named = builtins.__import__, _IMPORTS.setdefault(module_name, set())
    named.clear()

    def recording(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - __import__'s own names
        found = real_import(name, globals, locals, fromlist, level)
        if level == 0 and (globals or {}).get("__name__") == module_name:
            # the plugin's own import statements: what Python found for them is part of the code it runs
            named.add(name)
            named.update(f"{name}.{item}" for item in fromlist or () if isinstance(item, str))
        return found

    builtins.__import__ = recording
    # the modules beside it are importable while it loads, as a script's are (import helper): the CLI's search
    # path holds neither the manifest's folder nor the working one, and the plugin failed with "No module named";
    # only while it loads, so that no other plugin's import finds this folder's helper first
    folder = os.path.dirname(path)
    sys.path.insert(0, folder)
    try:
        linecache.checkcache(path)
        compiled = compile(code, path, "exec")
        exec(compiled, module.__dict__)  # noqa: S102 - the plugin the manifest names: user code by design
    except PluginError:
        _restore(module_name, previous)
        raise
    except SyntaxError as e:
        _restore(module_name, previous)
        raise PluginError(f"plugin {spec!r} does not parse: {e.msg}", f"{e.filename}:{e.lineno}") from None
    except KeyboardInterrupt:
        # a Ctrl-C while it loads: the ops it defined so far, without their identity, stayed in the registry in
        # place of the previous load's, and a load of the previous bytes again took them for its own
        _restore(module_name, previous)
        raise
    except BaseException as e:  # noqa: BLE001 - any failure of the plugin's import, with its place: sys.exit() too,
        # and a BaseException of the plugin's own, which came out as a traceback
        _restore(module_name, previous)
        frames = traceback.extract_tb(e.__traceback__)
        inside = [f for f in frames if not is_hetflow_frame(f.filename)]
        last = inside[-1] if inside else (frames[-1] if frames else None)
        raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}",
                          f"{last.filename}:{last.lineno}" if last else path) from None
    finally:
        builtins.__import__ = real_import
        LOADING.module = None
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)
    return module


# a path plugin's module -> the modules its own import statements named when it was loaded
_IMPORTS: dict[str, set[str]] = {}


def imported_code(module_name: str) -> dict[str, tuple[str, str | None]]:
    """The user's modules that module ``module_name`` names in its namespace (``import helper``, ``from helper
    import f``), each with the file it was imported from and that file's sha256; not the standard library's,
    an installed distribution's, nor hetflow's.

    Where Python found them is its search path's choice, not always the
    plugin's folder: a worker whose ``PYTHONPATH`` holds an older
    ``helper.py`` runs it under a plugin whose bytes are the client's.
    """
    module = sys.modules.get(module_name)
    names: set[str] = set(_IMPORTS.get(module_name, ()))
    for value in list(vars(module).values()) if module is not None else ():
        if isinstance(value, types.ModuleType):
            names.add(value.__name__)
        else:
            named = getattr(value, "__module__", None)
            if isinstance(named, str):
                names.add(named)
    found: dict[str, tuple[str, str | None]] = {}
    roots = _library_roots()
    packages: set[str] = set()
    for name in sorted(names - {module_name}):
        file = getattr(sys.modules.get(name), "__file__", None)
        if not file or not file.endswith(".py"):
            continue
        real = os.path.realpath(file)
        if not real.startswith(roots):
            found[name] = (real, file_sha(real))
            root = package_root(real, name)
            if root is not None:
                packages.add(root)
    # a module of a package imports its package's other modules, which the plugin never names (from extlib import
    # helper, whose own from extlib import deep): the package's Python files, each under PACKAGE/PATH
    for root in sorted(packages):
        for path, digest in python_files(root).items():
            found.setdefault(f"{os.path.basename(root)}/{os.path.relpath(path, root)}", (path, digest))
    return found


@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    import site
    import sysconfig

    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    roots.add(site.getusersitepackages())
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(oplib.__file__))))  # hetflow's own
    return tuple(os.path.realpath(r) + os.sep for r in roots if r)


def _forget_shadows(folder: str) -> None:
    """Drop the modules this process imported from elsewhere under the names of modules beside a plugin about to
    load (another project's ``helper``, a plugin loaded before from its own folder): its ``import helper`` then
    finds its own, where it got the other's and its record named its own."""
    try:
        names = {os.path.splitext(n)[0] for n in os.listdir(folder)
                 if n.endswith(".py") or os.path.isfile(os.path.join(folder, n, "__init__.py"))}
    except OSError:
        return
    here, roots = os.path.realpath(folder) + os.sep, _library_roots()
    for name in names:
        module = sys.modules.get(name)
        file = getattr(module, "__file__", None) if module is not None else None
        real = os.path.realpath(file) if file else ""
        # the standard library's and installed packages' modules stay, whatever a file beside the plugin is named
        if real and not real.startswith(here) and not real.startswith(roots):
            for known in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                sys.modules.pop(known, None)


def _forget_beside(folder: str) -> None:
    """Drop the modules imported from ``folder`` (a plugin's helpers) but the plugins themselves, so the plugin
    run again imports them as they are now: an edited helper was kept as first imported, for the life of the
    process, under an identity that named its new bytes."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None) or ""
        if file.startswith(folder + os.sep) and not name.startswith("hetflow_plugin_"):
            sys.modules.pop(name, None)


def _restore(module_name: str, previous: Mapping[str, oplib.Op]) -> None:
    sys.modules.pop(module_name, None)
    with REGISTRY_LOCK:
        for n in _ops_of(module_name):
            del oplib.REGISTRY[n]
        oplib.REGISTRY.update(previous)


def load_source(path: str, code: bytes, spec: str | None = None) -> Plugin:
    """Load a path plugin from its bytes (read from ``path``, or shipped to a worker)."""
    path = os.path.abspath(path)
    spec = spec or os.path.basename(path)
    digest = "sha256:" + hashlib.sha256(code).hexdigest()
    folder = os.path.dirname(path)
    with REGISTRY_LOCK:
        known = _PLUGINS.get(("path", path))
        # the code beside it as it is now: a helper edited since the plugin was loaded loads it again
        files = {**python_files(folder), path: digest}
        if known is not None and known.source == code and known.files == files and all(
                n in oplib.REGISTRY and oplib.REGISTRY[n].source == known.module for n in known.ops) \
                and imported_code(known.module) == known.imported:
            return replace(known, spec=spec)
        if known is not None:
            _forget_beside(folder)
            # imported from elsewhere on the search path, and edited there since: the modules and their packages'
            elsewhere = {path for path, _ in known.imported.values()}
            for name, module in list(sys.modules.items()):
                if name in known.imported or os.path.realpath(getattr(module, "__file__", None) or "") in elsewhere:
                    sys.modules.pop(name, None)
        _forget_shadows(folder)
        module_name = "hetflow_plugin_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]) + \
            "_" + hashlib.sha256(path.encode()).hexdigest()[:10]
        _exec(module_name, path, code, spec)
        imported = imported_code(module_name)
        # a helper imported from outside the plugin's folder is part of its code too
        whole = {**files, **{file: sha or "" for file, sha in imported.values()}}
        total, names = _finish(module_name, whole, combine(whole))
        if not names:
            _restore(module_name, {})
            raise PluginError(f"plugin {spec!r} defines no op (decorate functions with @hetflow.op)", path)
        plugin = Plugin(spec, "path", module_name, path, total, names, files=files, source=code, imported=imported)
        _PLUGINS["path", path] = plugin
        return plugin


@contextlib.contextmanager
def in_use(used: Sequence[Plugin]) -> Iterator[None]:
    """While a run of a manifest with plugins ``used`` runs in this process: the registry holds their ops, and
    no other plugin's definition of their names replaces them.

    A run of another plugin's op of the same name in progress (another
    thread: a notebook's, a service's) is waited for; the ops are then
    loaded again from the bytes the manifest was compiled with where the
    registry holds the other plugin's. A plugin that would define one of
    them again meanwhile is refused (:func:`in_use_elsewhere`).
    """
    wanted = {n: p.module for p in used for n in p.ops}
    me = threading.get_ident()
    with IN_USE_CHANGED:
        IN_USE_CHANGED.wait_for(lambda: all(IN_USE.get(n, (m,))[0] == m for n, m in wanted.items()))
        for n, m in wanted.items():
            threads = IN_USE.setdefault(n, (m, {}))[1]
            threads[me] = threads.get(me, 0) + 1
    try:
        with REGISTRY_LOCK:
            for p in used:
                if all(n in oplib.REGISTRY and oplib.REGISTRY[n].source == p.module for n in p.ops):
                    continue
                if p.kind == "path" and p.file and p.source is not None:
                    load_source(p.file, p.source, p.spec)
                wrong = [n for n in p.ops if n not in oplib.REGISTRY or oplib.REGISTRY[n].source != p.module]
                if wrong:
                    raise PluginError(f"plugin {p.spec!r}: op {wrong[0]!r} is defined in this process by "
                                      f"{getattr(oplib.REGISTRY.get(wrong[0]), 'defined_at', None) or 'none'} now, "
                                      f"not by {p.module}; run this in a new process", p.file)
        yield
    finally:
        with IN_USE_CHANGED:
            for n in wanted:
                threads = IN_USE[n][1]
                threads[me] -= 1
                if not threads[me]:
                    del threads[me]
                if not threads:
                    del IN_USE[n]
            IN_USE_CHANGED.notify_all()


def load_module(name: str, spec: str | None = None, kind: str = "module") -> Plugin:
    """Import an installed module that defines ops; its identity is its distribution's files and version."""
    spec = spec or name
    with REGISTRY_LOCK:
        loaded = name in sys.modules
        if not loaded:
            LOADING.module, LOADING.defined = name, {}
            try:
                importlib.import_module(name)
            except PluginError:
                raise
            except ModuleNotFoundError as e:
                if e.name and name.startswith(e.name):
                    raise PluginError(f"plugin {spec!r}: no module named {name!r} is installed in this Python "
                                      f"({sys.executable})") from None
                raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}",
                                  _last_frame(e)) from None
            except KeyboardInterrupt:
                raise
            except BaseException as e:  # noqa: BLE001 - reported with its place, sys.exit() and its own kinds too
                raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}", _last_frame(e)) from None
            finally:
                LOADING.module = None
        else:
            _take_back(name, spec)
        module = sys.modules[name]
        dist = distribution_of(name)
        file = getattr(module, "__file__", None)
        files = distribution_files(dist) if dist is not None else {}
        extra = [dist.metadata["Name"], dist.version] if dist is not None else []
        if file:
            files.update(_module_code(file, name, alone=dist is not None))
        identity = combine(files, extra)
        # the process runs the code it imported: once that is not what is on disk, no identity names it
        imported = _IMPORTED.setdefault(name, identity)
        _, names = _finish(name, files, identity if identity == imported else None)
        total = imported
        if not names:
            raise PluginError(f"plugin {spec!r}: module {name!r} defines no op (decorate functions with @hetflow.op)")
        plugin = Plugin(spec, kind, name, file, total, names, distribution=dist.metadata["Name"] if dist else None,
                        version=dist.version if dist else None, files=files, imported=imported_code(name))
        _PLUGINS[kind, name] = plugin
        return plugin


# module name -> the identity of its code when this process imported it
_IMPORTED: dict[str, str] = {}


def _module_code(file: str, name: str, alone: bool) -> dict[str, str]:
    """The Python files a module plugin's ops may run: its top-level package's, or a module of one file and,
    where no distribution owns it, the modules beside it (a folder on ``PYTHONPATH``)."""
    root = package_root(file, name)
    if root is not None:
        return python_files(root)
    folder = os.path.dirname(os.path.abspath(file))
    if alone or os.path.basename(folder) in ("site-packages", "dist-packages"):
        return {file: file_sha(file) or ""}
    return {**python_files(folder), file: file_sha(file) or ""}


def _last_frame(e: BaseException) -> str | None:
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if not is_hetflow_frame(f.filename) and "importlib" not in f.filename]
    return f"{inside[-1].filename}:{inside[-1].lineno}" if inside else None


def is_path_spec(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or os.sep in spec


def load_plugin(spec: str, base: str) -> Plugin:
    """Load the plugin a manifest names: a ``.py`` path relative to ``base``, or a module name."""
    if is_path_spec(spec):
        path = os.path.normpath(os.path.join(base, spec))
        try:
            with open(path, "rb") as f:
                code = f.read()
        except FileNotFoundError:
            raise PluginError(f"plugin {spec!r}: no such file {path}") from None
        except OSError as e:
            raise PluginError(f"plugin {spec!r}: cannot read {path}: {e.strerror}") from None
        return load_source(path, code, spec)
    if not re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*", spec):
        raise PluginError(f"plugin {spec!r} is neither a .py path nor a module name")
    try:
        return load_module(spec)
    except PluginError as e:
        beside = os.path.join(base, spec.replace(".", os.sep) + ".py")
        if e.where is None and "is installed in this Python" in e.message and os.path.isfile(beside):
            # a name without .py is a module to import, which the manifest's folder is not searched for
            raise PluginError(f"{e.message}; the file {os.path.relpath(beside, base)} beside the manifest is a "
                              f"plugin by its path: plugins: [{os.path.relpath(beside, base)}]") from None
        raise


# -- entry points ------------------------------------------------------------------------


def entry_points() -> list[metadata.EntryPoint]:
    """The ``hetflow.ops`` entry points of the installed distributions; reads metadata, imports nothing."""
    from importlib import metadata  # 4 ms at start-up, which a manifest of builtin ops never needs

    return sorted(metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name)


def load_entry_point(ep: metadata.EntryPoint) -> Plugin:
    """Import the module an entry point names (its ``lab = "pkg.mod"`` serves the ``lab.*`` ops)."""
    module = ep.value.split(":")[0].strip()
    dist = getattr(ep, "dist", None)
    spec = f"{ep.name} = {ep.value}" + (f" ({dist.metadata['Name']} {dist.version})" if dist is not None else "")
    return load_module(module, spec, kind="entry point")


def resolve_op(name: str, plugins: Sequence[Plugin]) -> tuple[oplib.Op | None, str]:
    """The op ``name`` means for a manifest with ``plugins``; (None, hint) when it means none.

    Built-in ops, the ops of the manifest's plugins, and the ops of the
    installed entry point whose name is ``name``'s namespace. A name is
    never imported.
    """
    if name in oplib.BUILTIN:
        return oplib.REGISTRY[name], ""
    found = oplib.REGISTRY.get(name)
    if found is not None and any(found.source == p.module for p in plugins):
        return found, ""
    namespace = name.rsplit(".", 1)[0] if "." in name else None
    for ep in entry_points() if namespace else ():
        if ep.name == namespace:
            plugin = load_entry_point(ep)
            if name in plugin.ops:
                return oplib.REGISTRY[name], ""
            return None, f"; the entry point {ep.name!r} ({ep.value}) defines {', '.join(plugin.ops)}"
    if found is not None:
        return None, f"; it is defined in {found.defined_at}, which this manifest does not list in plugins:"
    return None, ""


def all_plugins() -> tuple[list[Plugin], list[tuple[str, str]]]:
    """Every entry-point plugin, loaded, with the ones that fail as (entry point, error) pairs."""
    loaded, failed = [], []
    for ep in entry_points():
        try:
            loaded.append(load_entry_point(ep))
        except PluginError as e:
            failed.append((f"{ep.name} = {ep.value}", str(e)))
    return loaded, failed


def plugin_for(name: str) -> Plugin | None:
    """The loaded plugin that defines op ``name``."""
    found = oplib.REGISTRY.get(name)
    if found is None or found.invoke is None:
        return None
    for plugin in _PLUGINS.values():
        if plugin.module == found.source:
            return plugin
    return None
