"""The sub-graph plan payload: how the engine hands a partition to an executor of any vendor.

A :class:`~hetflow.executors.base.SubGraphPlan` carries, as UTF-8 JSON,
the partition the planner assigned to one executor::

    {"inputs":  ["x"],                       # tensors the caller passes, in order
     "nodes":   [{"id": "h", "op": "matmul", "args": {}, "dtype": "fp32",
                  "inputs": ["x", "w"]}, ...],  # in an order where inputs come first
     "outputs": ["h"]}                       # tensors returned, in order

The engine's lowering encodes it and every executor (CPU, CUDA, Vulkan, a
third party's) decodes it, so the codec lives here, beside the contract,
where both may import it: ``hetflow.executors`` never imports
``hetflow.engine``.

Examples
--------
>>> plan = encode_plan(Vendor.cpu, ["x"], [{"id": "y", "op": "relu", "args": {}, "dtype": "fp32", "inputs": ["x"]}], ["y"])
>>> decode_plan(plan)["outputs"], plan.vendor.value
(['y'], 'cpu')
>>> decode_plan(SubGraphPlan(Vendor.cpu, b"{"))
Traceback (most recent call last):
...
hetflow.executors.base.Backend: backend error: undecodable sub-graph plan: ...
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from typing import Any, Mapping, Sequence

import orjson

from hetflow.executors.base import Backend, SubGraphPlan, Vendor

__all__ = ["encode_plan", "decode_plan", "loads_exact"]

# a number of 19 digits or more, as a value (after a colon, bracket or comma, before a comma or a closing one):
# orjson parses an integer beyond 64 bits as a float, without a word; a digest's hex holds such runs of digits
_LONG_INTEGER = re.compile(rb"[:\[,]\s*-?\d{19,}\s*[,\]}]")


def loads_exact(text: bytes) -> Any:
    """JSON ``text`` parsed with every value as written: orjson's parse, the standard library's where orjson would
    not keep a value (an integer of 19 digits or more, which it may turn into a float; NaN and the infinities,
    which it refuses) or where the text is not JSON (for its message).

    >>> loads_exact(b'{"seed": 18446744073709551616, "x": [1.5]}')
    {'seed': 18446744073709551616, 'x': [1.5]}
    """
    if _LONG_INTEGER.search(text) is None:
        try:
            return orjson.loads(text)
        except orjson.JSONDecodeError:
            pass
    return json.loads(text)


def encode_plan(vendor: Vendor, inputs: Sequence[str], nodes: Sequence[Mapping[str, Any]], outputs: Sequence[str]) -> SubGraphPlan:
    """A :class:`SubGraphPlan` for ``vendor`` holding the partition's inputs, nodes and outputs.

    The node dicts are encoded as they are, not copied. orjson writes the
    JSON (a 100,000-stage run encodes every stage once; the standard
    library took 1.0 s of it) unless the text holds a ``null``: orjson
    spells NaN and the infinities so, and an op's arguments may hold
    them, which the standard library writes as JSON's ``NaN`` and
    ``Infinity`` spellings that :func:`decode_plan` reads back.
    """
    payload = {"inputs": list(inputs), "nodes": [n if type(n) is dict else dict(n) for n in nodes],
               "outputs": list(outputs)}
    try:
        text = orjson.dumps(payload, option=orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS)
    except (TypeError, orjson.JSONEncodeError):
        text = None  # what orjson cannot write: an integer beyond 64 bits (a seed may be any integer)
    if text is None or (b"null" in text and _non_finite(payload)):
        text = json.dumps(payload, sort_keys=True).encode()
    return SubGraphPlan(vendor, text)


def _non_finite(value: Any) -> bool:
    """Whether a NaN or an infinity lies anywhere in ``value``: what orjson would write as ``null``.

    Asked only of a text that holds ``null``, which every imported model's
    plan does for a None argument: the walk skips strings (an input's
    bytes, base64 in the plan) and costs far less than the standard
    library's encoding.

    >>> _non_finite({"a": [1.0, None, "x"]}), _non_finite({"a": [{"b": float("-inf")}]})
    (False, True)
    """
    stack = [value]
    while stack:
        v = stack.pop()
        if type(v) is float:
            if not math.isfinite(v):
                return True
        elif isinstance(v, dict):
            stack.extend(v.values())
        elif isinstance(v, (list, tuple)):
            stack.extend(v)
        elif isinstance(v, float) and not math.isfinite(v):  # a float subclass (numpy's float64)
            return True
    return False


def decode_plan(plan: SubGraphPlan) -> dict:
    """The payload of ``plan`` as a dict; an undecodable one is the executor's :class:`Backend` error.

    A payload is decoded once and the dict shared by every call with the
    same bytes (a partition retried, or run again after a lost worker; a
    run of many small partitions paid a JSON parse per task): callers
    read it and never change it.
    """
    payload = plan.payload
    with _DECODED_LOCK:
        found = _DECODED.get(payload)
        if found is not None:
            _DECODED.move_to_end(payload)
            return found
    decoded = _decode(payload)
    if len(payload) <= _KEPT_BYTES // 16:
        global _DECODED_SIZE
        with _DECODED_LOCK:
            if payload not in _DECODED:
                _DECODED[payload] = decoded
                _DECODED_SIZE += len(payload)
                while _DECODED_SIZE > _KEPT_BYTES:
                    gone, _ = _DECODED.popitem(last=False)
                    _DECODED_SIZE -= len(gone)
    return decoded


# The payloads decode_plan keeps decoded, newest used last, and their bytes together. Bounded by bytes, not by
# count: a payload carries the arrays given as a run's inputs, and a process making runs in a loop kept each new
# array three times over (8 MB inputs, 16,384 payloads kept: 4.7 GB after 200 runs). One larger than a sixteenth
# of the bound is decoded on every call.
_KEPT_BYTES = 16 << 20
_DECODED: OrderedDict[bytes, dict] = OrderedDict()
_DECODED_SIZE = 0
_DECODED_LOCK = threading.Lock()


def _decode(payload: bytes) -> dict:
    try:
        return loads_exact(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise Backend(f"undecodable sub-graph plan: {e}") from None
