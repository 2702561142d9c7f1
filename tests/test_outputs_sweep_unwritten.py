"""A sweep whose summary's last write the disk refused (a full disk, here RLIMIT_FSIZE in the child) still
names itself and the runs its points left: with ``--json`` the error object's ``sweep_id``, ``summary`` and
``points``, without it the sweep's id on standard output's last line, and ``runs show`` reads the same runs."""

import io
import json
import os
import resource
import subprocess
import sys

from hetflow.engine.cli import main

# enough points that the summary, once every row names its run and digests, outgrows any one run's record
SWEEP = """\
version: 1
name: wide
params: {seed: 1, k: 1}
matrix: {seed: [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20], k: [1, 2, 3]}
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: "${seed}"}, executor: host}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _limited(manifest, runs, limit, *extra):
    def limited():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", runs,
                           "--quiet", "--no-cache", *extra], capture_output=True, text=True, preexec_fn=limited,
                          timeout=300, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def test_a_sweep_whose_summary_could_not_be_ended_names_itself_and_its_points_runs(tmp_path):
    manifest = tmp_path / "wide.yaml"
    manifest.write_text(SWEEP)
    whole = str(tmp_path / "whole")
    code, out, err = cli("run", str(manifest), "--runs-dir", whole, "--quiet", "--no-cache", "--json")
    assert code == 0, err
    done = json.loads(out)
    final = os.path.getsize(done["summary"])
    largest = max(os.path.getsize(os.path.join(whole, p["run_id"], name)) for p in done["points"]
                  for name in os.listdir(os.path.join(whole, p["run_id"])))
    # every run's files fit, and the first summary (every row pending, no run named) does; the last does not
    limit = int(final * 0.75)
    assert largest < limit, (largest, final)

    for as_json in (True, False):
        runs = str(tmp_path / ("json" if as_json else "text"))
        ran = _limited(manifest, runs, limit, *(["--json"] if as_json else []))
        assert ran.returncode == 5, ran.stderr
        assert "Traceback" not in ran.stderr and "File too large" in ran.stderr, ran.stderr
        assert len(ran.stderr.splitlines()) == 1, ran.stderr  # one line says which file
        sweeps = [d for d in os.listdir(runs) if d.endswith("-sweep")]
        assert len(sweeps) == 1, sweeps
        sweep_id = sweeps[0]
        if as_json:
            said = json.loads(ran.stdout)
            assert (said["status"], said["exit_code"], said["error"]) == ("error", 5, "environment")
            assert said["sweep_id"] == sweep_id and sweep_id in said["message"]
            assert os.path.samefile(said["summary"], os.path.join(runs, sweep_id, "sweep.json"))
            points = said["points"]
            assert len(points) == len(done["points"])
            for p in points:
                with open(os.path.join(runs, p["run_id"], "record.json")) as f:
                    record = json.load(f)
                assert p["status"] == record["status"] == "succeeded"
                assert p["outputs"] == {k: v["digest"] for k, v in record["outputs"].items()}
        else:
            assert ran.stdout.splitlines()[-1] == sweep_id, ran.stdout
        # the summary on disk is an earlier whole state; runs show completes it from the points' records
        code, out, err = cli("runs", "show", sweep_id, "--runs-dir", runs, "--json")
        assert code == 0, err
        shown = json.loads(out)["points"]
        assert [p["status"] for p in shown] == ["succeeded"] * len(done["points"])
        if as_json:
            assert [p["run_id"] for p in shown] == [p["run_id"] for p in points]


def test_a_sweep_whose_first_summary_write_was_refused_names_itself_and_runs_nothing(tmp_path, monkeypatch):
    import errno

    from hetflow.engine.batch import sweeps

    manifest = tmp_path / "wide.yaml"
    manifest.write_text(SWEEP)
    runs = str(tmp_path / "runs")
    real = sweeps.write_sweep
    calls = []

    def refused_first(folder, summary):
        # the disk that took the new sweep's summary is full by the sweep's own first write
        calls.append(folder)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, "No space left on device", os.path.join(folder, "sweep.json"))
        return real(folder, summary)

    monkeypatch.setattr(sweeps, "write_sweep", refused_first)
    code, out, err = cli("run", str(manifest), "--runs-dir", runs, "--quiet", "--no-cache", "--json")
    monkeypatch.undo()
    assert code == 5, err
    said = json.loads(out)
    sweep_id = said["sweep_id"]
    assert os.listdir(runs) and sorted(d for d in os.listdir(runs) if not d.startswith(".")) == [sweep_id]
    assert os.path.samefile(said["summary"], os.path.join(runs, sweep_id, "sweep.json"))
    assert {(p["status"], p["run_id"]) for p in said["points"]} == {("pending", None)}
    assert "no point has run" in said["message"] and f"--resume {sweep_id}" in said["message"]
    # the summary the sweep was made with stays, every point pending: what a resume runs once this process is gone
    with open(said["summary"]) as f:
        assert {p["status"] for p in json.load(f)["points"]} == {"pending"}
