"""hetflow's loader against ``yaml.safe_load``: the same value or the same refusal, on generated YAML.

A grammar draws documents from the features where a loader can differ
from PyYAML's safe loader: tags of every kind on scalars, sequences and
mappings (``!!python/*``, ``!!binary``, ``!!timestamp``, ``!!set``,
``!!omap``, ``!!pairs``, custom ``!foo``), anchors and aliases (undefined
and recursive ones too), merge keys, duplicate and non-string keys,
block and flow styles, YAML 1.1 scalars, byte order marks, tabs, CRs,
control characters, and bytes that are not UTF-8. Each document goes
through both; the values must be equal, types included, or both must
refuse, hetflow at a FILE:LINE:COL. The loader's two documented limits
(``MAX_DEPTH``, and a recursive alias, which expands without end) are
the only places hetflow refuses what ``yaml.safe_load`` takes. The
reference is ``yaml.load(text, Loader=SafeLoader)``: ``yaml.safe_load``
with the loader's one documented difference, YAML 1.2's exponent
floats, and nothing else (``test_the_reference_is_safe_load_but_for_yaml_12_exponent_floats``).
A soup of YAML's pieces joined at random reaches where parsers part;
``tests/test_yaml_suite.py`` runs the official YAML test suite the same way.
"""

from __future__ import annotations

import math

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.loader import SafeLoader, load, loads

SCALARS = [
    # YAML 1.1 plain scalars: bools, nulls, ints in every base, sexagesimal, floats, timestamps, merge and value keys
    "yes", "No", "on", "OFF", "y", "n", "true", "False", "~", "null", "", "0", "-0", "012", "0o17", "0x1F", "0b101",
    "1_000", "190:20:30", "1:30", "-1:30.5", ".inf", "-.Inf", ".NaN", "1e3", "1.5e3", "3.", "-.5", "+12", "6.8523015e+5",
    "2001-12-14", "2001-12-14t21:59:43.10-05:00", "2001-12-14 21:59:43.10 -5", "2002-13-40", "<<", "=", "x", "hello world",
    "a-b", "-", "?", "0.", "._", "1__0", "0b", "0x", "1:60", "True_", "é", "日本",
    # quoted
    "'single ''q'''", '"double \\t \\u00e9 \\x41"', '"bad \\q escape"', "''", '""', "'yes'", '"012"',
]

TAGS = [
    "!!str", "!!int", "!!float", "!!bool", "!!null", "!!binary", "!!timestamp", "!!map", "!!seq", "!!set", "!!omap",
    "!!pairs", "!!merge", "!!value", "!!python/object:os.system", "!!python/name:os.system", "!!python/tuple",
    "!!python/object/apply:os.system", "!!python/str", "!foo", "!", "!<tag:yaml.org,2002:str>", "!<!bar>", "!!yaml",
]

BINARY = ["aGk=", "aGVsbG8gd29ybGQ=", "not base64!", "YQ"]

ANCHORS = ["a", "b", "c"]


def _scalar():
    return st.one_of(st.sampled_from(SCALARS), st.sampled_from(BINARY),
                     st.text(alphabet="abxyz019:-# .'\"", min_size=1, max_size=6))


def _props(draw) -> str:
    """An optional tag and anchor before a node."""
    parts = []
    if draw(st.integers(0, 5)) == 0:
        parts.append(draw(st.sampled_from(TAGS)))
    if draw(st.integers(0, 7)) == 0:
        parts.append("&" + draw(st.sampled_from(ANCHORS)))
    return " ".join(parts)


@st.composite
def node(draw, depth: int = 0):
    """A node as ("flow", text) that fits on one line, or ("block", lines) that needs its own lines."""
    kind = draw(st.sampled_from(["scalar", "scalar", "scalar", "alias", "flowmap", "flowseq", "blockmap", "blockseq"]
                                if depth < 4 else ["scalar", "alias"]))
    props = _props(draw)
    if kind == "scalar":
        text = draw(_scalar())
        return "flow", (props + " " + text).strip() if props else text
    if kind == "alias":
        return "flow", "*" + draw(st.sampled_from(ANCHORS * 3 + ["zz"]))
    n = draw(st.integers(0, 3))
    if kind == "flowseq":
        items = [flow_text(draw(node(depth + 1))) for _ in range(n)]
        return "flow", (props + " " if props else "") + "[" + ", ".join(items) + "]"
    if kind == "flowmap":
        pairs = [f"{draw(key())}: {flow_text(draw(node(depth + 1)))}" for _ in range(n)]
        return "flow", (props + " " if props else "") + "{" + ", ".join(pairs) + "}"
    lines: list[str] = [props] if props else []
    for _ in range(max(n, 1)):
        style, child = draw(node(depth + 1))
        head = "-" if kind == "blockseq" else f"{draw(key())}:"
        if style == "flow":
            lines.append(f"{head} {child}")
        else:
            # a child's tag and anchor stay on the head line; its entries go below, indented
            first = child[0] if child and not child[0].startswith(("-", "?")) and ":" not in child[0] else None
            lines.append(f"{head} {first}" if first else head)
            lines += ["  " + line for line in (child[1:] if first else child)]
    return "block", lines


def flow_text(n) -> str:
    style, body = n
    if style == "flow":
        return body
    return "{}"  # a block node cannot stand inside a flow collection


@st.composite
def key(draw):
    return draw(st.one_of(
        st.sampled_from(["k", "k", "name", "stages", "x", "y"]),  # repeats give duplicate keys
        st.sampled_from(["<<", "1", "~", "yes", "0x1F", "2001-12-14", ".nan", "[a, b]", "{a: 1}", "!!binary aGk=",
                         "!!python/tuple [a]", "!!set {a}", "'q'", "!foo k", "*a", "="]),
    ))


def _merge_lines(draw) -> list[str]:
    """Merge keys: a mapping, a list of them, or a value PyYAML refuses to merge."""
    target = draw(st.sampled_from(["*a", "[*a, *b]", "{m: 1, k: 2}", "1", "[*a, 1]", "*zz", "!!map {k: 3}"]))
    return [f"<<: {target}"]


@st.composite
def document(draw) -> str:
    lines: list[str] = []
    if draw(st.integers(0, 5)) == 0:
        lines.append(draw(st.sampled_from(["%YAML 1.1", "%YAML 1.2", "%YAML 2.0", "%TAG !e! tag:example.com,2000:"])))
        lines.append("---")
    # anchors defined up front so that later aliases usually find them
    for name in draw(st.sampled_from([[], ["a"], ANCHORS, ANCHORS, ANCHORS])):
        style, body = draw(node(2))
        lines.append(f"d{name}: &{name} " + (flow_text((style, body)) if draw(st.booleans()) else "{m: 0, k: 1}"))
    if draw(st.booleans()):
        lines += _merge_lines(draw)
    style, root = draw(node(0))
    if style == "flow" and draw(st.booleans()):
        lines = [root] if not lines else lines + [f"r: {root}"]
    elif style == "flow":
        lines.append(f"r: {root}")
    else:
        lines += root
    text = "\n".join(lines) + draw(st.sampled_from(["\n", "", "\n...\n", "\n---\nb: 2\n", "\n# end\n"]))
    # character-level noise where parsers differ: BOMs, tabs, CRs, control and non-ASCII characters
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 2]))):
        at = draw(st.integers(0, len(text)))
        noise = draw(st.sampled_from(["\ufeff", "\t", "\r", "\r\n", "\x85", "\u2028", "\x07", "\x7f", "\x00", "é",
                                      " ", "\n", ":", "- ", "#", "'", "\"", "{", "]", "\\", "&a ", "*a", "!!str ",
                                      "?", "a?b", "! ", "!!str,", ">#", "|-#", "\n%YAML 1.1#x\n"]))
        text = text[:at] + noise + text[at:]
    if draw(st.integers(0, 7)) == 0:
        text = "\ufeff" + text
    return text


def norm(value, seen=()):
    """A comparable form of a loaded value: types kept (1, 1.0 and True differ), NaN equal to NaN, order kept."""
    if id(value) in seen:
        return ("recursive",)
    if isinstance(value, (dict, list, tuple, set)):
        seen = seen + (id(value),)
    if isinstance(value, float):
        return ("float", "nan" if math.isnan(value) else repr(value))
    if isinstance(value, dict):
        return ("dict", tuple((norm(k, seen), norm(v, seen)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(norm(v, seen) for v in value))
    if isinstance(value, set):
        return ("set", tuple(sorted(repr(norm(v, seen)) for v in value)))
    return (type(value).__name__, value)


def recursive(value, seen=()) -> bool:
    if id(value) in seen:
        return True
    if isinstance(value, dict):
        return any(recursive(v, seen + (id(value),)) for v in value.values())
    if isinstance(value, (list, tuple)):
        return any(recursive(v, seen + (id(value),)) for v in value)
    return False


def depth(value) -> int:
    if isinstance(value, dict):
        return 1 + max((depth(v) for v in value.values()), default=0)
    if isinstance(value, (list, tuple, set)):
        return 1 + max((depth(v) for v in value), default=0)
    return 0


def theirs(source):
    try:
        # safe_load with the loader's one documented difference: YAML 1.2's exponent floats
        return "ok", yaml.load(source, Loader=SafeLoader)
    except Exception as e:  # noqa: BLE001 - SafeConstructor lets ValueError and others out for ``!!int yes``
        return "refused", e


def ours_text(text: str):
    try:
        return "ok", loads(text, "t.yaml").value
    except ManifestError as e:
        return "refused", e


def check_refusal(error: ManifestError, text: str, file: str) -> None:
    lines = max(1, len(text.splitlines()) + 1)
    for d in error.diagnostics:
        assert d.origin is not None and d.origin.file == file, str(d)
        assert 1 <= d.origin.line <= lines + 1 and d.origin.col >= 1, str(d)


def assert_equivalent(ours, theirs_, text, file="t.yaml") -> None:
    if theirs_[0] == "ok" and (recursive(theirs_[1]) or depth(theirs_[1]) > 64):
        # the loader's limits: a recursive alias expands without end
        assert ours[0] == "refused", (text, ours)
        return
    assert ours[0] == theirs_[0], (text, ours, theirs_)
    if ours[0] == "ok":
        assert norm(ours[1]) == norm(theirs_[1]), text
    else:
        check_refusal(ours[1], text, file)


def test_the_reference_is_safe_load_but_for_yaml_12_exponent_floats():
    """What the tests here exclude is the loader's one documented difference, and nothing else."""
    ours, pyyaml = SafeLoader.yaml_implicit_resolvers, yaml.SafeLoader.yaml_implicit_resolvers
    added = set()
    for first in set(ours) | set(pyyaml):
        extra = [r for r in ours.get(first, []) if r not in pyyaml.get(first, [])]
        assert [r for r in ours.get(first, []) if r not in extra] == pyyaml.get(first, []), first
        added |= {(tag, regexp.pattern) for tag, regexp in extra}
    assert added == {("tag:yaml.org,2002:float", r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$")}
    assert SafeLoader.yaml_constructors == yaml.SafeLoader.yaml_constructors
    numbers = "[1e-3, 1E6, -2e+3, 1.5e3, .5, 1.0e+3, 1e, e3, 1_0e3]"
    assert yaml.safe_load(numbers) == ["1e-3", "1E6", "-2e+3", "1.5e3", 0.5, 1000.0, "1e", "e3", "1_0e3"]
    assert loads(numbers).value == yaml.load(numbers, Loader=SafeLoader) == [0.001, 1e6, -2000.0, 1500.0, 0.5, 1000.0,
                                                                             "1e", "e3", "1_0e3"]


@settings(max_examples=1500, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large])
@given(document())
def test_loads_is_safe_load(text):
    assert_equivalent(ours_text(text), theirs(text), text)


# Pieces of YAML where parsers part: indicators without their space, tags and anchors against flow indicators,
# block scalar headers, directives, document markers; joined at random, most of what they make is not YAML.
SOUP = ["a", "1", "1e3", " ", "\n", "  ", "- ", "-", "? ", "?", ":", ": ", "[", "]", "{", "}", ", ", ",", "!", "! ", "!!str",
        "!x", "!<tag:x>", "&a ", "&a", "*a", "*a ", "#", " #c", "|", ">", "|-", ">+", "|2", '"q"', "'q'", "%YAML 1.1",
        "%TAG ! tag:x,1:", "---", "...", "--- ", "<<", "~", "@", "`", "x?y", '"a\nb"', "!e!", "&", "*", "!!set", "\t"]


@settings(max_examples=3000, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.sampled_from(SOUP), min_size=1, max_size=14).map("".join))
def test_token_soup_loads_as_safe_load(text):
    assert_equivalent(ours_text(text), theirs(text), text)


BAD_BYTES = [b"\xff", b"\xc3", b"\xe2\x82", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80", b"\x80", b"\xc0\xaf"]


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(text=document(), bad=st.one_of(st.none(), st.sampled_from(BAD_BYTES)), at=st.integers(0, 10_000),
       bom=st.booleans())
def test_load_of_bytes_is_safe_load_or_a_utf8_error_at_the_first_bad_byte(tmp_path_factory, text, bad, at, bom):
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")
    if bad is not None:
        at = min(at, len(data))
        data = data[:at] + bad + data[at:]
    path = tmp_path_factory.getbasetemp() / "doc.yaml"
    path.write_bytes(data)
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as e:
        with pytest.raises(ManifestError) as refused:
            load(path)
        (d,) = refused.value.diagnostics
        before = data[:e.start].decode("utf-8")
        line = before.count("\n") + before.count("\r") - before.count("\r\n") + before.count("\x85") \
            + before.count("\u2028") + before.count("\u2029") + 1
        assert (d.origin.line, d.origin.col) == (line, len(before) - max(map(before.rfind, "\n\r\x85\u2028\u2029")))
        assert d.message.startswith(f"the file is not UTF-8: byte 0x{data[e.start]:02x}")
        assert theirs(data)[0] == "refused"  # PyYAML refuses it too (no UTF-16 BOM is ever generated first)
        return
    try:
        got = "ok", load(path).value
    except ManifestError as e:
        got = "refused", e
    assert_equivalent(got, theirs(data), decoded, str(path))
