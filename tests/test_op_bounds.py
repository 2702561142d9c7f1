"""Out-of-range axes, arrays of too high a rank and non-finite split shares: bad input where it is written.

Each case goes through the CLI's own entry for ``validate``, ``plan`` and
``run``: all three refuse it with exit 2 and one message at the
manifest's FILE:LINE:COL, never an internal error (exit 3) or a run that
fails once started.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from hetflow.engine.cli import main

HEAD = "version: 1\nname: t\nexecutors: {host: {vendor: cpu}}\nstages:\n"


def _cli(*argv: str) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def _refused(tmp_path, text: str, where: str, message: str) -> None:
    """``validate``, ``plan`` and ``run`` of manifest ``text`` each exit 2 with ``message`` at ``where``
    (LINE:COL in the manifest)."""
    path = tmp_path / "m.yaml"
    path.write_text(text)
    for command in (["validate"], ["plan"], ["run", "--runs-dir", str(tmp_path / "runs")]):
        code, said = _cli(command[0], str(path), *command[1:])
        assert code == 2, (command, said)
        assert f"{path}:{where}: error: " in said, (command, said)
        assert message in said, (command, said)
        assert "internal error" not in said and "Traceback" not in said, (command, said)


def _column(line: str, token: str) -> int:
    return line.index(token) + 1


# -- transpose and the other ops that take an axis ------------------------------------------------


@pytest.mark.parametrize("axes, bad", [([5, 0], 5), ([2, 1], 2), ([3, -2], 3), ([0, -3], -3)])
def test_transpose_axis_out_of_range(tmp_path, axes, bad):
    line = f"  t2: {{op: transpose, inputs: [x], args: {{axes: {axes}}}}}"
    text = HEAD + "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}}\n" + line + "\noutputs: {t2: t2}\n"
    _refused(tmp_path, text, f"6:{_column(line, '[x]')}",
             f"stage 't2': transpose: axis {bad} in axes {axes} is out of range for an input of rank 2 "
             f"(axes run from -2 to 1)")


def test_transpose_axes_not_a_permutation(tmp_path):
    line = "  t2: {op: transpose, inputs: [x], args: {axes: [1, -1]}}"
    text = HEAD + "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}}\n" + line + "\noutputs: {t2: t2}\n"
    _refused(tmp_path, text, f"6:{_column(line, '[x]')}", "transpose: axes [1, -1] are not a permutation of 2 axes")


def test_transpose_negative_axes_run(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "  x: {op: random.normal, args: {shape: [2, 3], seed: 1}}\n"
                    "  t2: {op: transpose, inputs: [x], args: {axes: [-1, 0]}}\noutputs: {t2: t2}\n")
    for command in (["validate"], ["plan"], ["run", "--runs-dir", str(tmp_path / "runs")]):
        code, said = _cli(command[0], str(path), *command[1:])
        assert code == 0, (command, said)


@pytest.mark.parametrize("stage, op", [
    ("{op: slice, inputs: [x], args: {axis: 0, start: 0}}", "slice"),
    ("{op: concat, inputs: [x, x], args: {axis: 0}}", "concat"),
    ("{op: split, inputs: [x], args: {axis: 0, sections: 1, index: 0}}", "split"),
    ("{op: argmax, inputs: [x], args: {axis: 0}}", "argmax/argmin"),
    ("{op: sum, inputs: [x], args: {axis: 0}}", "sum"),
    ("{op: mean, inputs: [x], args: {axes: [0]}}", "mean"),
    ("{op: max, inputs: [x], args: {axis: -1}}", "max"),
])
def test_axis_of_a_scalar(tmp_path, stage, op):
    line = f"  y: {stage}"
    text = HEAD + "  x: {op: ones, args: {shape: []}}\n" + line + "\noutputs: {y: y}\n"
    axis = -1 if "axis: -1" in stage else 0
    _refused(tmp_path, text, f"6:{_column(line, '[x')}",
             f"stage 'y': {op}: axis {axis} is out of range for rank 0")


def test_reductions_of_a_scalar_over_every_axis_run(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "  x: {op: ones, args: {shape: []}}\n  s: {op: sum, inputs: [x]}\n"
                    "  m: {op: max, inputs: [x], args: {axes: []}}\n  a: {op: argmax, inputs: [x]}\n"
                    "outputs: {s: s, m: m, a: a}\n")
    for command in (["validate"], ["plan"], ["run", "--runs-dir", str(tmp_path / "runs")]):
        code, said = _cli(command[0], str(path), *command[1:])
        assert code == 0, (command, said)


# -- load of an array of rank over 8 --------------------------------------------------------------


NINE = (1,) * 9
RANK_9 = "has shape [1, 1, 1, 1, 1, 1, 1, 1, 1], of rank 9; a tensor must have a shape of rank at most 8"


def _load_manifest(args: str) -> tuple[str, str]:
    line = f"  x: {{op: load, args: {{{args}}}}}"
    return HEAD + line + "\noutputs: {x: x}\n", f"5:{_column(line, 'data/')}"


def test_load_npy_of_rank_9(tmp_path):
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "rank9.npy", np.zeros(NINE, np.float32))
    text, where = _load_manifest("path: data/rank9.npy")
    _refused(tmp_path, text, where, f"stage 'x': rank9.npy {RANK_9}")


def test_load_npz_key_of_rank_9(tmp_path):
    (tmp_path / "data").mkdir()
    np.savez(tmp_path / "data" / "d.npz", deep=np.zeros(NINE, np.float32), flat=np.zeros((2, 3), np.float32))
    text, where = _load_manifest("path: data/d.npz, key: deep")
    _refused(tmp_path, text, where, f"stage 'x': d.npz: array 'deep' {RANK_9}")


def test_load_safetensors_key_of_rank_9(tmp_path):
    safetensors = pytest.importorskip("safetensors.numpy")
    (tmp_path / "data").mkdir()
    safetensors.save_file({"deep": np.zeros(NINE, np.float32), "flat": np.zeros((2, 3), np.float32)},
                          str(tmp_path / "data" / "d.safetensors"))
    text, where = _load_manifest("path: data/d.safetensors, key: deep")
    _refused(tmp_path, text, where, f"stage 'x': d.safetensors: array 'deep' {RANK_9}")


def test_load_of_rank_8_runs(tmp_path):
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "rank8.npy", np.ones((1,) * 7 + (2,), np.float32))
    path = tmp_path / "m.yaml"
    path.write_text(_load_manifest("path: data/rank8.npy")[0])
    for command in (["validate"], ["plan"], ["run", "--runs-dir", str(tmp_path / "runs")]):
        code, said = _cli(command[0], str(path), *command[1:])
        assert code == 0, (command, said)


def test_input_file_of_rank_9(tmp_path):
    np.save(tmp_path / "rank9.npy", np.zeros(NINE, np.float32))
    path = tmp_path / "m.yaml"
    path.write_text(HEAD + "  x: {op: input, args: {shape: [1], dtype: fp32}}\noutputs: {x: x}\n")
    code, said = _cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--input", f"x={tmp_path / 'rank9.npy'}")
    assert code == 2, said
    assert f"rank9.npy {RANK_9}" in said, said


# -- split: shares that are not finite ------------------------------------------------------------


def _share_column(line: str, index: int) -> int:
    """The column of share ``index`` of the flow list ``split: [a, b, ...]`` in ``line``."""
    start = line.index("split: [") + len("split: [")
    shares = line[start:line.index("]", start)].split(", ")
    return start + sum(len(share) + 2 for share in shares[:index]) + 1


def _split_manifest(executor: str) -> tuple[str, str]:
    line = f"executors: {{host: {{vendor: cpu, {executor}}}}}"
    text = (f"version: 1\nname: t\n{line}\nstages:\n  x: {{op: random.normal, args: {{shape: [4, 4], seed: 1}}}}\n"
            "  y: {op: relu, inputs: [x]}\noutputs: {y: y}\n")
    return text, line


@pytest.mark.parametrize("executor, index, shown", [
    ("devices: [0], split: [.nan]", 0, "nan"),
    ("devices: [0, 1], split: [.inf, 1]", 0, "inf"),
    ("devices: [0, 1], split: [1, .NaN]", 1, "nan"),
    ("devices: [0, 1], split: [2, .Inf]", 1, "inf"),
])
def test_split_share_not_finite(tmp_path, executor, index, shown):
    text, line = _split_manifest(executor)
    _refused(tmp_path, text, f"3:{_share_column(line, index)}",
             f"executor 'host' gives split[{index}] = {shown}; each share is a finite number above 0")


def test_split_shares_past_float_range(tmp_path):
    text, line = _split_manifest("devices: [0, 1], split: [1e308, 1e308]")
    _refused(tmp_path, text, f"3:{_column(line, 'split:') + len('split: ')}",
             "executor 'host' gives split shares that add up past float64's range")


@pytest.mark.parametrize("share", ["0", "-1", "-.inf"])
def test_split_share_not_positive(tmp_path, share):
    text, line = _split_manifest(f"devices: [0, 1], split: [{share}, 1]")
    _refused(tmp_path, text, f"3:{_share_column(line, 0)}", "executors.host.split[0] must be more than 0")
    code, said = _cli("validate", str(tmp_path / "m.yaml"))
    assert said.count("error:") == 1, said


def test_an_array_too_large_for_the_machine_says_how_much_it_asked_for(tmp_path):
    # a memory: that overstates the machine lets the plan through; the allocation itself then fails
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors:\n  host: {vendor: cpu, memory: 1000000TiB}\nstages:\n"
                    "  x: {op: random.normal, args: {shape: [100000, 100000, 100000], seed: 1}}\noutputs: {x: x}\n")
    code, err = _cli("run", str(path), "--runs-dir", str(tmp_path / "runs"))
    assert code == 1, err
    assert ("stage 'x' failed: executor allocation failed: node 'x': Unable to allocate 3.55 PiB for an array with "
            "shape (100000, 100000, 100000)") in err


@pytest.mark.parametrize("op", ["random.normal", "zeros", "full"])
def test_a_shape_past_what_an_axis_holds_is_said_as_such(tmp_path, op):
    # 10**30 a side was refused as "shapes [1e30] and [1e30] do not broadcast" at the stage that added them
    args = "shape: [1000000000000000000000000000000], value: 1" if op == "full" else "shape: [1000000000000000000000000000000]"
    text = HEAD + f"  x: {{op: {op}, args: {{{args}}}}}\n  y: {{op: add, inputs: [x, x]}}\noutputs: {{y: y}}\n"
    line = text.splitlines()[4]
    _refused(tmp_path, text, f"5:{line.index('[1000') + 1}",
             f"argument 'shape' of op '{op}' must be a shape whose sizes are at most 9223372036854775807")
