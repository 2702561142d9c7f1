"""A wall clock stepped while a run or sweep runs (NTP's first sync after boot, a VM resumed) moves
neither its end nor its duration: both are measured on the monotonic clock from the start."""

import json
import textwrap
import time
from pathlib import Path

import pytest

import hetflow

OP = """\
import time

from hetflow import op


@op("t.step_clock")
def step_clock(xp, x):
    time.step_clock()  # the test's: the wall clock jumps while this stage runs
    return x
"""

MANIFEST = """\
version: 1
name: clocked
plugins: [clock_op.py]
params: {k: 1}
MATRIX
executors: {h: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [2], value: "${k}"}}
  y: {op: t.step_clock, inputs: [x]}
outputs: {y: y}
"""


@pytest.fixture
def stepped(monkeypatch):
    """``time.time`` as a clock that ``time.step_clock()`` sets back by an hour, the first time, or forward by
    one, the second."""
    real = time.time
    shift = {"s": 0.0, "steps": 0}

    def step() -> None:
        shift["s"] += -3600.0 if shift["steps"] % 2 == 0 else 7200.0
        shift["steps"] += 1

    monkeypatch.setattr(time, "time", lambda: real() + shift["s"])
    monkeypatch.setattr(time, "step_clock", step, raising=False)
    return shift


def _write(tmp_path: Path, matrix: str) -> str:
    (tmp_path / "clock_op.py").write_text(OP)
    path = tmp_path / "m.yaml"
    path.write_text(textwrap.dedent(MANIFEST.replace("MATRIX", matrix)))
    return str(path)


def _sane(entry: dict) -> None:
    assert 0 <= entry["duration_s"] < 60, entry["duration_s"]
    assert entry["ended_at"] >= entry["started_at"], (entry["started_at"], entry["ended_at"])


def test_a_run_across_a_clock_step_keeps_a_true_duration(tmp_path, stepped):
    done = hetflow.run(_write(tmp_path, ""), runs_dir=tmp_path / "runs", cache=False)
    assert stepped["steps"] == 1 and done.ok
    record = json.loads(Path(done.record_path).read_text())
    _sane(record)
    _sane(record["attempts"][0])


def test_a_sweep_across_clock_steps_keeps_a_true_duration(tmp_path, stepped):
    sweep = hetflow.sweep(_write(tmp_path, "matrix: {k: [1, 2]}"), runs_dir=tmp_path / "runs", cache=False)
    assert stepped["steps"] == 2
    summary = json.loads((Path(sweep.path) / "sweep.json").read_text())
    assert summary["status"] == "succeeded"
    _sane(summary)
    for row in summary["points"]:
        _sane(json.loads((tmp_path / "runs" / row["record"]).read_text()))
