"""The ``@op`` decorator: a user's function made an op of the one registry, with its kernels.

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

What the body receives follows the numeric rule of
:mod:`hetflow.executors.opdecl`: float inputs as float32, or all as
float64 when an input or the stage is ``fp64``; an op whose ``dtypes=``
names an integer or bool dtype computes on integers (``exact``), so
integer and bool inputs reach it as they are, and ``moves=True`` hands
every input over as it is. The body returns its result in that compute
type or in the stage's dtype; the engine converts it to the stage's dtype.

``@fn.kernel(vendor)`` adds a kernel that replaces the generic body on
that vendor: a Python function with the op's signature for ``cpu``,
``cuda`` and ``rocm``, WGSL source for ``vulkan`` (``wgsl=``). An op runs
on Vulkan only with a WGSL kernel, so the planner places it elsewhere
without one.

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

import inspect
import os
import re
import sys
import threading
import traceback
import types
import typing
from dataclasses import replace
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from hetflow._errors import HetflowError
from hetflow.executors import ops as oplib
from hetflow.executors.opdecl import split_rows
from hetflow.executors.base import Backend, Dtype
from hetflow.executors.codeid import loose_identity

__all__ = ["op", "OpFunction", "PluginError", "UserOpError", "OP_NAME"]

# a users' op's name: a namespace, a dot, a name (the editors' schema admits the same)
OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*(\.[A-Za-z_][A-Za-z0-9_-]*)+")
_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VENDORS = ("cpu", "cuda", "rocm", "vulkan")

REGISTRY_LOCK = threading.RLock()
"""Held while the registry changes: plugins load on several threads of a worker."""

LOADING = threading.local()
"""The plugin load in progress on this thread: ``module``, and the ops it ``defined`` so far (name -> FILE:LINE),
so that a second definition of a name is an error."""

IN_USE: dict[str, tuple[str, dict[int, int]]] = {}
"""Each op a run in this process is running: name -> (the module whose op it runs, thread id -> how many runs of
that thread). The registry holds one op a name, which every run of the process calls: a plugin loaded meanwhile
that defined the name again would have the run compute with the other plugin's code, recorded and cached as its
own plugin's. Changed under :data:`IN_USE_CHANGED` only."""

IN_USE_CHANGED = threading.Condition(threading.Lock())


def in_use_elsewhere(name: str, module: str | None) -> str | None:
    """Why op ``name`` may not be defined now by ``module`` (None: any module, the same one's code again too):
    a run of another thread of this process, or of another plugin, is running it."""
    with IN_USE_CHANGED:
        held = IN_USE.get(name)
        if held is None:
            return None
        holder, threads = held
        if holder == module and not set(threads) - {threading.get_ident()}:
            return None
    running = oplib.REGISTRY.get(name)
    at = f" (the op of {running.defined_at})" if running is not None and running.defined_at else ""
    return (f"op {name!r} is in use by a run in this process{at}: defining it again now would change the code "
            "that run computes with; run this after it ends, or give the op another name")


def is_hetflow_frame(filename: str) -> bool:
    """Whether a traceback frame is in hetflow's own code, which a user's traceback leaves out."""
    return filename.startswith(_HERE + os.sep)


class PluginError(HetflowError):
    """A plugin cannot be used: it fails to import, or one of its ops is malformed.

    ``where`` is ``FILE:LINE`` in the plugin when known. A manifest's
    plugin that raises it is a :class:`~hetflow.ManifestError` at its
    ``plugins:`` entry; ``@hetflow.op`` used in a notebook or a script
    raises it as it is.
    """

    exit_code = 2

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


def defined_at(fn: Callable) -> str:
    """``FILE:LINE`` where ``fn`` is defined."""
    code = getattr(fn, "__code__", None)
    if code is None:
        return getattr(fn, "__qualname__", repr(fn))
    return f"{code.co_filename}:{code.co_firstlineno}"


def _user_frames(exc: BaseException) -> tuple[str, str]:
    """The traceback of ``exc`` without hetflow's frames, and ``FILE:LINE`` of the innermost user frame."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not is_hetflow_frame(f.filename)]
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

        first.is_default = True  # the validator names this rule when its guess does not fit
        return first

    def rule(inputs: list, args: dict) -> tuple:
        try:
            out = shape(*inputs, **args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of the user's shape= is reported with its place
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
        try:
            out = cost(*inputs, **args)
        except (Exception, SystemExit) as e:  # noqa: BLE001 - the planner says it, with the place, and prices by default
            _, at = _user_frames(e)
            raise ValueError(f"op {name!r}: its cost= raised {type(e).__name__}: {e} ({at})") from None
        try:
            if isinstance(out, Mapping):
                return int(out.get("flops", 0)), int(out.get("bytes", 0))
            flops, nbytes = out
            return int(flops), int(nbytes)
        except (TypeError, ValueError, OverflowError):
            raise ValueError(f"op {name!r}: its cost= returned {out!r}, not {{'flops': N, 'bytes': N}} or "
                             "(flops, bytes)") from None

    return rule


def _invoker(name: str, fn: Callable, order: Sequence[str]) -> Callable[..., Any]:
    def invoke(xp: Any, vendor: str | None, inputs: list, args: dict, dtype: Dtype) -> Any:
        op = oplib.REGISTRY[name]
        body = op.kernels.get(vendor, fn) if vendor else fn
        kwargs = {k: float(v) if op.args[k].kind in ("number", "number?") and v is not None else v
                  for k, v in args.items() if k in op.args}
        # an input is another stage's output, which that stage's record vouches for and other stages read too:
        # the op gets it read-only (a numpy view), so that writing into it fails this stage instead of changing
        # the others' values unrecorded
        inputs = [_read_only(x) for x in inputs]
        try:
            out = body(xp, *inputs, **kwargs)
        except Exception as e:  # noqa: BLE001 - the user's exception fails the stage with their traceback
            text, at = _user_frames(e)
            if isinstance(e, ValueError) and "read-only" in str(e):
                raise UserOpError(f"op {name!r} wrote into one of its inputs ({e}; {at}): an op's inputs are other "
                                  "stages' outputs, read-only to it; compute a new array (x * 2, not x *= 2)",
                                  op=name, user_traceback=text) from None
            raise UserOpError(f"op {name!r} raised {type(e).__name__}: {e} ({at})", op=name,
                              user_traceback=text) from None
        except SystemExit as e:  # sys.exit() in an op would end the run's process with the op's code, unrecorded
            text, at = _user_frames(e)
            raise UserOpError(f"op {name!r} called sys.exit({e.code!r}), which an op cannot: raise an exception "
                              f"to fail its stage ({at})", op=name, user_traceback=text) from None
        except KeyboardInterrupt:
            raise  # a Ctrl-C that came while the op ran: the run is cancelled, not this stage failed
        except BaseException as e:  # noqa: BLE001 - a class of the user's own beside Exception, GeneratorExit:
            # left to rise, it passed every handler of the run and ended the command with a raw traceback
            text, at = _user_frames(e)
            raise UserOpError(f"op {name!r} raised {type(e).__name__}: {e} ({at}); an op fails its stage by raising "
                              "an Exception", op=name, user_traceback=text) from None
        if not isinstance(out, (np.ndarray, np.generic, getattr(xp, "ndarray", np.ndarray))):
            # an object of its own with .shape and .dtype passed, and failed further on as "float() argument must
            # be a string or a real number, not 'Fake'", naming neither what was returned nor the rule
            raise _returned(name, body, f"op {name!r} returned a {type(out).__name__}, not an array of "
                                        f"{getattr(xp, '__name__', 'its executor')}")
        if isinstance(out, np.ma.MaskedArray):
            # stored as its data alone, the masked entries' values, which the op said are not values
            raise _returned(name, body, f"op {name!r} returned a masked array, whose mask an output cannot keep: "
                                        "return its .filled(value) or a separate mask")
        declared = op.shape([tuple(x.shape) for x in inputs], args)
        if declared is not None and tuple(out.shape) != tuple(declared):
            raise _returned(name, body, f"op {name!r} returned shape {list(out.shape)}, but its shape rule "
                                        f"declares {list(declared)}")
        if out.dtype != dtype.numpy and not _computed_in(out.dtype, op, inputs, dtype):
            given = oplib.compute_type(op, inputs, dtype)
            given = "the inputs' dtypes" if given is None else f"{np.dtype(given)} (the inputs' dtype)"
            raise _returned(name, body, f"op {name!r} returned {out.dtype} values for a {dtype.value} stage; "
                                        f"return {given} or {dtype.numpy}, converting with .astype() where meant")
        return out

    return invoke


def _returned(name: str, body: Callable, message: str) -> UserOpError:
    """A body's result that is not what the op declared: no frame of the user's raised, so what the record's
    ``traceback.txt`` holds is where that body is (it held hetflow's own frames, down to this check)."""
    return UserOpError(message, op=name, user_traceback=f"{message}\n(the body of op {name!r}: {defined_at(body)})\n")


def _read_only(x: Any) -> Any:
    if isinstance(x, np.ndarray) and x.flags.writeable:
        x = x.view()
        x.flags.writeable = False
    return x


def _computed_in(found: Any, op: oplib.Op, inputs: Sequence[Any], dtype: Dtype) -> bool:
    """Whether a body's result of numpy dtype ``found`` is in the compute type its inputs came in."""
    to = oplib.compute_type(op, inputs, dtype)
    if to is not None:
        return found == to
    # inputs as they are (integers, or anything for an op that moves values): any of theirs, or their common type
    if not inputs:
        return np.dtype(found).kind in "iub"  # a source of integers makes them in any integer type
    return any(found == x.dtype for x in inputs) or found == np.result_type(*inputs)


def _input_dtypes_rule(rule: Callable | None, name: str) -> Callable | None:
    if rule is None:
        return None

    def check(dtypes: list[Dtype], args: Mapping[str, Any]) -> str | None:
        try:
            problem = rule(*(d.value for d in dtypes), **args)
        except Exception as e:  # noqa: BLE001 - the user's check failing is reported with its place
            _, at = _user_frames(e)
            return f"its input_dtypes= raised {type(e).__name__}: {e} ({at})"
        return None if not problem else str(problem)

    return check


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
        return f"<op {self.name!r} from {defined_at(self.fn)}>"

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
            where = defined_at(fn)
            arity, args, _ = _signature(fn, self.name, where)
            own = _signature(self.fn, self.name, defined_at(self.fn))
            if arity != own[0] or set(args) != set(own[1]):  # the op's defaults and kinds are what it is called with
                # it is called as the op is: one that took other inputs or arguments failed each stage that ran
                # it with a TypeError of the call, and only on the machines with that vendor
                raise PluginError(f"op {self.name!r}: its {vendor} kernel takes {_said(arity, args)}, the op "
                                  f"{_said(*own[:2])}; a kernel has the op's signature", where)
            with REGISTRY_LOCK:
                op = oplib.REGISTRY[self.name]
                oplib.REGISTRY[self.name] = replace(op, kernels={**op.kernels, vendor: fn})
            return fn

        return register

    def _set_wgsl(self, source: str, params: Callable | None) -> None:
        with REGISTRY_LOCK:
            op = oplib.REGISTRY[self.name]
            oplib.REGISTRY[self.name] = replace(op, wgsl=oplib.Kernel("source", source, params=params))


def _said(arity: tuple[int, int], args: Mapping[str, oplib.Arg]) -> str:
    lo, hi = arity
    inputs = f"{lo} input{'s' * (lo != 1)}" if lo == hi else f"{lo} to {hi} inputs"
    named = ", ".join(args)
    return inputs + (f" and arguments ({named})" if named else " and no arguments")


def _builtin_spaces() -> frozenset[str]:
    """The namespaces of the built-in ops (``random``, ``quantize``), which no plugin's op may take."""
    return frozenset(n.split(".", 1)[0] for n in oplib.BUILTIN if "." in n)


def _caller() -> str:
    frame = inspect.stack()[2]
    return f"{frame.filename}:{frame.lineno}"




def op(name: str, *, dtypes: Iterable[str] | None = None, shape: Callable | None = None,
       cost: Callable | None = None, doc: str | None = None, exact: bool | None = None, moves: bool = False,
       input_dtypes: Callable | None = None, split: Callable | str | None = None) -> Callable[[Callable], OpFunction]:
    """Register the decorated function as op ``name`` (``ns.name``).

    One process may load several projects' plugins (a scheduler, a
    notebook, tests): a plugin loaded later takes over a name an earlier
    one defined, but not while a run in this process is running that
    name's op, and a manifest whose own plugins define
    one name twice is refused.

    Parameters
    ----------
    name : str
        Namespaced name, ``ns.name``; may not be a built-in op's, nor in a
        built-in op's namespace (``random``, ``quantize``).
    dtypes : list of str, optional
        The dtypes a stage of this op may ask for (default: the float ones).
        A stage without ``dtype:`` gets fp32, or its inputs' integer type
        when the op computes on integers, or fp64 when an input is fp64
        and the op supports it.
    shape : callable, optional
        ``shape(*input_shapes, **args) -> tuple``: the output shape, pure.
        Default: the first input's shape. An op without inputs needs one.
    cost : callable, optional
        ``cost(*input_shapes, **args) -> {"flops": int, "bytes": int}``.
    doc : str, optional
        One line for listings; default: the first line of the docstring.
    exact : bool, optional
        The op computes on integers: integer and bool inputs reach it as
        they are (numpy's promotion; arithmetic wraps) instead of as
        float32. Default: whether ``dtypes`` names an integer or bool dtype.
    moves : bool, optional
        The op only moves, selects or converts values: every input reaches
        it as it is, whatever its dtype.
    input_dtypes : callable, optional
        ``input_dtypes(*input_dtype_names, **args) -> str | None``: what is
        wrong with the inputs' dtypes (``"the indices must be integers"``),
        reported by ``hetflow validate`` at the stage's inputs.
    split : "rows" or callable, optional
        How one call divides across the devices of an executor that spans
        several (``devices: [0, 1]``): ``"rows"`` along the first axis, or
        ``split(input_shapes, args, output_shape)`` giving a
        :class:`~hetflow.executors.opdecl.Split` or None. Default: the call
        runs on the first device.

    Raises
    ------
    PluginError
        A :class:`~hetflow.HetflowError` (exit code 2): a malformed name, a
        built-in's name or namespace, a name defined twice, an unknown
        dtype, or an argument without a usable annotation.

    Examples
    --------
    >>> import numpy as np
    >>> from hetflow.executors import ops
    >>> @op("doc.solve", dtypes=["fp32", "fp64"], shape=lambda a, b: (a[1],))
    ... def solve(xp, a, b):
    ...     return xp.linalg.solve(a.T @ a, a.T @ b)
    >>> a = np.array([[2.0, 0.0], [0.0, 4.0]])
    >>> out = ops.run(np, "doc.solve", [a, np.array([2.0, 8.0])], {}, ops.Dtype.fp64)
    >>> out.dtype, out.tolist()
    (dtype('float64'), [1.0, 2.0])
    >>> @op("doc.mix", dtypes=["int64", "int32"])
    ... def mix(xp, x, *, by: int = 3):
    ...     return x * by
    >>> ops.REGISTRY["doc.mix"].exact
    True
    >>> ops.run(np, "doc.mix", [np.array([2**62], np.int64)], {}, ops.Dtype.int64).tolist()  # wraps, as int64 does
    [-4611686018427387904]
    """

    if callable(name) and not isinstance(name, str):
        # @op without its name: the function became the name, and the def's name the decorator
        raise PluginError(f"@op needs the op's name: write @op('ns.name') above def {getattr(name, '__name__', '?')}",
                          defined_at(name))
    if isinstance(dtypes, str) or (dtypes is not None and not isinstance(dtypes, Iterable)):
        called = sys._getframe(1)  # the line of @op(...) in the plugin, as every other problem of an op names one
        raise PluginError(f"op {name!r}: dtypes= is a list of dtype names (dtypes=['fp32']), not {dtypes!r}",
                          f"{called.f_code.co_filename}:{called.f_lineno}")

    def register(fn: Callable) -> OpFunction:
        where = defined_at(fn)
        if not isinstance(name, str) or not OP_NAME.fullmatch(name):
            raise PluginError(f"op name {name!r} is not namespaced: write 'ns.name' (letters, digits, '_', '-')", where)
        if name in oplib.BUILTIN:
            raise PluginError(f"op {name!r} would shadow the built-in op {name!r}; choose another name", where)
        space = name.split(".", 1)[0]
        if space in _builtin_spaces():
            # the editors' schema marks every name of a built-in namespace that is no built-in op as misspelt
            # (random.normall), and a later release may add that very name
            raise PluginError(f"op {name!r} is in the built-in namespace {space!r}, which is hetflow's own; "
                              "choose another namespace", where)
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
        if split is not None and split != "rows" and not callable(split):
            # anything else was called as a function where an executor spans devices, which failed there and ran the
            # op on its first device alone, saying nothing
            raise PluginError(f"op {name!r}: split= is 'rows' or a function of the input shapes, args and output "
                              f"shape, not {split!r}", where)
        for label, f, of in (("shape", shape, "shapes"), ("cost", cost, "shapes"),
                             ("input_dtypes", input_dtypes, "dtypes' names")):
            if f is not None and not callable(f):
                raise PluginError(f"op {name!r}: {label}= must be a function of the input {of} and args", where)
        module = getattr(fn, "__module__", None) or "__main__"
        loading = getattr(LOADING, "module", None)
        with REGISTRY_LOCK:
            old = oplib.REGISTRY.get(name)
            if loading is not None and name in LOADING.defined:
                raise PluginError(f"op {name!r} is defined twice: at {LOADING.defined[name]} and at {where}", where)
            if old is not None and old.invoke is None:
                raise PluginError(f"op {name!r} would shadow the built-in op {name!r}; choose another name", where)
            busy = in_use_elsewhere(name, loading or module)
            if busy is not None:
                raise PluginError(busy, where)
            text = doc if doc is not None else (inspect.getdoc(fn) or "").split("\n")[0]
            oplib.REGISTRY[name] = oplib.Op(
                name, arity, kinds, fn, _shape_rule(shape, name, where), args, doc=text,
                invoke=_invoker(name, fn, order), cost_rule=_cost_rule(cost, name), source=module,
                defined_at=where, identity=None if loading is not None else loose_identity(fn),
                exact=any(d.is_exact for d in kinds) if exact is None else bool(exact), moves=bool(moves),
                input_dtypes=_input_dtypes_rule(input_dtypes, name),
                split=split_rows if split == "rows" else split)
            if loading is not None:
                LOADING.defined[name] = where
        return OpFunction(fn, name)

    return register
