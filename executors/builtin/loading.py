"""Arrays from outside the pipeline: ``load`` reads a ``.npy``, ``.npz`` or ``.safetensors`` file, ``input`` takes an array handed in from Python.

:func:`read_array` reads a file's array, or only its header, which is
how the planner knows a ``load`` stage's shape before anything runs;
:func:`lossy_load` says why a file's values would not survive conversion
to the stage's dtype (the manifest check refuses that unless ``cast:
true``).

Examples
--------
>>> lossy_load(np.array([1.0, 1e6]), Dtype.fp8e4m3)
'float64 values up to 1e+06 are beyond the range of fp8e4m3 (largest 448)'
"""

from __future__ import annotations

import math
import os
import weakref
from typing import Any

import numpy as np

from hetflow.executors.base import Dtype
from hetflow.executors.files import check_unchanged, file_stamp, not_a_file
from hetflow.executors.opdecl import (ALL_DTYPES, QUANT_MAX, Arg, Kernel, Op, Shape, check_value, from_shape_arg,
                                     to_dtype)

__all__ = ["OPS", "LOAD_FORMATS", "read_array", "lossy_load", "ml_finfo_max", "file_dtype"]


LOAD_FORMATS = (".npy", ".npz", ".safetensors")
"""The file types ``load`` reads, by suffix."""

_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "I64": "int64", "I32": "int32",
                       "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "U16": "uint16",
                       "U32": "uint32", "U64": "uint64"}


def read_array(path: str, key: str | None = None, *, header: bool = False, raw: bool = False) -> Any:
    """The array ``load`` reads from ``path`` (and ``key`` in an archive).

    With ``header``, only what the file says about the array, as a
    ``(shape, numpy dtype)`` pair, without reading its values. Raises
    :class:`ValueError` with a message that says what is wrong and what
    the file holds.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> np.savez(os.path.join(folder, "d.npz"), x=np.ones((2, 3), np.float32), y=np.arange(2))
    >>> read_array(os.path.join(folder, "d.npz"), "x", header=True)
    ((2, 3), dtype('float32'))
    >>> read_array(os.path.join(folder, "d.npz"), "z")
    Traceback (most recent call last):
    ...
    ValueError: d.npz has no array 'z' (it holds: x, y)

    With ``raw``, an array of raw bytes of a narrow dtype's width
    (``|V2``, ``|V1``: how hetflow writes bf16, fp8 and int4 outputs) is
    read too, for :func:`raw_as` to view as the dtype it is taken as.
    """
    found = _read_array(path, key, header=header, raw=raw)
    _fits_a_tensor(os.path.basename(path), key, found[0] if header else found.shape)
    return found


def _read_array(path: str, key: str | None, *, header: bool, raw: bool = False) -> Any:
    name = os.path.basename(path)
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in LOAD_FORMATS:
        raise ValueError(f"{name}: load reads {', '.join(LOAD_FORMATS)} files, not {suffix or 'a file without a suffix'}")
    if not os.path.isfile(path):
        raise ValueError(f"{path}: {not_a_file(path)}")
    try:
        if suffix == ".npy":
            if key is not None:
                raise ValueError(f"{name} is a .npy file, which holds one array: leave out 'key'")
            array = np.load(path, mmap_mode="r", allow_pickle=False)
            _numeric(name, key, array.dtype, raw)
            return (tuple(array.shape), array.dtype) if header else np.asarray(array)
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as archive:
                key = _archive_key(name, key, list(archive.files))
                if not header:
                    array = archive[key]
                    _numeric(name, key, array.dtype, raw)
                    return array
                with archive.zip.open(key + ".npy") as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        array = archive[key]
                        shape, dtype = array.shape, array.dtype
                    _numeric(name, key, dtype, raw)
                    # the member's CRC is checked only once it is read to its end: a damaged archive fails here
                    while member.read(1 << 20):
                        pass
                return tuple(shape), dtype
        if not header and key is not None:
            mapped = _mapped_safetensors(path, key)
            if mapped is not None:
                return mapped
        from safetensors import SafetensorError, safe_open

        try:
            with safe_open(path, framework="numpy") as f:
                key = _archive_key(name, key, list(f.keys()))
                if not header:
                    return f.get_tensor(key)
                part = f.get_slice(key)
                kind = part.get_dtype()
                if kind not in _SAFETENSORS_DTYPES:
                    raise ValueError(f"{name}: array {key!r} is {kind}, which numpy cannot read "
                                     f"(load reads {', '.join(_SAFETENSORS_DTYPES)})")
                return tuple(part.get_shape()), np.dtype(_SAFETENSORS_DTYPES[kind])
        except SafetensorError as e:
            raise ValueError(f"{name} is not a readable safetensors file: {e}") from None
    except ValueError as e:
        if str(e).startswith(name) or str(e).startswith(path):
            raise
        raise ValueError(f"{name} does not parse as {suffix}: {_in_our_words(e)}") from None
    except Exception as e:  # noqa: BLE001 - numpy and zipfile fail on damaged bytes in many ways (BadZipFile, zlib, tokenize)
        raise ValueError(f"{name} does not parse as {suffix}: {_in_our_words(e)}") from None


def _mapped_safetensors(path: str, key: str) -> np.ndarray | None:
    """Array ``key`` of a safetensors file as a read-only view of its bytes mapped into memory, not a copy.

    Only a file whose header is whole and plain: every entry a dtype numpy
    reads, its bytes exactly its shape's, the entries tiling the data that
    follows the header to the file's end (what ``safe_open`` checks). Any
    other file gives None, and ``safe_open`` reads it and words its error.
    ``safe_open``'s ``get_tensor`` copies the bytes into a new array: 28 MB
    of a GPT-2 layer's weights took 19 ms a run that the mapping skips
    (the page cache holds the file; a matmul reads the pages in place).
    As with a ``.npy`` file (``mmap_mode="r"``), a file replaced by a
    rename leaves the arrays read before with the old bytes; one cut short
    in place while they live would fault them.
    """
    import json

    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        start = f.read(8)
        if len(start) < 8:
            return None
        n = int.from_bytes(start, "little")
        if n > min(size - 8, 100 << 20):
            return None
        try:
            entries = json.loads(f.read(n))
        except ValueError:
            return None
        if not isinstance(entries, dict) or not isinstance(entries.get(key), dict) or key == "__metadata__":
            return None
        if entries[key].get("dtype") == "BOOL":
            return None  # a byte other than 0 or 1 would be a bool numpy never makes; safe_open's copy is small
        spans = []
        for name, entry in entries.items():
            if name == "__metadata__":
                continue
            try:
                kind, shape, (begin, end) = entry["dtype"], entry["shape"], entry["data_offsets"]
                itemsize = np.dtype(_SAFETENSORS_DTYPES[kind]).itemsize
                if not all(type(d) is int and d >= 0 for d in [*shape, begin, end]):
                    return None
            except (KeyError, TypeError, ValueError):
                return None
            if end - begin != math.prod(shape) * itemsize:
                return None
            spans.append((begin, end))
        spans.sort()
        if [b for b, _ in spans] != [0] + [e for _, e in spans[:-1]] or (spans[-1][1] if spans else 0) != size - 8 - n:
            return None
        whole = _whole_file(f, path)
    entry = entries[key]
    begin, end = entry["data_offsets"]
    dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]]).newbyteorder("<")  # safetensors is little-endian
    return whole[8 + n + begin:8 + n + end].view(dtype).reshape(entry["shape"])


def _whole_file(f: Any, path: str) -> np.ndarray:
    """The bytes of open file ``f``, mapped read-only: one mapping a file while any array of it lives.

    A mapping holds a file descriptor (Python's mmap keeps its own): one
    a file, not one an array, so a model of a thousand weights does not
    run out of them.
    """
    import mmap

    st = os.fstat(f.fileno())
    # a file renamed over it or rewritten in place has another stamp: either is mapped afresh
    key = (os.path.abspath(path), *file_stamp(st))
    whole = _MAPPED.get(key)
    if whole is None:
        whole = np.frombuffer(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), np.uint8)
        _MAPPED[key] = whole
    return whole


_MAPPED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


#: numpy's and zipfile's words for a file they cannot read (their advice, allow_pickle= say, is not for
#: a manifest), and what they mean here
_LIBRARY_WORDS = (
    ("allow_pickle", "it is not an array file numpy wrote, or it holds pickled Python objects, which hetflow "
                     "never reads (save a numeric array with numpy.save)"),
    ("Python objects in dtype", "it holds Python objects, which hetflow never reads (save a numeric array)"),
    ("mmap length is greater than file size", "the file is shorter than its header says (cut short?)"),
    ("cannot reshape array", "the file is shorter than its header says (cut short?)"),
    ("the magic string is not correct", "it does not start with numpy's .npy header"),
    ("No data left in file", "the file is empty (0 bytes) or ends inside its header"),
)


def _in_our_words(error: BaseException) -> str:
    """What a numpy or zipfile error reading a file means, in hetflow's terms; the library's own
    message, with its exception's name, when it is not one of the known ones.

    >>> _in_our_words(ValueError("Object arrays cannot be loaded when allow_pickle=False"))
    'it is not an array file numpy wrote, or it holds pickled Python objects, which hetflow never reads (save a numeric array with numpy.save)'
    """
    text = str(error)
    for theirs, ours in _LIBRARY_WORDS:
        if theirs in text:
            return ours
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


#: the dtypes whose values hetflow writes as raw bytes of their width, by width
RAW_WIDTHS = {2: (Dtype.bf16,), 1: (Dtype.fp8e4m3, Dtype.fp8e5m2, Dtype.int4)}


def _numeric(name: str, key: str | None, dtype: np.dtype, raw: bool = False) -> None:
    """Refuse arrays of strings, objects, records or dates: ``load`` reads numbers (and, with ``raw``, the raw
    bytes of a narrow dtype)."""
    if raw and _is_raw(dtype):
        return
    if dtype.kind not in "biufc":
        what = f"{name}: array {key!r}" if key else name
        raise ValueError(f"{what} holds {dtype} values; load reads numbers (bool, integer, float or complex)")


def _is_raw(dtype: np.dtype) -> bool:
    return dtype.kind == "V" and dtype.fields is None and dtype.subdtype is None and dtype.itemsize in RAW_WIDTHS


def raw_as(array: Any, dtype: Dtype) -> tuple[Any, str | None]:
    """``array`` viewed as ``dtype`` where it holds raw bytes (``|V2``, ``|V1``) of that dtype's width, and
    why not where it cannot be (the dtype is not one hetflow writes so); any other array as it is.

    >>> raw_as(np.zeros(2, "V2"), Dtype.bf16)[0].dtype.name
    'bfloat16'
    >>> raw_as(np.zeros(2, "V1"), Dtype.fp32)[1]
    'it holds raw 1-byte values, as hetflow writes fp8e4m3, fp8e5m2 and int4 outputs, not fp32 ones'
    """
    if not _is_raw(array.dtype):
        return array, None
    widths = RAW_WIDTHS[array.dtype.itemsize]
    if dtype not in widths:
        names = [d.value for d in widths]
        said = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        return array, (f"it holds raw {array.dtype.itemsize}-byte values, as hetflow writes {said} outputs, "
                       f"not {dtype.value} ones")
    return array.view(dtype.numpy), None


def _fits_a_tensor(name: str, key: str | None, shape: Any) -> None:
    """Refuse an array of a shape no tensor has (rank over 8), by the rule an op's ``shape`` argument is
    checked by: numpy reads such a file, so without this the stage would plan and fail only when it runs."""
    expected = check_value("shape", [int(d) for d in shape])
    if expected:
        what = f"{name}: array {key!r}" if key else name
        raise ValueError(f"{what} has shape {[int(d) for d in shape]}, of rank {len(shape)}; "
                         f"a tensor must have {expected}")


def _archive_key(name: str, key: str | None, keys: list[str]) -> str:
    if key is None:
        if len(keys) == 1:
            return keys[0]
        raise ValueError(f"{name} holds {len(keys)} arrays: say which with 'key' (one of: {', '.join(keys) or 'none'})")
    if key not in keys:
        raise ValueError(f"{name} has no array {key!r} (it holds: {', '.join(keys) or 'nothing'})")
    return key


def lossy_load(array: Any, dtype: Dtype) -> str | None:
    """Why converting ``array`` to ``dtype`` would lose values, or None.

    Complex values lose their imaginary part; finite floats beyond a float
    dtype's range become infinities; integers (labels, indices) must come
    back unchanged; an integer dtype takes only whole values within its
    range, ``bool`` only 0 and 1. Float rounding within range is the
    numeric rule, not a loss.

    >>> lossy_load(np.array([1, 2, 3]), Dtype.fp32) is None
    True
    >>> lossy_load(np.array([2**40 + 1]), Dtype.fp32)
    'int64 values such as 1099511627777 do not survive conversion to fp32'
    >>> lossy_load(np.array([2**40]), Dtype.int32)
    'int64 values such as 1099511627776 are beyond the range of int32 (-2147483648 to 2147483647)'
    >>> lossy_load(np.array([0.5]), Dtype.int64)
    'float64 values such as 0.5 are not whole numbers, which int64 holds'
    """
    array = np.asarray(array)
    if array.dtype.kind == "c":
        return f"{array.dtype} values have an imaginary part, which {dtype.value} drops"
    if array.size == 0:
        return None
    flat = array.reshape(-1)
    if dtype is Dtype.bool:
        bad = np.flatnonzero((flat != 0) & (flat != 1))
        return f"{array.dtype} values such as {flat[bad[0]]} are neither 0 nor 1, which bool holds" if bad.size else None
    if dtype.kind == "int":
        info = np.iinfo(dtype.numpy)
        if array.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(flat))
            if bad.size:
                return f"{array.dtype} values such as {flat[bad[0]]} have no {dtype.value} value"
            bad = np.flatnonzero(flat != np.trunc(flat))
            if bad.size:
                return f"{array.dtype} values such as {flat[bad[0]]} are not whole numbers, which {dtype.value} holds"
        if array.dtype.kind == "b":
            return None
        low, high = flat.min(), flat.max()
        beyond = high if high > info.max else low if low < info.min else None
        if beyond is not None:
            return (f"{array.dtype} values such as {beyond} are beyond the range of {dtype.value} "
                    f"({info.min} to {info.max})")
        return None
    if array.dtype.kind == "b":
        return None
    if array.dtype.kind == "f":
        finite = flat[np.isfinite(flat)]
        if finite.size == 0 or dtype is Dtype.fp64:
            return None
        top = float(np.max(np.abs(finite)))
        limit = float(QUANT_MAX.get(dtype, 0.0)) or float(ml_finfo_max(dtype))
        if top > limit:
            return f"{array.dtype} values up to {top:g} are beyond the range of {dtype.value} (largest {limit:g})"
        return None
    if array.dtype.kind in "iu":
        if dtype is Dtype.fp64:
            exact = np.abs(flat.astype(np.float64)) <= 2.0**53
            bad = np.flatnonzero(~exact)
            if bad.size:
                return f"{array.dtype} values such as {flat[bad[0]]} do not survive conversion to {dtype.value}"
            return None
        back = to_dtype(np, flat.astype(np.float64).astype(np.float32), dtype).astype(np.float64)
        bad = np.flatnonzero(back != flat.astype(np.float64))
        if bad.size:
            return f"{array.dtype} values such as {flat[bad[0]]} do not survive conversion to {dtype.value}"
        if np.any(np.abs(flat.astype(np.float64)) > 2**24):
            worst = flat[int(np.argmax(np.abs(flat.astype(np.float64))))]
            return f"{array.dtype} values such as {worst} do not survive conversion to {dtype.value}"
    return None


def ml_finfo_max(dtype: Dtype) -> float:
    """The largest finite value of a float dtype (ml_dtypes' finfo for the narrow ones)."""
    import ml_dtypes

    return float(ml_dtypes.finfo(dtype.numpy).max)


def _load_shape(inputs: list[Shape], args: dict) -> Shape | None:
    try:
        return read_array(args["path"], args.get("key"), header=True)[0]
    except ValueError:
        return None


# -- bodies ---------------------------------------------------------------------


_KEPT = {np.dtype(np.int16): Dtype.int16, np.dtype(np.int32): Dtype.int32, np.dtype(np.int64): Dtype.int64,
         np.dtype(np.uint8): Dtype.uint8, np.dtype(np.bool_): Dtype.bool, np.dtype(np.uint16): Dtype.int32,
         np.dtype(np.uint32): Dtype.int64, np.dtype(np.uint64): Dtype.int64}


def file_dtype(numpy_dtype: Any) -> Dtype:
    """The dtype a ``load`` stage that names none gives a file's values.

    Integers and bools keep their type (an unsigned type hetflow lacks
    becomes the signed one that holds all its values; uint64 becomes
    int64, and values beyond it are refused as lossy); floats (and int8,
    a quantized activation here) are fp32, as a stage is by default.
    """
    return _KEPT.get(np.dtype(numpy_dtype).newbyteorder("="), Dtype.fp32)


def _load_result(inputs: list[Dtype], args: Any) -> Dtype:
    return file_dtype(read_array(args["path"], args.get("key"), header=True)[1])


def _load(xp: Any, inputs: list, args: dict) -> Any:
    expected = args.get("read_sha256")  # the digest the run recorded when it started
    if expected is not None:
        check_unchanged(args["path"], expected, args.get("read_stamp"))
    host = np.asarray(read_array(args["path"], args.get("key")))
    if expected is not None:
        # replaced while it was read: what was read may be either file's
        check_unchanged(args["path"], expected, args.get("read_stamp"))
    if host.dtype.kind == "c":
        host = host.real
    if host.dtype.kind in "iub":
        return xp.asarray(host)  # converted to the stage's dtype by the numeric rule: exact, wrapping, or refused at validate
    with np.errstate(over="ignore"):  # validate refused lossy values unless the manifest asked to convert anyway
        return xp.asarray(host if host.dtype == np.float64 else host.astype(np.float32, copy=False))


def _input(xp: Any, inputs: list, args: dict) -> Any:
    # The engine puts the array handed to the run into ``data`` (its portable bytes, base64) when the run starts.
    import base64

    from hetflow.executors.base import PortableActivation, TensorShape

    if args.get("data") is None:
        raise ValueError("no array was handed in for this input stage (hetflow.run(..., inputs={STAGE: array}))")
    portable = PortableActivation(TensorShape(tuple(args["shape"])), Dtype(args["dtype"]), base64.b64decode(args["data"]))
    return xp.asarray(portable.to_array())


OPS = [
    Op("load", (0, 0), ALL_DTYPES, _load, _load_shape,
       {"path": Arg("path", required=True, doc="a .npy, .npz or .safetensors file, relative to the manifest's folder"),
        "key": Arg("str?", default=None, doc="the array's name in a .npz or .safetensors file"),
        "cast": Arg("bool", default=False, doc="convert to the stage's dtype even where values are lost")},
       doc="read an array from a .npy, .npz (key) or .safetensors (key) file (path relative to the manifest's folder); "
           "integers and bools keep their type unless the stage names a dtype, floats are fp32",
       wgsl=Kernel("host"), moves=True, result=_load_result),
    Op("input", (0, 0), ALL_DTYPES, _input, from_shape_arg,
       {"shape": Arg("shape", required=True, doc="output shape"),
        "dtype": Arg("dtype", required=True, doc="dtype of the array handed in")},
       doc="an array handed in from Python: hetflow.run(..., inputs={STAGE: array}) of this shape and dtype",
       wgsl=Kernel("host"), moves=True, result=lambda inputs, args: Dtype(args["dtype"])),
]
