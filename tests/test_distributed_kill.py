"""Issue 27: a worker killed as an operator kills it, on a cluster started as an operator starts it.

``dask scheduler`` and two ``dask worker`` processes under nannies
(:mod:`killworker`), once with Dask's default settings (replica reduction
on, every 2 s) and once with ReduceReplicas every 50 ms, so that the only
copy of a bridged tensor is usually the destination's. ``hetflow run
--scheduler`` runs a chain alternating between ``host`` and ``accel``;
accel's worker gets SIGKILL at one of :data:`killworker.MOMENTS` (mid-bridge
and after the last partition among them) and its nanny restarts it under
the same name. Every run exits 0, with the digests of a clean run and a
``recovery`` record naming the lost worker and what ran again.
"""

import json

import pytest

import killworker as kw

pytestmark = pytest.mark.slow

#: every moment under Dask's defaults; under hard replica reduction, those where the only copy matters
CASES = [("default", m) for m in kw.MOMENTS] + [
    ("reduce-replicas", m) for m in ("mid-bridge out of accel (exported, not imported)",
                                     "host's import of accel's tensor done", "bridge into accel imported",
                                     "mid-bridge into accel (exported, not imported)", "after the last partition")]


@pytest.fixture(scope="module", params=list(kw.CONFIGS))
def real(request, tmp_path_factory):
    folder = tmp_path_factory.mktemp(f"cluster-{request.param}")
    cluster = kw.start(folder / "cluster", request.param)
    path = kw.manifest(folder / "m")
    try:
        clean = kw.run(cluster, path, folder / "clean-runs")
        assert clean.exit_code == 0, "\n".join(clean.stderr[-20:])
        yield request.param, cluster, path, clean
    finally:
        cluster.stop()


@pytest.mark.parametrize("moment", list(kw.MOMENTS))
def test_killing_accels_worker_at_any_moment_is_survived(real, moment, tmp_path):
    config, cluster, path, clean = real
    if (config, moment) not in CASES:
        pytest.skip("covered under Dask's default settings")
    out = kw.run(cluster, path, tmp_path / "runs", kw.MOMENTS[moment])
    assert out.killed, "the moment never came"
    assert out.exit_code == 0, "\n".join(out.stderr[-30:])
    assert out.record["status"] == "succeeded"
    assert out.digests == clean.digests and len(clean.digests) == 2
    recoveries = out.record["recovery"]
    assert out.record["live_activations_after"] == {"accel": 0, "host": 0}
    events = [json.loads(line) for line in out.stderr if line.startswith("{")]
    said = [e for e in events if e.get("event") == "worker-lost"]
    reran = [item["task"] for r in recoveries for item in r["recomputed"] if item["task"].startswith("partition:")]
    # a partition that had run is restored from its cache entry: nothing upstream of it runs again for its sake
    assert all(item["restored"] for r in recoveries for item in r["recomputed"]
               if item["task"].startswith("partition:") and item["had_finished"]), recoveries
    if moment == "after the outputs":
        # the worker dies as its last output task ends: an output the client had gathered is not run again; the
        # last one may not have reached the client yet, and then its partition alone runs again
        assert set(reran) <= {f"partition:p{kw.STEPS - 1}"}, reran
        return
    assert recoveries, "no recovery was recorded"
    lost = {w["address"] for r in recoveries for w in r["lost_workers"]}
    assert out.killed in lost and all(r["detected_at"] for r in recoveries)
    assert said and said[0]["worker"] == out.killed and said[0]["name"] == "w-accel" and said[0]["at"]
    assert said[0]["rerun"] == [item["task"] for item in recoveries[0]["recomputed"]]


def test_a_scheduler_killed_under_a_run_leaves_its_record_failed_and_says_so(tmp_path):
    """The scheduler dies while the run waits on it: the client gives up reconnecting (Dask's 10 s), and the run
    ends ``failed`` with the lost scheduler as its error, exit 1, never ``running`` or an internal error."""
    import os
    import signal
    import subprocess
    import sys

    cluster = kw.start(tmp_path / "cluster")
    try:
        path = kw.manifest(tmp_path / "m")
        runs = tmp_path / "runs"
        proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                 str(cluster.file), "--runs-dir", str(runs), "--log-format", "json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for line in proc.stderr:
            if line.startswith("{") and json.loads(line).get("kind") == "partition":
                os.kill(cluster.procs[0].pid, signal.SIGKILL)  # the run is under way: its scheduler goes
                break
        out, err = proc.communicate(timeout=120)
    finally:
        cluster.stop()
    assert proc.returncode == 1, err[-3000:]
    assert "internal error" not in err and "Traceback" not in err
    assert "stopped answering" in err
    record = json.loads(next(runs.glob("*/record.json")).read_text())
    assert record["status"] == "failed" and "stopped answering" in record["error"]["message"]
    assert record["run_id"] == out.split()[-1]
