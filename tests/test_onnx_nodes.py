"""ONNX's operator conformance cases (the node tests in the ``onnx`` wheel), run through the CLI.

Every case of an ONNX op type that a hetflow op means is translated into
stages (``tests/onnxcases.py``), batched many to a manifest and run with
``python -m hetflow.engine.cli run``, once with the op beside its inputs and
once across a bridge from the executor that loaded them. The outputs must be
ONNX's (shape, dtype, values) and the bridged ones the same bytes. The table
of counts per op type is printed (``pytest -s`` shows it; so does
``python bench/onnx_coverage.py``).
"""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("onnx", reason="onnx is not installed (pip install -e .[dev]): ONNX's node cases come with it")

sys.path.insert(0, os.path.dirname(__file__))

import onnxcases  # noqa: E402


@pytest.fixture(scope="module")
def cases():
    return onnxcases.collect()


def test_the_cases_the_issue_counts_are_expressible(cases):
    """At least 318 cases of today's op types and 72 of the nine new ones translate into stages."""
    expressible = {"today": 0, "new": 0}
    for case in cases:
        group = "today" if onnxcases.op_type_of(case) in onnxcases.TODAY else "new"
        try:
            onnxcases.translate(case)
        except onnxcases.Inexpressible:
            continue
        expressible[group] += 1
    nine = [c for c in cases if onnxcases.op_type_of(c) in onnxcases.NEW]
    nine_expressible = sum(1 for c in nine if _expressible(c))
    assert len(nine) == 84
    assert nine_expressible >= 72, nine_expressible
    assert expressible["today"] >= 318, expressible


def _expressible(case) -> bool:
    try:
        onnxcases.translate(case)
    except onnxcases.Inexpressible:
        return False
    return True


def test_an_inexpressible_case_says_why(cases):
    by_name = {c.name: c for c in cases}
    with pytest.raises(onnxcases.Inexpressible, match="dtype uint16, which hetflow lacks"):
        onnxcases.translate(by_name["test_add_uint16"])
    with pytest.raises(onnxcases.Inexpressible, match="input nonpad_kv_seqlen"):
        onnxcases.translate(by_name["test_attention_4d_gqa_causal_nonpad_decode"])
    t = onnxcases.translate(by_name["test_max_example"])
    assert [s["op"] for s in t.stages.values()] == ["maximum", "maximum"]
    t = onnxcases.translate(by_name["test_slice_neg_steps"])
    assert [s["args"]["step"] for s in t.stages.values()] == [-1, -3, -2]


@pytest.mark.slow
def test_every_expressible_case_gives_onnxs_result_with_and_without_a_bridge(cases, tmp_path):
    outcomes = onnxcases.run_cases(cases, str(tmp_path))
    print("\n" + onnxcases.summarize(outcomes))
    unexpected = [o for o in outcomes if o.status == "failed" and o.name not in onnxcases.DOCUMENTED]
    assert not unexpected, "\n".join(f"{o.name}: {o.reason}" for o in unexpected)
