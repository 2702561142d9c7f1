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


def test_a_scheduler_that_stops_answering_fails_the_plan_and_the_run_instead_of_hanging(tmp_path):
    """A scheduler process that is stopped (SIGSTOP; a hung or swapping one is the same to its clients) keeps its
    connections open and its kernel acknowledges what is sent, so Dask's client waits for it for ever. A run under
    way ends ``failed``, exit 1, and placing a run on it raises ``EnvironmentUnavailable``, once it has left a
    question unanswered for Dask's ``distributed.comm.timeouts.tcp`` (11 s here, the least Dask takes). Both wait
    at once, on one stop."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import dask

    import hetflow

    cluster = kw.start(tmp_path / "cluster")
    scheduler = cluster.procs[0]
    runs = tmp_path / "runs"
    try:
        path = kw.manifest(tmp_path / "m")
        with cluster.client() as client, dask.config.set({"distributed.comm.timeouts.tcp": "11s"}):
            proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler",
                                     str(cluster.file), "--runs-dir", str(runs), "--log-format", "json"],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                    env={**os.environ, "DASK_DISTRIBUTED__COMM__TIMEOUTS__TCP": "11s"})
            for line in proc.stderr:
                if line.startswith("{") and json.loads(line).get("kind") == "partition":
                    os.kill(scheduler.pid, signal.SIGSTOP)  # the run is under way: its scheduler stops answering
                    break
            asked = time.monotonic()
            with pytest.raises(hetflow.EnvironmentUnavailable) as placing:
                hetflow.plan(path, scheduler=client)
            waited = time.monotonic() - asked
            out, err = proc.communicate(timeout=120)
            os.kill(scheduler.pid, signal.SIGCONT)
    finally:
        if scheduler.poll() is None:
            os.kill(scheduler.pid, signal.SIGCONT)
        cluster.stop()
    assert "stopped answering while the run was placed on its workers" in str(placing.value)
    assert "did not answer in 11 s" in str(placing.value) and 11 <= waited < 60, waited
    assert proc.returncode == 1, err[-3000:]
    assert "internal error" not in err and "Traceback" not in err
    record = json.loads(next(runs.glob("*/record.json")).read_text())
    assert record["status"] == "failed", record["status"]
    assert "stopped answering during run" in record["error"]["message"]
    assert "did not answer in 11 s" in record["error"]["message"]
    assert record["run_id"] == out.split()[-1]


@pytest.mark.parametrize("value, words", [
    ("4s", "Dask's distributed.comm.timeouts.tcp is '4s': Dask takes no less than 11 s"),
    ("soon", "Dask's distributed.comm.timeouts.tcp is 'soon', not a time (such as 30s)"),
])
def test_a_tcp_timeout_dask_cannot_take_is_bad_input_before_any_cluster_starts(tmp_path, value, words):
    """Below 11 s Dask's every connection fails its assertion ``Timeout too low``: an internal error, exit 3."""
    import dask

    import hetflow

    path = kw.manifest(tmp_path / "m")
    with dask.config.set({"distributed.comm.timeouts.tcp": value}):
        for scheduler in ({"workers": 1}, {"scheduler": "tcp://127.0.0.1:1"}):
            with pytest.raises(hetflow.UsageError, match=words.replace("(", r"\(").replace(")", r"\)")):
                hetflow.run(path, runs_dir=tmp_path / "runs", **scheduler)
    assert not (tmp_path / "runs").exists()
