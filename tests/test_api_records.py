"""The Python API's objects read from run folders as a notebook or a service meets them: records edited or
damaged, folders removed, sweeps opened by path."""

from __future__ import annotations

import glob
import json
import os
import pickle
import shutil
import threading
import time

import numpy as np
import pytest

import hetflow

SMALL = """
version: 1
name: small
params: {n: 3}
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 2], seed: 1}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


@pytest.fixture
def finished(manifest_file, tmp_path):
    """A succeeded run's folder and its record as written."""
    run = hetflow.run(manifest_file(SMALL), runs_dir=str(tmp_path / "runs"))
    assert run.ok
    with open(run.record_path) as f:
        return run.path, json.load(f)


def _edited(folder: str, record: dict, where: str, **changes) -> hetflow.Run:
    copy = os.path.join(os.path.dirname(folder), where)
    shutil.copytree(folder, copy)
    with open(os.path.join(copy, "record.json"), "w") as f:
        json.dump({**record, **changes}, f)
    return hetflow.open_run(copy)


@pytest.mark.parametrize("changes", [
    {"error": {"message": "boom", "node": ["y"]}},
    {"error": {"message": 7, "origin": 3, "traceback_file": 3}},
    {"nodes": {"y": {"status": "failed", "error": 7}}, "error": None},
    {"nodes": {"y": {"status": "failed", "error": "boom"}}, "plan": {"nodes": {"y": "relu"}}},
    {"plan": {"nodes": ["y"]}, "error": {"message": "boom", "node": "y"}},
], ids=["node-a-list", "message-a-number", "stage-error-a-number", "plan-node-a-string", "plan-nodes-a-list"])
def test_the_failures_of_a_damaged_failed_record_are_text(finished, changes):
    folder, record = finished
    run = _edited(folder, record, "damaged", status="failed", **changes)
    failures = run.failures
    assert failures, "a failed record with an error names at least one failure"
    for f in failures:
        assert isinstance(f.message, str) and f.message
        assert f.stage is None or isinstance(f.stage, str)
        assert f.op is None or isinstance(f.op, str)
        assert f.origin is None or isinstance(f.origin, str)
    html = run._repr_html_()
    assert "<table>" in html and failures[0].message.replace("<", "&lt;") in html


@pytest.mark.parametrize("changes", [
    {"manifest": "small"}, {"matrix_point": "small[n=3]"}, {"duration_s": "0.1 s"}, {"duration_s": True},
], ids=["manifest-a-string", "point-a-string", "duration-a-string", "duration-a-boolean"])
def test_a_damaged_record_still_shows_its_summary(finished, changes):
    folder, record = finished
    run = _edited(folder, record, "shown", **changes)
    html = run._repr_html_()
    assert run.run_id in html and "succeeded" in html
    assert run.outputs["y"].shape == (3, 2)


def test_a_record_whose_run_id_is_no_text_is_named_by_its_folder(finished):
    folder, record = finished
    run = _edited(folder, record, "renamed", run_id=5)
    assert run.run_id == "renamed"
    assert repr(run) == "<hetflow.Run renamed: succeeded>"


MATRIX = """
version: 1
name: grid
params: {n: 2}
matrix: {n: [2, 3]}
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 2], seed: 1}}
outputs: {x: x}
"""


def test_open_run_of_a_sweep_says_what_reads_it(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    sweep = hetflow.sweep(manifest_file(MATRIX), runs_dir=runs)
    for name, given in ((sweep.sweep_id, {"runs_dir": runs}), (sweep.path, {})):
        with pytest.raises(hetflow.UsageError) as e:
            hetflow.open_run(name, **given)
        said = str(e.value)
        assert "is a sweep, not a run" in said and "hetflow.Sweep(" in said and "runs_dir=" not in said
        opened = hetflow.Sweep(said.split("hetflow.Sweep(")[1].split(")")[0].strip("'"))
        assert opened.sweep_id == sweep.sweep_id and [r.status for r in opened.runs] == ["succeeded"] * 2


def test_outputs_of_two_runs_compare_bit_for_bit(manifest_file, tmp_path):
    path, runs = manifest_file(SMALL), str(tmp_path / "runs")
    first = hetflow.run(path, runs_dir=runs)
    again = hetflow.run(path, runs_dir=runs, cache=False)
    other = hetflow.run(path, params={"n": 4}, runs_dir=runs)
    assert first.outputs == again.outputs and not first.outputs != again.outputs
    assert first.outputs != other.outputs and not first.outputs == other.outputs
    assert hetflow.open_run(again.run_id, runs_dir=runs).outputs == first.outputs
    # a file changed since its run is not taken for the run's output, in a comparison as in a read
    np.save(os.path.join(again.path, "y.npy"), np.zeros((3, 2), np.float32))
    with pytest.raises(hetflow.OutputDamaged):
        _ = first.outputs == hetflow.open_run(again.path).outputs


def test_a_killed_sweeps_point_whose_row_names_no_run_yet_has_its_run(manifest_file, tmp_path):
    from hetflow.engine.store import owner

    runs = str(tmp_path / "runs")
    sweep = hetflow.sweep(manifest_file(MATRIX), runs_dir=runs)
    first = sweep.runs[0]
    summary_file = os.path.join(sweep.path, "sweep.json")
    with open(summary_file) as f:
        summary = json.load(f)
    # the summary as a sweep killed just after its first point's run began leaves it: written a moment behind
    # the points, its row does not name that run yet, and its owner is gone
    gone = {**owner.current(), "pid": 2**30}
    summary.update(status="running", owner=gone, ended_at=None)
    summary["points"][0] = {"name": summary["points"][0]["name"], "values": summary["points"][0]["values"],
                            "status": "pending"}
    with open(summary_file, "w") as f:
        json.dump(summary, f)
    killed = hetflow.Sweep(sweep.path)
    assert killed.status == "died"
    assert killed.runs[0] is not None and killed.runs[0].run_id == first.run_id
    assert killed.runs[1].run_id == sweep.runs[1].run_id


def test_a_sweeps_runs_removed_by_runs_gc_after_it_was_read_are_none(manifest_file, tmp_path):
    from hetflow.engine import cli

    path, runs = manifest_file(MATRIX), str(tmp_path / "runs")
    older = hetflow.sweep(path, runs_dir=runs)
    newer = hetflow.sweep(path, runs_dir=runs)
    assert cli.main(["runs", "gc", "--keep", "1", "--runs-dir", runs]) == 0
    assert not os.path.exists(older.path) and os.path.isdir(newer.path)
    assert list(older.runs) == [None, None]
    assert [r.status for r in newer.runs] == ["succeeded", "succeeded"]


def test_a_run_opened_while_it_ran_reads_its_end_after_the_working_directory_changed(manifest_file, tmp_path,
                                                                                       monkeypatch):
    path = manifest_file(SMALL)
    monkeypatch.chdir(tmp_path)
    began, go, done = threading.Event(), threading.Event(), {}

    def hold(event):
        if event.get("kind") == "partition" and event.get("event") == "started" and not began.is_set():
            began.set()
            go.wait(60)

    worker = threading.Thread(target=lambda: done.update(run=hetflow.run(path, runs_dir="runs", on_event=hold)))
    worker.start()
    try:
        assert began.wait(60)
        # the running record lands while the run's work goes on: its first partition may start before it
        for _ in range(6000):
            if glob.glob(os.path.join("runs", "*", "record.json")):
                break
            time.sleep(0.01)
        opened = hetflow.open_run("latest", runs_dir="runs")
        assert opened.status == "running"
    finally:
        go.set()
        worker.join(60)
    assert done["run"].ok
    os.mkdir("elsewhere")
    monkeypatch.chdir("elsewhere")  # a notebook's %cd, before the run opened is looked at again
    assert opened.status == "succeeded" and opened.outputs["y"].shape == (3, 2)


@pytest.mark.parametrize("given", [5, None, b"runs/x", "", "a\0b"])
def test_a_run_or_sweep_of_no_folder_path_is_refused_as_a_usage_error(given):
    for kind in (hetflow.Run, hetflow.Sweep):
        with pytest.raises(hetflow.UsageError, match=rf"hetflow\.{kind.__name__}\(\) takes the path of a"):
            kind(given)


def test_a_sweep_of_a_runs_folder_says_what_reads_it(finished):
    folder, _ = finished
    with pytest.raises(hetflow.UsageError, match=r"no sweep summary \(sweep.json\) here but a run's record: "
                                                 r"hetflow.open_run\(\) reads it"):
        hetflow.Sweep(folder)


def test_an_output_of_a_run_that_did_not_succeed_says_why_it_is_not_there(finished):
    from hetflow.engine.store import owner

    folder, record = finished
    failed = _edited(folder, record, "failed", status="failed", outputs={},
                     error={"message": "stage 'y' failed: boom", "node": "y"})
    with pytest.raises(KeyError, match=r"the run has no output 'y' \(outputs: none\): the run failed \(stage 'y' "
                                        r"failed: boom\), so it wrote none"):
        failed.outputs["y"]
    with pytest.raises(KeyError, match=r"no output 'q' \(outputs: none\)\"$"):
        failed.outputs["q"]  # not one the manifest declares: nothing more to say
    died = _edited(folder, record, "died", status="running", outputs={}, owner={**owner.current(), "pid": 2**30})
    assert died.status == "died"
    with pytest.raises(KeyError, match=r"the run died \(its process ended before its final record"):
        died.outputs["y"]


def test_an_output_changed_in_place_by_the_caller_is_not_handed_out_as_the_runs(finished):
    folder, record = finished
    run = hetflow.open_run(folder)
    y = run.outputs["y"]
    with pytest.raises(ValueError, match="read-only"):
        y *= 2  # a notebook's in-place edit: refused, not kept as the run's output
    mine = run.outputs["y"].copy()
    mine *= 2
    assert run.outputs["y"].tolist() == (mine / 2).tolist()
    copied = pickle.loads(pickle.dumps(run))  # a notebook's saved state, or a service's worker
    with pytest.raises(ValueError, match="read-only"):
        copied.outputs["y"][0, 0] = 9
    listed = _edited(folder, record, "listed", outputs={"steps": {"phase": "run", "value": [1, 2], "digest": "d"}})
    listed.outputs["steps"].append(3)
    assert listed.outputs["steps"] == [1, 2]


def test_a_failures_traceback_file_is_found_after_the_working_directory_changed(manifest_file, tmp_path,
                                                                                  monkeypatch, registry):
    (tmp_path / "failing.py").write_text(
        "from hetflow import op\n\n\n"
        "@op('t.refuse', dtypes=['fp32'])\n"
        "def refuse(xp, x):\n"
        "    \"\"\"Refuses every array.\"\"\"\n"
        "    raise ValueError('refused')\n")
    path = manifest_file(SMALL.replace("y: {op: relu, inputs: [x]}", "y: {op: t.refuse, inputs: [x]}")
                         .replace("executors:", "plugins: [failing.py]\nexecutors:"))
    monkeypatch.chdir(tmp_path)
    run = hetflow.run(path, runs_dir="runs")
    assert run.status == "failed"
    os.mkdir("elsewhere")
    monkeypatch.chdir("elsewhere")  # a notebook's %cd before the failure is looked at
    traceback_file = run.failures[0].traceback_file
    with open(traceback_file) as f:
        assert "refused" in f.read()
