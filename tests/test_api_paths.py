"""A run's and a sweep's paths are fixed when they begin: a notebook's ``%cd`` (an ``os.chdir`` in ``on_event``,
``on_point`` or another thread) while one runs changes neither where its files go nor what its records name."""

from __future__ import annotations

import json
import os

import pytest

import hetflow

SQUARES = """\
version: 1
name: squares
params: {n: 6}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}, executor: a}
  y: {op: mul, inputs: [x, x], executor: b}
outputs: {y: y}
"""


@pytest.fixture
def two_folders(tmp_path, monkeypatch):
    """The folder the call begins in (holding m.yaml), and another one the working directory moves to; each
    holds an m.yaml, the second of another pipeline, as two projects a notebook moves between do."""
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    (here / "m.yaml").write_text(SQUARES)
    (there / "m.yaml").write_text(SQUARES.replace("op: mul", "op: add"))
    monkeypatch.chdir(here)
    return here, there


def _files(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, names in os.walk(folder) for f in names)


@pytest.mark.parametrize("at", [1, 3])
def test_a_run_whose_working_directory_changes_while_it_runs_writes_where_it_began(two_folders, at):
    here, there = two_folders
    seen = []

    def move(event: dict) -> None:
        seen.append(event)
        if len(seen) == at:
            os.chdir(there)

    run = hetflow.run("m.yaml", on_event=move, cache=False)
    assert len(seen) > at
    assert run.status == "succeeded", run.error
    assert run.path == os.path.join("runs", run.run_id)  # named as runs_dir was
    assert run.outputs["y"].tolist() == [0.0, 1.0, 4.0, 9.0, 16.0, 25.0]
    record = json.loads((here / run.path / "record.json").read_text())
    assert record["status"] == "succeeded" and record["manifest"]["file"] == str(here / "m.yaml")
    assert (here / run.path / "y.npy").is_file()
    assert _files(there) == ["m.yaml"]
    # its lock was given back where it was taken: no lock file of a run that ended is left
    assert not os.listdir(here / "runs" / ".locks")


def test_a_sweep_whose_working_directory_changes_between_points_keeps_to_its_folder_and_manifest(two_folders):
    here, there = two_folders
    rows = []

    def move(row: dict) -> None:
        rows.append(row)
        os.chdir(there)

    (here / "m.yaml").write_text(SQUARES.replace("outputs:", "matrix: {n: [2, 3, 4]}\noutputs:"))
    sweep = hetflow.sweep("m.yaml", on_point=move, cache=False)
    assert sweep.status == "succeeded" and len(rows) == 3
    assert sweep.path == os.path.join("runs", sweep.sweep_id)
    assert [r.outputs["y"].tolist() for r in sweep.runs] == [[0.0, 1.0], [0.0, 1.0, 4.0], [0.0, 1.0, 4.0, 9.0]]
    # every point's record names the manifest the sweep ran, not the m.yaml of the folder moved to
    assert [r.record["manifest"]["file"] for r in sweep.runs] == [str(here / "m.yaml")] * 3
    assert all(r.path.startswith(str(here / "runs")) for r in sweep.runs)
    assert _files(there) == ["m.yaml"]


def test_a_relative_runs_dir_in_a_removed_working_directory_is_an_environment_error(tmp_path, monkeypatch):
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    manifest = tmp_path / "m.yaml"
    manifest.write_text(SQUARES)
    message = "runs_dir='runs' cannot be used: it is relative to the working directory, which is gone"
    for call in (lambda: hetflow.run(manifest), lambda: hetflow.plan(manifest), lambda: hetflow.open_run("latest")):
        with pytest.raises(hetflow.EnvironmentUnavailable, match=message):
            call()
    run = hetflow.run(manifest, runs_dir=tmp_path / "runs")  # an absolute one needs no working directory
    assert run.ok and os.path.isdir(run.path)
