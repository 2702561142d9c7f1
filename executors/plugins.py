"""Users' ops: the ``@op`` decorator and the plugins that hold them.

A plugin is a Python module that defines ops with :func:`op`. A manifest
names its plugins in ``plugins:`` (``.py`` paths relative to the manifest,
or module names); installed packages offer theirs through the
``hetflow.ops`` entry-point group, one entry point per namespace
(``lab = "labops.ops"`` serves every ``lab.*`` op). Discovery reads only
package metadata: a plugin's code runs when a manifest uses one of its
ops, or when ``hetflow executors --ops`` is asked for the whole list.
Nothing else can be imported from a manifest: an op name is looked up,
never imported, so ``op: os.system`` is just an unknown op.

An op is one :class:`~hetflow.executors.ops.Op` in the one registry,
beside the built-in ones. From the decorated function it takes

* the arity: the positional parameters after the first, ``xp`` (the
  array module of the executor the stage runs on); parameters with a
  default are optional inputs, ``*xs`` takes any number;
* the args: the keyword-only parameters, typed by their annotations
  (``float``, ``int``, ``bool``, ``str``, each optionally ``| None``),
  required when they have no default;
* the dtypes the stage may ask for (``dtypes=``, default the float ones),
  the output shape (``shape=``, a pure function of the input shapes and
  the args; default: the first input's shape), and an optional cost
  (``cost=``, flops and bytes from the same).

``@fn.kernel(vendor)`` adds a kernel that replaces the generic body on
that vendor: a Python function with the op's signature for ``cpu``,
``cuda`` and ``rocm``, WGSL source for ``vulkan`` (``wgsl=``). An op runs
on Vulkan only with a WGSL kernel, so the planner places it elsewhere
without one.

Every op carries the identity of its code: the sha256 of its plugin's
file (and of modules beside it that the plugin imported), or of the
installed distribution's files and version, plus its kernel sources. The
engine folds it into the cache key of every partition that runs the op.

Examples
--------
>>> @op("doc.twice", dtypes=["fp32"])
... def twice(xp, x, *, by: float = 2.0):
...     return x * by
>>> import numpy as np
>>> from hetflow.executors import ops
>>> ops.REGISTRY["doc.twice"].arity, sorted(ops.REGISTRY["doc.twice"].args)
((1, 1), ['by'])
>>> ops.run(np, "doc.twice", [np.ones(2, np.float32)], {"by": 3}, ops.Dtype.fp32).tolist()
[3.0, 3.0]
>>> twice(np, np.ones(1, np.float32)).tolist()
[2.0]
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import linecache
import os
import re
import sys
import threading
import traceback
import types
import typing
from dataclasses import dataclass, field, replace
from importlib import metadata
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from hetflow.executors import ops as oplib
from hetflow.executors.base import Backend, Dtype

__all__ = ["op", "OpFunction", "Plugin", "PluginError", "UserOpError", "load_plugin", "load_source", "resolve_op",
           "entry_points", "load_entry_point", "all_plugins", "ENTRY_POINT_GROUP"]

ENTRY_POINT_GROUP = "hetflow.ops"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)+")
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENDORS = ("cpu", "cuda", "rocm", "vulkan")
_LOCK = threading.RLock()


class PluginError(Exception):
    """A plugin cannot be used: it fails to import, or one of its ops is malformed.

    ``where`` is ``FILE:LINE`` in the plugin when known.
    """

    def __init__(self, message: str, where: str | None = None) -> None:
        super().__init__(message, where)
        self.message = message
        self.where = where

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


class UserOpError(Backend):
    """A user's op raised, or returned something other than what it declared.

    ``user_traceback`` is the traceback of the user's code alone (their
    files and lines, none of hetflow's).
    """

    def __init__(self, message: str, node: str | None = None, op: str | None = None,
                 user_traceback: str | None = None) -> None:
        super().__init__(message, node)
        self.op = op
        self.user_traceback = user_traceback

    def __reduce__(self) -> tuple:
        return (type(self), (self.message, self.node, self.op, self.user_traceback))


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


# -- the decorator ---------------------------------------------------------------------

_ANNOTATIONS: dict[Any, str] = {float: "number", int: "int", bool: "bool", str: "str"}


def _arg_kind(annotation: Any, default: Any, name: str, opname: str, where: str) -> str:
    optional = False
    if annotation is inspect.Parameter.empty:
        if default is inspect.Parameter.empty or default is None:
            raise PluginError(f"op {opname!r}: argument {name!r} needs a type annotation "
                              f"(float, int, bool or str, optionally '| None')", where)
        annotation = type(default)
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(members) < len(typing.get_args(annotation))
        annotation = members[0] if len(members) == 1 else None
    kind = _ANNOTATIONS.get(annotation)
    if kind is None:
        raise PluginError(f"op {opname!r}: argument {name!r} has annotation {annotation!r}; an argument is "
                          f"a float, int, bool or str, optionally '| None'", where)
    if optional or default is None:
        if kind == "bool":
            raise PluginError(f"op {opname!r}: argument {name!r} is a bool, which cannot be None", where)
        kind += "?"
    return kind


def _signature(fn: Callable, name: str, where: str) -> tuple[tuple[int, int], dict[str, oplib.Arg], list[str]]:
    try:
        sig = inspect.signature(fn)
        hints = typing.get_type_hints(fn)
    except (TypeError, ValueError, NameError) as e:
        raise PluginError(f"op {name!r}: cannot read the signature of {fn!r}: {e}", where) from None
    params = list(sig.parameters.values())
    if not params or params[0].kind not in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
        raise PluginError(f"op {name!r}: the first parameter is the array module (xp), then the inputs", where)
    lo = hi = 0
    args: dict[str, oplib.Arg] = {}
    order: list[str] = []
    for p in params[1:]:
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            hi += 1
            lo += p.default is inspect.Parameter.empty
        elif p.kind is inspect.Parameter.VAR_POSITIONAL:
            hi = 64
        elif p.kind is inspect.Parameter.KEYWORD_ONLY:
            kind = _arg_kind(hints.get(p.name, p.annotation), p.default, p.name, name, where)
            required = p.default is inspect.Parameter.empty
            args[p.name] = oplib.Arg(kind, required=required, default=None if required else p.default)
            order.append(p.name)
        else:
            raise PluginError(f"op {name!r}: **{p.name} is not allowed; each argument is one keyword-only parameter", where)
    return (lo, hi), args, order


def _where(fn: Callable) -> str:
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", repr(fn))
    return f"{code.co_filename}:{code.co_firstlineno}"


def _user_frames(exc: BaseException) -> tuple[str, str]:
    """The traceback of ``exc`` without hetflow's frames, and ``FILE:LINE`` of the innermost user frame."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_HERE + os.sep)]
    text = "Traceback (most recent call last):\n" + "".join(traceback.format_list(frames)) + \
        "".join(traceback.format_exception_only(type(exc), exc))
    last = f"{os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else "?"
    return text, last


def _is_shape(value: Any) -> bool:
    return isinstance(value, (tuple, list)) and all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in value)


def _shape_rule(shape: Callable | None, name: str, where: str) -> Callable[[list, dict], Any]:
    if shape is None:
        def first(inputs: list, args: dict) -> tuple:
            if not inputs:
                raise oplib.ShapeError(f"op {name!r} takes no inputs, so it must give shape= ({where})")
            return tuple(inputs[0])

        return first

    def rule(inputs: list, args: dict) -> tuple:
        try:
            out = shape(*inputs, **args)
        except Exception as e:  # noqa: BLE001 - any failure of the user's shape= is reported with its place
            _, at = _user_frames(e)
            raise oplib.ShapeError(f"op {name!r}: its shape= raised {type(e).__name__}: {e} ({at})") from None
        if not _is_shape(out):
            raise oplib.ShapeError(f"op {name!r}: its shape= returned {out!r}, not a tuple of non-negative "
                                   f"integers ({os.path.basename(where)})")
        return tuple(int(d) for d in out)

    return rule


def _cost_rule(cost: Callable | None, name: str) -> Callable | None:
    if cost is None:
        return None

    def rule(inputs: Sequence, args: Mapping[str, Any]) -> tuple[int, int]:
        out = cost(*inputs, **args)
        if isinstance(out, Mapping):
            return int(out.get("flops", 0)), int(out.get("bytes", 0))
        flops, nbytes = out
        return int(flops), int(nbytes)

    return rule


def _invoker(name: str, fn: Callable, order: Sequence[str]) -> Callable[..., Any]:
    def invoke(xp: Any, vendor: str | None, inputs: list, args: dict, dtype: Dtype) -> Any:
        op = oplib.REGISTRY[name]
        body = op.kernels.get(vendor, fn) if vendor else fn
        kwargs = {k: float(v) if op.args[k].kind in ("number", "number?") and v is not None else v
                  for k, v in args.items() if k in op.args}
        try:
            out = body(xp, *inputs, **kwargs)
        except Exception as e:  # noqa: BLE001 - the user's exception fails the stage with their traceback
            text, at = _user_frames(e)
            raise UserOpError(f"op {name!r} raised {type(e).__name__}: {e} ({at})", op=name,
                              user_traceback=text) from None
        if not (hasattr(out, "shape") and hasattr(out, "dtype")):
            raise UserOpError(f"op {name!r} returned a {type(out).__name__}, not an array", op=name)
        declared = op.shape([tuple(x.shape) for x in inputs], args)
        if declared is not None and tuple(out.shape) != tuple(declared):
            raise UserOpError(f"op {name!r} returned shape {list(out.shape)}, but its shape rule declares "
                              f"{list(declared)}", op=name)
        if out.dtype != np.float32 and out.dtype != dtype.numpy:
            raise UserOpError(f"op {name!r} returned {out.dtype} values for a {dtype.value} stage; return float32 "
                              f"(the inputs' dtype) or {dtype.value}, converting with .astype() where meant", op=name)
        return out

    return invoke


class OpFunction:
    """What ``@op`` returns: the user's function, still callable, plus ``.kernel`` and ``.op``."""

    def __init__(self, fn: Callable, name: str) -> None:
        self.fn = fn
        self.name = name
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<op {self.name!r} from {_where(self.fn)}>"

    @property
    def op(self) -> oplib.Op:
        """The registry entry."""
        return oplib.REGISTRY[self.name]

    def kernel(self, vendor: str, *, wgsl: str | None = None) -> Callable[[Callable], Callable]:
        """A kernel that replaces the generic body on ``vendor``.

        For ``cpu``, ``cuda`` and ``rocm``, decorate a function with the
        op's signature; its ``xp`` is that vendor's array module. For
        ``vulkan``, give the WGSL source as ``wgsl=``: the inputs are bound
        at 0..n-1 (``array<f32>``, read), the output at n
        (``array<f32>``, read_write), and ``P: array<u32>`` at n+1 with
        P[0] the output's element count and then one word per keyword
        argument in declared order (floats as f32 bits, read with
        ``bitcast<f32>(P[k])``). The entry point is ``main`` with
        ``@workgroup_size(256)``; element ``i = gid.x + gid.y * nwg.x *
        256u`` (more than 65535 workgroups spill into y). A function
        decorated with the Vulkan kernel, if any, takes the input shapes
        and the args and returns the words after P[0] instead.
        """
        if vendor not in _VENDORS:
            raise PluginError(f"op {self.name!r}: no vendor {vendor!r} (vendors: {', '.join(_VENDORS)})", _caller())
        if vendor == "vulkan":
            if not isinstance(wgsl, str) or not wgsl.strip():
                raise PluginError(f"op {self.name!r}: a vulkan kernel needs its WGSL source as wgsl=", _caller())
            self._set_wgsl(wgsl, None)

            def vulkan_params(fn: Callable) -> Callable:
                self._set_wgsl(wgsl, fn)
                return fn

            return vulkan_params
        if wgsl is not None:
            raise PluginError(f"op {self.name!r}: wgsl= is for the vulkan kernel; a {vendor} kernel is a Python function",
                              _caller())

        def register(fn: Callable) -> Callable:
            _signature(fn, self.name, _where(fn))
            with _LOCK:
                op = oplib.REGISTRY[self.name]
                oplib.REGISTRY[self.name] = replace(op, kernels={**op.kernels, vendor: fn})
            return fn

        return register

    def _set_wgsl(self, source: str, params: Callable | None) -> None:
        with _LOCK:
            op = oplib.REGISTRY[self.name]
            oplib.REGISTRY[self.name] = replace(op, wgsl=oplib.Kernel("source", source, params=params))


def _caller() -> str:
    frame = inspect.stack()[2]
    return f"{frame.filename}:{frame.lineno}"


# The load in progress on this thread: its module's ops, so a second definition is an error.
_LOADING = threading.local()


def op(name: str, *, dtypes: Iterable[str] | None = None, shape: Callable | None = None,
       cost: Callable | None = None, doc: str | None = None) -> Callable[[Callable], OpFunction]:
    """Register the decorated function as op ``name`` (``ns.name``).

    One process may load several projects' plugins (a scheduler, a
    notebook, tests): a plugin loaded later takes over a name an earlier
    one defined, and a manifest whose own plugins define one name twice
    is refused.

    Parameters
    ----------
    name : str
        Namespaced name, ``ns.name``; may not be a built-in op's.
    dtypes : list of str, optional
        The dtypes a stage of this op may ask for (default: the float ones).
    shape : callable, optional
        ``shape(*input_shapes, **args) -> tuple``: the output shape, pure.
        Default: the first input's shape. An op without inputs needs one.
    cost : callable, optional
        ``cost(*input_shapes, **args) -> {"flops": int, "bytes": int}``.
    doc : str, optional
        One line for listings; default: the first line of the docstring.

    Raises
    ------
    PluginError
        A malformed name, a built-in's name, a name defined twice, an
        unknown dtype, or an argument without a usable annotation.
    """

    def register(fn: Callable) -> OpFunction:
        where = _where(fn)
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise PluginError(f"op name {name!r} is not namespaced: write 'ns.name' (letters, digits, '_', '-')", where)
        if name in oplib.BUILTIN:
            raise PluginError(f"op {name!r} would shadow the built-in op {name!r}; choose another name", where)
        try:
            kinds = frozenset(Dtype(d) for d in dtypes) if dtypes is not None else oplib.FLOAT_DTYPES
        except ValueError:
            raise PluginError(f"op {name!r}: dtypes= {list(dtypes or [])!r} names an unknown dtype "
                              f"(dtypes: {', '.join(d.value for d in Dtype)})", where) from None
        if not kinds:
            raise PluginError(f"op {name!r}: dtypes= is empty", where)
        arity, args, order = _signature(fn, name, where)
        if arity[1] == 0 and shape is None:
            raise PluginError(f"op {name!r} takes no inputs, so it must give shape=", where)
        for label, f in (("shape", shape), ("cost", cost)):
            if f is not None and not callable(f):
                raise PluginError(f"op {name!r}: {label}= must be a function of the input shapes and args", where)
        module = getattr(fn, "__module__", None) or "__main__"
        loading = getattr(_LOADING, "module", None)
        with _LOCK:
            old = oplib.REGISTRY.get(name)
            if loading is not None and name in _LOADING.defined:
                raise PluginError(f"op {name!r} is defined twice: at {_LOADING.defined[name]} and at {where}", where)
            if old is not None and old.invoke is None:
                raise PluginError(f"op {name!r} would shadow the built-in op {name!r}; choose another name", where)
            text = doc if doc is not None else (inspect.getdoc(fn) or "").split("\n")[0]
            oplib.REGISTRY[name] = oplib.Op(
                name, arity, kinds, fn, _shape_rule(shape, name, where), args, doc=text,
                invoke=_invoker(name, fn, order), cost_rule=_cost_rule(cost, name), source=module,
                defined_at=where, identity=None if loading is not None else _loose_identity(fn))
            if loading is not None:
                _LOADING.defined[name] = where
        return OpFunction(fn, name)

    return register


def _loose_identity(fn: Callable) -> str | None:
    """The identity of an op defined outside a plugin load (a notebook, a script): its file's bytes."""
    path = getattr(getattr(fn, "__code__", None), "co_filename", None)
    digest = _file_sha(path) if path else None
    if digest is not None:
        return digest
    try:
        return "sha256:" + hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return None


# -- loading ---------------------------------------------------------------------------


def _file_sha(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return "sha256:" + hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def _combine(files: Mapping[str, str], extra: Sequence[str] = ()) -> str:
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(f"{os.path.basename(path)}\0{files[path]}\n".encode())
    for item in extra:
        h.update(item.encode() + b"\n")
    return "sha256:" + h.hexdigest()


_PLUGINS: dict[tuple[str, str], Plugin] = {}


def _ops_of(module: str) -> tuple[str, ...]:
    return tuple(n for n, o in oplib.REGISTRY.items() if o.source == module)


def _finish(module: str, files: Mapping[str, str], base: str) -> tuple[str, tuple[str, ...]]:
    """Stamp every op of ``module`` with its identity: the plugin's digest plus its kernel sources."""
    names = _ops_of(module)
    with _LOCK:
        for n in names:
            o = oplib.REGISTRY[n]
            kernels = [o.wgsl.expr if o.wgsl else ""] + [f"{v}:{_where(f)}" for v, f in sorted(o.kernels.items())]
            oplib.REGISTRY[n] = replace(o, identity=_combine({"": base}, kernels))
    return base, names


def _exec(module_name: str, path: str, code: bytes, spec: str) -> tuple[types.ModuleType, list[str]]:
    """Run a plugin's code as module ``module_name``; returns the module and the local modules it imported."""
    before = set(sys.modules)
    folder = os.path.dirname(path)
    previous = {n: o for n, o in oplib.REGISTRY.items() if o.source == module_name}
    with _LOCK:
        for n in previous:
            del oplib.REGISTRY[n]
    module = types.ModuleType(module_name)
    module.__file__ = path
    sys.modules[module_name] = module
    _LOADING.module, _LOADING.defined = module_name, {}
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
    except Exception as e:  # noqa: BLE001 - any failure of the plugin's import is reported with its place
        _restore(module_name, previous)
        frames = traceback.extract_tb(e.__traceback__)
        inside = [f for f in frames if not f.filename.startswith(_HERE + os.sep)]
        last = inside[-1] if inside else (frames[-1] if frames else None)
        raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}",
                          f"{last.filename}:{last.lineno}" if last else path) from None
    finally:
        _LOADING.module = None
    local = [m for m in set(sys.modules) - before
             if (getattr(sys.modules[m], "__file__", None) or "").startswith(folder + os.sep)]
    return module, [sys.modules[m].__file__ for m in local]


def _restore(module_name: str, previous: Mapping[str, oplib.Op]) -> None:
    sys.modules.pop(module_name, None)
    with _LOCK:
        for n in _ops_of(module_name):
            del oplib.REGISTRY[n]
        oplib.REGISTRY.update(previous)


def load_source(path: str, code: bytes, spec: str | None = None) -> Plugin:
    """Load a path plugin from its bytes (read from ``path``, or shipped to a worker)."""
    path = os.path.abspath(path)
    spec = spec or os.path.basename(path)
    digest = "sha256:" + hashlib.sha256(code).hexdigest()
    with _LOCK:
        known = _PLUGINS.get(("path", path))
        if known is not None and known.source == code and all(
                n in oplib.REGISTRY and oplib.REGISTRY[n].source == known.module for n in known.ops):
            return replace(known, spec=spec)
        module_name = "hetflow_plugin_" + re.sub(r"\W", "_", os.path.splitext(os.path.basename(path))[0]) + \
            "_" + hashlib.sha256(path.encode()).hexdigest()[:10]
        _, local = _exec(module_name, path, code, spec)
        files = {path: digest, **{f: _file_sha(f) or "" for f in local}}
        total, names = _finish(module_name, files, _combine(files))
        if not names:
            _restore(module_name, {})
            raise PluginError(f"plugin {spec!r} defines no op (decorate functions with @hetflow.op)", path)
        plugin = Plugin(spec, "path", module_name, path, total, names, files=files, source=code)
        _PLUGINS["path", path] = plugin
        return plugin


def _distribution_of(module: str) -> metadata.Distribution | None:
    top = module.split(".")[0]
    for name in metadata.packages_distributions().get(top, []):
        try:
            return metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _distribution_files(dist: metadata.Distribution) -> dict[str, str]:
    files: dict[str, str] = {}
    for f in dist.files or ():
        if "__pycache__" in f.parts or f.suffix in (".pyc",):
            continue
        path = str(f.locate())
        digest = _file_sha(path)
        if digest is not None:
            files[str(f)] = digest
    return files


def load_module(name: str, spec: str | None = None, kind: str = "module") -> Plugin:
    """Import an installed module that defines ops; its identity is its distribution's files and version."""
    spec = spec or name
    with _LOCK:
        loaded = name in sys.modules
        previous_ops = _ops_of(name)
        if not loaded:
            _LOADING.module, _LOADING.defined = name, {}
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
            except Exception as e:  # noqa: BLE001 - reported with its place
                raise PluginError(f"plugin {spec!r} failed to import: {type(e).__name__}: {e}", _last_frame(e)) from None
            finally:
                _LOADING.module = None
        elif not previous_ops and ("module", name) not in _PLUGINS:
            pass
        module = sys.modules[name]
        dist = _distribution_of(name)
        file = getattr(module, "__file__", None)
        if dist is not None:
            files = _distribution_files(dist)
            extra = [dist.metadata["Name"], dist.version]
        else:
            files = {file: _file_sha(file) or ""} if file else {}
            extra = []
        total, names = _finish(name, files, _combine(files, extra))
        if not names:
            raise PluginError(f"plugin {spec!r}: module {name!r} defines no op (decorate functions with @hetflow.op)")
        plugin = Plugin(spec, kind, name, file, total, names, distribution=dist.metadata["Name"] if dist else None,
                        version=dist.version if dist else None, files=files)
        _PLUGINS[kind, name] = plugin
        return plugin


def _last_frame(e: BaseException) -> str | None:
    frames = traceback.extract_tb(e.__traceback__)
    inside = [f for f in frames if not f.filename.startswith(_HERE + os.sep) and "importlib" not in f.filename]
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
    return load_module(spec)


# -- entry points ------------------------------------------------------------------------


def entry_points() -> list[metadata.EntryPoint]:
    """The ``hetflow.ops`` entry points of the installed distributions; reads metadata, imports nothing."""
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
