"""The "did you mean" of a refusal costs a bounded number of name comparisons, however many problems there are.

difflib compares a missing name with every candidate, microseconds each:
a typo in a block repeated a thousand times, or a generated manifest of
many stages that each name a missing one, asked minutes of comparisons.
A name of a block's instance is compared with its own instance's names
first, and one check compares at most ``SUGGESTION_BUDGET`` names in all;
the count is what is asserted here, not a time.
"""

import difflib
import io

import pytest

from hetflow.engine import cli
from hetflow.engine.manifest import semantics

BLOCK = """\
version: 1
name: typo
executors: {host: {vendor: cpu}}
blocks:
  layer:
    inputs: [x]
    stages:
      h: {op: relu, inputs: [x]}
      g: {op: relu, inputs: [hh]}
      k: {op: relux, inputs: [h]}
    outputs: {x: h}
stages:
  x: {op: random.normal, args: {shape: [2], seed: 0}}
  l: {use: layer, inputs: {x: x}, repeat: 400}
outputs: {y: l}
"""


@pytest.fixture
def compared(monkeypatch):
    """How many candidate names difflib was given, in all."""
    count = [0]
    real = difflib.get_close_matches

    def counting(word, possibilities, *args, **kwargs):
        possibilities = list(possibilities)
        count[0] += len(possibilities)
        return real(word, possibilities, *args, **kwargs)

    monkeypatch.setattr(difflib, "get_close_matches", counting)
    return count


def validate(path):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["validate", str(path)], out=out, err=err)
    return code, err.getvalue()


def test_a_typo_in_a_repeated_block_is_suggested_from_its_own_instance(tmp_path, compared):
    path = tmp_path / "m.yaml"
    path.write_text(BLOCK)
    code, err = validate(path)
    assert code == 2, err
    assert (f"{path}:9:30: error: stage 'l.0.g' takes input 'l.0.hh', which is not a stage; did you mean 'l.0.h'? "
            "(and in 399 more instances)") in err, err
    assert "unknown op 'relux' in stage 'l.0.k'; did you mean 'relu'? (and in 399 more instances)" in err, err
    # 400 instances of 4 names each, the op registry once: not 400 times the 1,201 stages
    assert compared[0] < 10_000, compared[0]


def test_many_missing_names_compare_at_most_the_budget(tmp_path, compared):
    stages = "".join(f"  s{i}: {{op: relu, inputs: [nope{i}]}}\n" for i in range(1500))
    path = tmp_path / "m.yaml"
    path.write_text(f"version: 1\nname: many\nexecutors: {{host: {{vendor: cpu}}}}\nstages:\n{stages}outputs: {{y: s0}}\n")
    code, err = validate(path)
    assert code == 2, err
    assert f"{path}:5:27: error: stage 's0' takes input 'nope0', which is not a stage" in err, err
    assert compared[0] <= semantics.SUGGESTION_BUDGET, compared[0]
