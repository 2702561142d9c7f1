"""The loader's happy path builds the tree without marks; it must agree with the precise build.

``loads`` builds a document's values alone and recovers the marks from
the text only when an origin is asked for; anything unusual goes to the
precise build. These tests hold the two builds to the same tree, the
same marks and the same diagnostics.
"""

from __future__ import annotations

import datetime
import pickle

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.engine.manifest import loader as ld
from hetflow.engine.manifest import validate as mf
from hetflow.engine.manifest import schemacheck
from hetflow.engine.errors import ManifestError, Origin


def precise(text: str, file: str = "t.yaml") -> mf.Document:
    loader, root = ld._compose(text, file)
    return ld._precise(loader, root, file, text)


def outcome(build, text: str):
    try:
        doc = build(text)
    except ManifestError as e:
        return "error", [str(d) for d in e.diagnostics]
    return "ok", doc.value, dict(doc.marks), dict(doc.key_marks)


TRICKY = [
    "a: 1\nb: [x, 'y', \"z\"]\n",
    "a: yes\nb: off\nc: ~\nd: 0x1f\ne: 012\nf: 1_000\ng: .inf\nh: -.5\ni: 1.5e3\nj: 2001-12-14\n",
    "a: &x {b: 1}\nc: *x\n",
    "base: &b {x: 1}\nderived:\n  <<: *b\n  y: 2\n",
    "a: 1\na: 2\n",
    "1: x\n",
    "? [a, b]\n: c\n",
    "a: !!str 12\nb: !!int '7'\nc: !!binary aGk=\n",
    "a: !!python/object:os.system x\n",
    "a: !custom x\n",
    "= : v\n",
    "a: |\n  line\n  two\n",
    "a: 'it''s'\nb: \"tab\\tq\"\n",
    "stages:\n  s0: {op: ones, args: {shape: [2]}}\n  s1:\n    op: relu\n    inputs: [s0]\n",
    "a: " + "[" * 70 + "]" * 70 + "\n",
    "a: []\nb: {}\nc: ''\nd:\n",
    "a: [1, [2, [3, {b: [4]}]]]\n",
]


@pytest.mark.parametrize("text", TRICKY)
def test_fast_and_precise_builds_agree(text):
    assert outcome(lambda t: mf.loads(t, "t.yaml"), text) == outcome(precise, text)


def test_plain_values_match_pyyaml_safe_load():
    text = TRICKY[1]
    doc = mf.loads(text, "t.yaml")
    # safe_load's values but one: YAML 1.2 reads 1.5e3 as a number
    assert doc.value == {**yaml.safe_load(text), "i": 1500.0}
    assert doc.value["a"] is True and doc.value["e"] == 10 and doc.value["h"] == "-.5"
    assert doc.value["j"] == datetime.date(2001, 12, 14)


def test_alias_bomb_and_depth_still_refused():
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    with pytest.raises(ManifestError, match="values once aliases are expanded"):
        mf.loads(bomb, "bomb.yaml")
    with pytest.raises(ManifestError, match="nesting deeper than 64 levels"):
        mf.loads("a: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml")


def test_marks_are_recovered_only_when_asked_for():
    text = "version: 1\nname: demo\nstages:\n  x: {op: ones}\n"
    doc = mf.loads(text, "demo.yaml")
    assert doc._marks is None
    where = doc.at(("stages", "x", "op"))
    key = doc.key_at(("stages", "x"))
    assert doc._marks is None, "handing out an origin must not parse the text again"
    assert (str(where), str(key)) == ("demo.yaml:4:11", "demo.yaml:4:3")
    assert dict(doc.marks) == dict(precise(text, "demo.yaml").marks)


def _fast_built(text: str) -> bool:
    try:
        return mf.loads(text, "t.yaml")._marks is None
    except ManifestError:
        return False


@pytest.mark.parametrize("text", [t for t in TRICKY if _fast_built(t)])
def test_pending_origins_find_what_the_marks_say(text):
    """A pending origin walks the YAML nodes; it must land where the precise build's marks point."""
    exact = precise(text)
    paths = list(exact.marks) + [p + ("missing",) for p in exact.marks] + [p + (7,) for p in exact.marks]
    fresh = mf.loads(text, "t.yaml")
    for path in paths:
        assert str(fresh.at(path)) == str(exact.at(path)), path
        assert str(fresh.key_at(path)) == str(exact.key_at(path)), path


def test_pending_origins_compare_sort_and_pickle_like_resolved_ones():
    doc = mf.loads("a: 1\nb: 2\n", "o.yaml")
    a, b = doc.at(("a",)), doc.key_at(("b",))
    assert a == Origin("o.yaml", 1, 4) and b == Origin("o.yaml", 2, 1)
    assert sorted([b, a]) == [a, b] and hash(a) == hash(Origin("o.yaml", 1, 4))
    again = pickle.loads(pickle.dumps(doc.at(("b",))))
    assert type(again) is Origin and again == Origin("o.yaml", 2, 4)


def test_stage_origins_point_at_the_stage_lines():
    text = "version: 1\nname: n\nexecutors: {h: {vendor: cpu}}\nstages:\n  x: {op: ones, args: {shape: [2]}}\n  y:\n    op: relu\n    inputs: [x]\n    executor: h\noutputs: {o: y}\n"
    m = mf.compile_manifest(mf.loads(text, "s.yaml"))
    y = m.stages["y"]
    assert [str(o) for o in (y.origin, y.op_origin, y.inputs_origin, y.executor_origin)] == [
        "s.yaml:6:3", "s.yaml:7:9", "s.yaml:8:13", "s.yaml:9:15"]
    assert m.stages["x"].executor_origin is None and str(m.stages["x"].inputs_origin) == "s.yaml:5:3"


scalars = st.one_of(
    st.integers(-10**6, 10**6), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(alphabet="abcyesnoONfl0123456789.-_~: ", max_size=8),
)
trees = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.text(alphabet="abkeyon0123_-", min_size=1, max_size=5), inner, max_size=4)),
    max_leaves=20,
)


@settings(max_examples=150, deadline=None)
@given(tree=st.dictionaries(st.text(alphabet="abkey_", min_size=1, max_size=4), trees, min_size=1, max_size=4),
       flow=st.sampled_from([None, True, False]))
def test_random_documents_build_the_same_both_ways(tree, flow):
    text = yaml.dump(tree, Dumper=ld.SafeDumper, default_flow_style=flow, sort_keys=False)
    assert outcome(lambda t: mf.loads(t, "t.yaml"), text) == outcome(precise, text)
    fresh, exact = mf.loads(text, "t.yaml"), precise(text)
    for path in exact.marks:
        assert (str(fresh.at(path)), str(fresh.key_at(path))) == (str(exact.at(path)), str(exact.key_at(path)))


def _positions(shallow: dict) -> dict:
    return {path: {k: (a.line, a.column, b.line, b.column) for k, (a, b) in level.items()} for path, level in shallow.items()}


def node_built(text: str):
    """What the node path's fast build makes of ``text``: its value and shallow marks, or "declined"."""
    try:
        loader, root = ld._compose(text, "t.yaml")
        shallow: dict = {}
        return ld._fast_build(loader, root, 0, [1], shallow), _positions(shallow)
    except Exception:  # noqa: BLE001 - whatever it declines or cannot build
        return "declined"


def event_built(text: str):
    try:
        value, shallow = ld._event_build(text)
    except Exception:  # noqa: BLE001
        return "declined"
    return value, _positions(shallow)


@pytest.mark.parametrize("text", TRICKY + [
    "a: !!python/tuple [1, 2]\n", "a: !!set {x, y}\n", "d:\n  <<: [{x: 1}]\n", "a: *u\n", "a: b: c\n",
    "- a\n- {b: 1}\n", "x\n", "---\n", "--- a\n--- b\n", "a: &x 1\n", "a: !!str 1\n", "a: {b: {c: [1]}}\n", "a: [b, {c: d}]\n"])
def test_the_event_build_is_the_node_build_or_declines(text):
    """Built from libyaml's events, a document is what the node path builds (marks included), or goes to the node path."""
    got = event_built(text)
    assert got == "declined" or got == node_built(text)
    if "&" not in text and "!" not in text and "\t" not in text and "--- a" not in text and node_built(text) != "declined":
        assert got != "declined", "the event build takes every plain document the node build takes"


@settings(max_examples=150, deadline=None)
@given(tree=trees, flow=st.sampled_from([None, True, False]))
def test_random_documents_build_the_same_from_events_and_from_nodes(tree, flow):
    text = yaml.dump(tree, Dumper=ld.SafeDumper, default_flow_style=flow, sort_keys=False)
    assert event_built(text) == node_built(text) != "declined"


# Constructs libyaml takes where PyYAML's parser refuses them or reads them otherwise (yaml-test-suite JR7V,
# MUS6/00, X4QW, UKK6/02, WZ62): they go to PyYAML's parser, whichever path meets them.
LIBYAML_ONLY = ["s: [a?b]\n", "s: {k: v?}\n", "%YAML 1.1#x\n---\na: 1\n", "%YAML 1.1\n---\na: 1\n", "a: >#\n  b\n",
                "a: |-#\n  b\n", "a: !\n", "a: [x, ! ]\n", "{a: !!str, b: 1}\n", "a: [!x]\n",
                "a: [\"one\n  two #x?\", b?c]\n"]  # a quoted scalar, not a comment, holds the first ``?``


@pytest.mark.parametrize("text", LIBYAML_ONLY)
def test_what_libyaml_alone_reads_goes_to_pyyamls_parser(text):
    assert not ld._libyaml_parses(text) or event_built(text) == "declined"
    try:
        loader, _ = ld._compose(text, "t.yaml")
    except ManifestError:
        return  # PyYAML's parser refused it: libyaml never gets to answer
    assert type(loader) is ld._PyLoader


# Where the same characters are harmless the fast paths keep the text: a ``?`` in a comment, a block mapping, a
# quoted scalar or after an explicit key's space; a ``!`` inside a word, a tag followed by a space; ``|`` and ``>``
# followed by a space; ``%`` inside a line.
LIBYAML_KEEPS = ["# why?\nname: Hi! there  # ok?\nurl: http://x/?a=1\nstages: {s: {op: relu, inputs: [x]}}\n",
                 "a: ['b?', \"c?\"]\nb: {? k : v}\n", "a: > # folded\n  b\nc: 50%\n", "a: wow ! there\nb: Hi!\n"]


@pytest.mark.parametrize("text", LIBYAML_KEEPS)
def test_harmless_lookalikes_keep_the_fast_paths(text):
    assert ld._libyaml_parses(text)
    assert event_built(text) != "declined"
    loader, root = ld._compose(text, "t.yaml")
    assert type(loader) is ld._CLoader and not ld._question_in_flow(root)


def test_a_tagged_document_with_a_question_in_a_block_scalar_keeps_libyamls_nodes():
    text = "a: !!str 1\nb: x?y\nc: [k, v]\n"
    assert event_built(text) == "declined"  # for its tag
    loader, _ = ld._compose(text, "t.yaml")
    assert type(loader) is ld._CLoader and mf.loads(text, "t.yaml").value == {"a": "1", "b": "x?y", "c": ["k", "v"]}


@pytest.mark.parametrize("broken", [
    {"s5": "{op: relu, inputs: [s4], retries: x}", "9bad": "{op: relu, inputs: [s3]}", "s20": "{op: relu, inputs: [s19], bogus: 1}"},
    {},
])
def test_the_schema_pass_over_refused_stages_reports_what_the_whole_pass_does(broken):
    import jsonschema

    lines = ["version: 1", "name: n", "executors: {h: {vendor: cpu}}", "extra: 1", "stages:", "  s0: {op: ones, args: {shape: [2]}}"]
    for i in range(1, 30):
        lines.append(f"  s{i}: " + broken.get(f"s{i}", f"{{op: relu, inputs: [s{i - 1}]}}"))
    lines += [f"  {sid}: {spec}" for sid, spec in broken.items() if not sid.startswith("s")]
    lines.append("outputs: {y: s29}")
    doc = mf.loads("\n".join(lines) + "\n", "b.yaml")
    got = sorted(str(d) for d in schemacheck.schema_problems(doc.value, doc))
    whole = sorted(str(d) for e in jsonschema.Draft202012Validator(mf.schema()).iter_errors(doc.value)
                   for d in schemacheck._explain(e, doc))
    assert got == whole and len(got) == 1 + len(broken)


@settings(max_examples=400, deadline=None)
@given(value=st.one_of(st.text(max_size=10), st.text(alphabet="0123456789.+-_:eExXoObBtTfFnNyYlu~<= ", max_size=10),
                       st.sampled_from(["yes", "Off", "~", "null", "0x1f", "012", "1_000", ".inf", "-.5", "1.5e3",
                                        "2001-12-14", "<<", "=", "1:30", "0b101", ".NaN", "1e3", ""])),
       plain=st.booleans(), quoted=st.booleans())
def test_the_loaders_tag_resolution_is_pyyamls(value, plain, quoted):
    pyyaml = ld.SafeLoader("")  # PyYAML's safe loader, with the loader's one documented difference
    for ours in (ld._PyLoader(""), ld._CLoader("")):
        assert ours.resolve(yaml.ScalarNode, value, (plain, quoted)) == pyyaml.resolve(yaml.ScalarNode, value, (plain, quoted))
        for kind in (yaml.SequenceNode, yaml.MappingNode):
            assert ours.resolve(kind, None, (plain, quoted)) == pyyaml.resolve(kind, None, (plain, quoted))


def test_pausing_the_gc_leaves_a_host_process_frozen_objects_frozen(monkeypatch):
    import gc

    # asked of the calls, not of gc.get_freeze_count(), which drops as any frozen object is freed (a thread an
    # earlier test left ending meanwhile)
    unfreeze, thawed = gc.unfreeze, []
    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        monkeypatch.setattr(gc, "unfreeze", lambda: thawed.append(True))
        mf.loads("a: 1\n", "f.yaml")
        assert gc.isenabled() and thawed == []
    finally:
        monkeypatch.undo()
        unfreeze()
    mf.loads("a: 1\n", "f.yaml")
    assert gc.isenabled() and gc.get_freeze_count() == 0


def test_passes_in_threads_share_one_gc_pause_and_leave_a_runs_frozen_heap_frozen(monkeypatch):
    import gc
    import threading

    from hetflow.engine.heap import FREEZE_FROM, frozen_heap, gc_paused

    inside, leave = threading.Event(), threading.Event()

    def other_pass():
        with gc_paused():
            inside.set()
            leave.wait(10)

    t = threading.Thread(target=other_pass)
    t.start()
    inside.wait(10)
    with gc_paused():
        pass
    # this pass ended while the other thread's goes on: the collector stays off until the last one is out
    assert not gc.isenabled()
    leave.set()
    t.join()
    assert gc.isenabled() and gc.get_freeze_count() == 0
    with frozen_heap(FREEZE_FROM):  # a run: what lived before it is frozen until it ends, whatever passes end meanwhile
        frozen = gc.get_freeze_count()
        assert frozen > 0
        # and a pass ending meanwhile does not ask how much is frozen: that walks every frozen object
        asked, thawed = [], []
        count = gc.get_freeze_count
        monkeypatch.setattr(gc, "get_freeze_count", lambda: asked.append(1) or count())
        monkeypatch.setattr(gc, "unfreeze", lambda: thawed.append(True))  # the run's frozen heap stays frozen
        with gc_paused():
            mf.loads("a: 1\n", "f.yaml")
        monkeypatch.undo()
        assert not asked and not thawed
        assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.isenabled() and gc.get_freeze_count() == 0


# Each of these documents once loaded to a value nobody wrote, or was refused where yaml.safe_load takes it.
SAFE_LOAD_DIFFERENCES = [
    "a: !!python/object:os.system {cmd: ls}\n",  # a python tag on a mapping was dropped: a dict
    "a: !!python/tuple [1, 2]\n",  # ... and on a sequence: a list
    "a: !foo {b: 1}\n",  # a custom tag on a mapping: a dict
    "a: !!str [x]\n",  # a str tag on a sequence: a list
    "a: !!set {x, y}\n",  # a set became a dict of None
    "a: !!omap [b: 1, c: 2]\n",  # an ordered map became a list of dicts
    "a: !!pairs [b: 1, b: 2]\n",
    "a: !!int yes\n",  # SafeConstructor raises ValueError: safe_load refuses
    "a: !!bool y\n",  # ... KeyError
    "a:\tb\n",  # libyaml takes a tab after the colon; PyYAML refuses it
    "a: 1\n\ufeffb: 2\n",  # libyaml skips a BOM that starts a later line; PyYAML keeps it in the key
    "a: 1\na: 2\n",  # a duplicate key: the last one wins, validation refuses it
    "1: x\n",  # a key that is not a string stays an int
    "base: &b {x: 1, y: 1}\nd:\n  <<: *b\n  y: 2\n",  # a merge's keys overridden are not duplicates
    "d:\n  <<: [{x: 1}, {x: 2, z: 3}]\n",  # the first of merged mappings wins
    "d:\n  <<: 1\n",  # a merge of a scalar: refused, not an uncaught ConstructorError
    "? [a, b]\n: c\n",  # an unhashable key: refused
    "= : v\n",
    "",  # no document: None, and validation says the file is empty
    "a: \x07\n",  # a control character: refused at its position
]


@pytest.mark.parametrize("text", SAFE_LOAD_DIFFERENCES)
def test_the_loader_gives_safe_loads_value_or_refusal(text):
    try:
        expected = ("ok", yaml.safe_load(text))
    except Exception:  # noqa: BLE001 - safe_load lets ValueError and KeyError out for some tagged scalars
        expected = ("refused",)
    try:
        got = ("ok", mf.loads(text, "t.yaml").value)
    except ManifestError as e:
        assert all(d.origin.line >= 1 and d.origin.col >= 1 for d in e.diagnostics)
        got = ("refused",)
    assert got == expected


def test_manifest_rules_beyond_yaml_are_problems_that_validation_reports():
    doc = mf.loads("version: 1\nversion: 1\n3: x\n", "t.yaml")
    assert doc.value == {"version": 1, 3: "x"}
    assert [str(d) for d in doc.problems] == ["t.yaml:2:1: error: duplicate key 'version'",
                                               "t.yaml:3:1: error: keys must be strings, found 3"]
    with pytest.raises(ManifestError) as e:
        mf.compile_manifest(doc)
    assert [str(d) for d in e.value.diagnostics] == [str(d) for d in doc.problems]
    merged = mf.loads("b: &b {x: 1}\nd:\n  <<: *b\n  x: 2\n", "t.yaml")
    assert merged.value["d"] == {"x": 2} and merged.problems == ()


def test_refusals_point_at_the_culprit():
    def where(text):
        with pytest.raises(ManifestError) as e:
            mf.loads(text, "t.yaml")
        return [str(d) for d in e.value.diagnostics]

    assert where("a: 1\nb: !!python/object:os.system {}\n") == [
        "t.yaml:2:4: error: YAML: could not determine a constructor for the tag 'tag:yaml.org,2002:python/object:os.system'"]
    assert where("a: 1\nb: !!int yes\n") == ["t.yaml:2:4: error: YAML: 'yes' is not a valid int"]
    assert where("a: 1\nb:\tc\n")[0].startswith("t.yaml:2:3: error: YAML syntax: ")
    assert where("a: 1\nb: x\x07\n") == [
        "t.yaml:2:5: error: YAML: character #x0007 is not allowed (YAML allows tab, newline and printable characters)"]


def test_a_file_that_is_not_utf8_is_refused_at_its_first_bad_byte(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_bytes("version: 1\nname: é\xe9\n".encode("utf-8")[:-3] + b"\xff\n")
    with pytest.raises(ManifestError) as e:
        ld.load(path)
    assert [str(d) for d in e.value.diagnostics] == [
        f"{path}:2:8: error: the file is not UTF-8: byte 0xff (invalid start byte); save it as UTF-8"]
