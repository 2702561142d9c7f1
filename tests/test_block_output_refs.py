"""A stage's input or a manifest output that reads a use of a block but names none of its outputs is told which
outputs there are, at the name, by ``validate`` and ``plan`` alike: it said "which is not a stage", or suggested
a stage of an instance (``did you mean 'T.b'?``) for an output's name."""

import io

import pytest

from hetflow.engine.cli import main

TWO = """\
version: 1
name: t
executors:
  host: {vendor: cpu}
blocks:
  two:
    inputs: [x]
    stages:
      a: {op: relu, inputs: [x]}
      b: {op: neg, inputs: [x]}
    outputs: {p: a, q: b}
"""


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("command", [("validate",), ("plan", "--format", "json")])
def test_a_name_that_reads_a_use_but_no_output_of_it_lists_its_outputs(tmp_path, command):
    path = tmp_path / "m.yaml"
    path.write_text(TWO + "stages:\n  e: {op: ones, args: {shape: [2]}}\n  T: {use: two, inputs: {x: e}}\n"
                    "  z: {op: relu, inputs: [T]}\n  w: {op: add, inputs: [e, T.r]}\n  ok: {op: relu, inputs: [T.q]}\n"
                    "outputs: {z: z, t: T, p: T.p}\n")
    code, out, err = _cli(*command, str(path))
    assert code == 2 and "Traceback" not in err, err
    assert err.splitlines() == [
        f"{path}:15:26: error: stage 'z' takes input 'T', a use of block 'two', which has several outputs: name one, "
        "T.OUTPUT (p, q)",
        f"{path}:16:28: error: stage 'w' takes input 'T.r', which is no output of use 'T' (outputs of block 'two': "
        "p, q); or did you mean stage 'T.b'?",
        f"{path}:18:20: error: output 't' names 'T', a use of block 'two', which has several outputs: name one, "
        "T.OUTPUT (p, q)",
    ]


def test_inside_a_block_the_same_is_said_at_the_blocks_line_with_the_use_that_made_it(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(TWO + "  outer:\n    inputs: [x]\n    stages:\n      T: {use: two, inputs: {x: x}}\n"
                    "      z: {op: relu, inputs: [T]}\n    outputs: {o: z}\n"
                    "stages:\n  e: {op: ones, args: {shape: [2]}}\n  O: {use: outer, inputs: {x: e}}\noutputs: {z: O}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and err.splitlines() == [
        f"{path}:16:30: error: stage 'O.z' takes input 'O.T', a use of block 'two', which has several outputs: "
        "name one, T.OUTPUT (p, q)",
        f"{path}:20:3: note: in O (block outer)",
    ], err


def test_an_instances_output_by_name_is_told_the_stage_that_instance_gives_it_as(tmp_path):
    """``L.1.x`` (output x of instance 1) was answered "did you mean 'L.1.h'?", another stage of the instance."""
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: t\nexecutors:\n  host: {vendor: cpu}\nblocks:\n  layer:\n    inputs: [x]\n"
                    "    stages:\n      h: {op: relu, inputs: [x]}\n      out: {op: add, inputs: [h, x]}\n"
                    "    outputs: {x: out}\nstages:\n  e: {op: ones, args: {shape: [2]}}\n"
                    "  L: {use: layer, inputs: {x: e}, repeat: 3}\n  z: {op: relu, inputs: [L.1.x]}\n"
                    "outputs: {y: z, second: L.0.x}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and err.splitlines() == [
        f"{path}:15:26: error: stage 'z' takes input 'L.1.x', which is not a stage: 'x' is an output of use 'L', "
        "which instance 1 gives as stage 'L.1.out'; name that stage",
        f"{path}:16:25: error: output 'second' names 'L.0.x': 'L.0' is not a stage; 'L' is a use of a block, whose "
        "stages are L.0.h, L.0.out, L.1.h, L.1.out and 2 more",
    ], err
    path.write_text(path.read_text().replace("L.1.x", "L.1.out").replace("L.0.x", "L.0.out"))
    assert _cli("validate", str(path))[0] == 0
