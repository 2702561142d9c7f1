"""hetflow's loader against ``yaml.safe_load`` on the official YAML test suite (yaml/yaml-test-suite).

Every case's input goes through both: ``loads`` must give the value
``yaml.load(text, Loader=SafeLoader)`` gives (PyYAML's safe loader with
the loader's one documented difference, YAML 1.2's exponent floats), or
refuse where it refuses, at a FILE:LINE:COL inside the text. The suite's
own verdict (``error``) is not the reference: PyYAML reads YAML 1.1 and
takes some inputs the suite calls errors, and refuses some it does not;
the loader promises PyYAML's answer, whichever it is.

The inputs live in ``tests/data/yaml-test-suite.json``, taken from the
suite's data release, with its source, commit and MIT license. About
half of the cases are read by libyaml (from its events or its nodes),
the others, with tabs, characters beyond ASCII or constructs libyaml
reads otherwise, by PyYAML's parser. Five once took libyaml's path and
were read where PyYAML refuses them or reads them otherwise; they are
pinned here with their answers.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hetflow.engine.manifest import loader as ld
from hetflow.engine.errors import ManifestError
from test_loader_equivalence import assert_equivalent, ours_text, theirs

SUITE = json.loads((Path(__file__).parent / "data" / "yaml-test-suite.json").read_text(encoding="utf-8"))
CASES = SUITE["cases"]


def test_the_stored_suite_is_the_release_named_in_its_header():
    assert SUITE["source"] == "https://github.com/yaml/yaml-test-suite"
    assert SUITE["commit"] == "6e6c296ae9c9d2d5c4134b4b64d01b29ac19ff6f"
    assert SUITE["license"] == "MIT" and SUITE["copyright"] in SUITE["license_text"]
    assert len(CASES) == 402 and len({c["id"] for c in CASES}) == 402
    assert sum(c["error"] for c in CASES) == 94


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_the_loader_gives_safe_loads_value_or_refusal(case):
    text = case["yaml"]
    assert_equivalent(ours_text(text), theirs(text), text)


def _path(text: str) -> str:
    if ld._libyaml_parses(text):
        try:
            ld._event_build(text)
            return "events"
        except Exception:  # noqa: BLE001 - declined or refused: the node path takes it
            pass
    try:
        loader, _ = ld._compose(text, "t.yaml")
    except ManifestError:
        return "pyyaml"
    return "libyaml nodes" if type(loader) is ld._CLoader else "pyyaml"


def test_the_suite_reaches_every_parser_path():
    paths = [_path(c["yaml"]) for c in CASES]
    counts = {p: paths.count(p) for p in ("events", "libyaml nodes", "pyyaml")}
    assert counts["events"] > 100 and counts["libyaml nodes"] > 30 and counts["pyyaml"] > 100, counts


# The cases where the loader once differed: libyaml took what PyYAML refuses, or read a lone ``!`` as ''.
DIFFERED = {
    "JR7V": ["t.yaml:4:5: error: YAML syntax: while parsing a flow sequence: expected ',' or ']', but got '?'"],
    "MUS6/00": ["t.yaml:1:10: error: YAML syntax: while scanning a directive: "
                "expected a digit or ' ', but found '#'"],
    "WZ62": ["t.yaml:3:3: error: YAML syntax: while parsing a flow mapping (opened at line 1, column 1): "
             "expected ',' or '}', but got '<tag>'"],
    "X4QW": ["t.yaml:1:9: error: YAML syntax: while scanning a block scalar: "
             "expected chomping or indentation indicators, but found '#'"],
}


@pytest.mark.parametrize("case_id", sorted(DIFFERED))
def test_what_libyaml_alone_takes_is_refused_where_pyyaml_refuses_it(case_id):
    (case,) = [c for c in CASES if c["id"] == case_id]
    with pytest.raises(ManifestError) as refused:
        ld.loads(case["yaml"], "t.yaml")
    assert [str(d) for d in refused.value.diagnostics] == DIFFERED[case_id]
    assert theirs(case["yaml"])[0] == "refused"


def test_a_lone_tag_on_an_empty_node_is_null_as_safe_load_reads_it():
    (case,) = [c for c in CASES if c["id"] == "UKK6/02"]
    assert case["yaml"] == "!\n"
    assert ld.loads(case["yaml"]).value is None is yaml.safe_load(case["yaml"])
    text = "a: !\nb: [x, ! ]\nc: ! 12\nd: &e !\n"
    # libyaml alone reads each empty node as ''
    assert ld.loads(text).value == yaml.safe_load(text) == {"a": None, "b": ["x", None], "c": 12, "d": None}
