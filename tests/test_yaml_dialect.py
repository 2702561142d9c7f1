"""A manifest means the same to hetflow's YAML 1.1 reading and to an editor's YAML 1.2 one.

The loader reads YAML as ``yaml.safe_load`` does (1.1), the YAML language
server as YAML 1.2: ``cache: yes`` was true to one and a wrong type to the
other, ``timeout: 1:30`` silently 90, and a stage named ``on`` a key that
is not a string. Each plain scalar the two read differently is refused
where it is written, with what to write instead; what they agree on, and
what a tag says outright, is read as before.
"""

from __future__ import annotations

import pytest

from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest import loader as ld
from hetflow.engine.manifest.validate import compile_manifest

BASE = """\
version: 1
name: d
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [2]}}
  y: {op: neg, inputs: [x], FIELD}
outputs: {y: y}
"""


def _compiled(text):
    return compile_manifest(ld.loads(text, "d.yaml"))


@pytest.mark.parametrize("field, said", [
    ("cache: yes", "'yes' is the boolean true to YAML 1.1"),
    ("cache: Off", "'Off' is the boolean false to YAML 1.1"),
    ("retries: 1_0", "'1_0' is the number 10 to YAML 1.1"),
    ("timeout: 1:30", "'1:30' is the number 90 to YAML 1.1"),
    ("timeout: 1:30.5", "'1:30.5' is the number 90.5 to YAML 1.1"),
    ("retries: 017", "'017' is the number 15 to YAML 1.1"),
    ("retries: 0b11", "'0b11' is the number 3 to YAML 1.1"),
    ("retries: -0x1", "'-0x1' is the number -1 to YAML 1.1"),
])
@pytest.mark.parametrize("path", ["events", "nodes"])
def test_a_scalar_yaml_1_1_and_1_2_read_differently_is_refused_where_it_is_written(field, said, path):
    text = BASE.replace("FIELD", field)
    if path == "nodes":  # an anchor: libyaml's event build declines, the node path reads it
        text = text.replace("x: {op: ones", "x: &a {op: ones")
    with pytest.raises(ManifestError) as refused:
        _compiled(text)
    [d] = refused.value.diagnostics
    assert (d.origin.line, d.origin.col) == (6, 29 + len(field.split(":")[0]) + 2)
    assert d.message.startswith(said) and "YAML 1.2, which editors read: write " in d.message


@pytest.mark.parametrize("field, value", [
    ("cache: true", ("cache", True)), ("cache: False", ("cache", False)), ("retries: 10", ("retries", 10)),
    ("retries: 0x3", ("retries", 3)), ("timeout: 1.5", ("timeout", 1.5)), ("timeout: 1e1", ("timeout", 10.0)),
    ("cache: !!bool yes", ("cache", True)), ("retries: !!int 1_0", ("retries", 10)),
])
def test_what_both_read_alike_or_a_tag_says_outright_is_read_as_before(field, value):
    m = _compiled(BASE.replace("FIELD", field))
    assert getattr(m.stages["y"], value[0]) == value[1]


def test_a_key_yaml_1_1_reads_as_a_boolean_says_to_quote_it():
    text = BASE.replace("  y: {op: neg, inputs: [x], FIELD}", "  on: {op: neg, inputs: [x]}").replace("{y: y}", "{y: 'on'}")
    with pytest.raises(ManifestError) as refused:
        _compiled(text)
    [d] = refused.value.diagnostics
    assert (d.origin.line, d.origin.col) == (6, 3)
    assert d.message == ("keys must be strings, found True: 'on' is True to YAML 1.1, which hetflow reads, and text "
                         "to YAML 1.2, which editors read; quote it ('on')")
    assert _compiled(text.replace("  on:", "  'on':")).stages["on"].op == "neg"


def test_a_command_line_param_yaml_1_1_and_1_2_read_differently_is_refused_too():
    from hetflow.engine.errors import UsageError
    from hetflow.engine.manifest.resolve import parse_overrides

    with pytest.raises(UsageError, match=r"^-p seed=017: '017' is the number 15 to YAML 1\.1.*write 15"):
        parse_overrides(["seed=017"])
    with pytest.raises(UsageError, match=r"^-p flag=yes: 'yes' is the boolean true"):
        parse_overrides(["flag=yes"])
    assert parse_overrides(["seed=17", "flag=true", "name='yes'", "t=1.5"]) == {"seed": 17, "flag": True, "name": "yes",
                                                                            "t": 1.5}
