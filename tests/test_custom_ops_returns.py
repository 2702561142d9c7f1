"""What a user's op returns is checked as it leaves the op: a stage whose op returns something other than an array
of its executor fails naming the op and what it returned, not with an error from inside hetflow."""

import textwrap

import pytest

import hetflow

OPS = '''
import numpy as np
from hetflow import op


class Lookalike:
    """Has the attributes of an array, and is none."""

    def __init__(self, x):
        self.shape, self.dtype = x.shape, x.dtype


@op("ret.lookalike")
def lookalike(xp, x):
    return Lookalike(x)


@op("ret.masked")
def masked(xp, x):
    return np.ma.masked_less(x, 0.0)


@op("ret.short")
def short(xp, x):
    return x[:1]


@op("ret.wide")
def wide(xp, x):
    return x.astype(np.float64)
'''

MANIFEST = '''
version: 1
name: returns
plugins: [ops.py]
executors: {{host: {{vendor: cpu}}}}
stages:
  x: {{op: random.normal, args: {{shape: [3, 4], seed: 1}}}}
  y: {{op: {op}, inputs: [x]}}
outputs: {{y: y}}
'''


@pytest.mark.parametrize("op, said", [
    ("ret.lookalike", "op 'ret.lookalike' returned a Lookalike, not an array of numpy"),
    ("ret.masked", "op 'ret.masked' returned a masked array, whose mask an output cannot keep"),
    ("ret.short", "op 'ret.short' returned shape [1, 4], but its shape rule declares [3, 4]"),
    ("ret.wide", "op 'ret.wide' returned float64 values for a fp32 stage"),
])
def test_an_op_that_returns_no_plain_array_fails_its_stage_saying_what_it_returned(tmp_path, registry, op, said):
    (tmp_path / "ops.py").write_text(textwrap.dedent(OPS))
    (tmp_path / "m.yaml").write_text(MANIFEST.format(op=op))
    r = hetflow.run(tmp_path / "m.yaml", runs_dir=tmp_path / "runs")
    assert r.status == "failed"
    [failure] = r.failures
    assert failure.stage == "y" and failure.op == op
    assert said in failure.message
    assert failure.origin.endswith("m.yaml:8:3")
    assert "y" not in r.outputs
    # no frame of the user's raised: the traceback file names the op's body, not hetflow's frames down to the check
    said = open(failure.traceback_file).read()
    assert said.startswith(failure.message.removeprefix("backend error: ")) and "ops.py:" in said
    assert "hetflow" not in said.replace(str(tmp_path), "")
    assert r.record["error"]["traceback"] == said
