"""The event stream in-process: what tasks emit, retries and timeouts, and the three log formats."""

import io
import json
import threading
import time
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.errors import RunFailed
from hetflow.engine.run.events import EventStream, JsonLog, LineLog, ProgressDisplay, format_line, run_event
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe
from hetflow.executors.base import Backend
from hetflow.executors.cpu import CpuExecutor

PIPE = """
version: 1
name: ev
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x: {op: ones, args: {shape: [8, 8]}, executor: host}
  y: {op: relu, inputs: [x], executor: accel, retries: RETRIES, timeout: TIMEOUT}
  z: {op: add, inputs: [y, x], executor: host}
outputs: {z: z}
"""


class FlakyCpu(CpuExecutor):
    """A third-party style executor whose first ``failures`` calls fail, then work."""

    def __init__(self, name, failures=1, delay=0.0):
        super().__init__(name)
        self.failures = failures
        self.delay = delay
        self.calls = 0
        self._count = threading.Lock()

    def execute(self, plan, inputs):
        with self._count:
            self.calls += 1
            call = self.calls
        if self.delay and call <= self.failures:
            time.sleep(self.delay)
        elif call <= self.failures:
            raise Backend("device busy", node="y")
        return super().execute(plan, inputs)


def setup(manifest_file, retries=0, timeout="null"):
    m = compile_manifest(load(manifest_file(PIPE.replace("RETRIES", str(retries)).replace("TIMEOUT", str(timeout)))))
    return m, make_plan(m, probe)


def test_every_task_starts_and_finishes_once_and_bridges_carry_bytes(manifest_file, tmp_path):
    m, p = setup(manifest_file)
    seen = []
    r = execute(m, p, runs_dir=str(tmp_path), on_event=seen.append)
    record = json.loads(Path(r.record_path).read_text())
    assert [e["event"] for e in seen][0] == "started" and seen[0]["kind"] == "run"
    assert seen[0]["tasks"] == len(p.partitions) + 2 * len(p.bridges) + len(p.outputs)
    assert seen[-1] == {**seen[-1], "event": "finished", "kind": "run", "id": r.run_id}
    starts = [e["id"] for e in seen if e["event"] == "started" and e["kind"] == "partition"]
    ends = [e for e in seen if e["event"] == "finished" and e["kind"] != "run"]
    assert sorted(starts) == sorted(x.id for x in p.partitions)
    assert len(ends) == seen[0]["tasks"]
    exports = [e for e in ends if e["kind"] == "export"]
    assert exports and all(e["bytes"] == 256 for e in exports)
    assert all(e["worker"] is None and e["attempt"] == 1 for e in ends)
    assert len(record["events"]) == len(seen) - 1  # the closing run event follows the record
    assert record["nodes"]["y"]["attempts"] == 1


def test_a_transient_failure_is_retried_and_the_record_counts_attempts(manifest_file, tmp_path):
    m, p = setup(manifest_file, retries=2)
    executors = {"host": CpuExecutor("host"), "accel": FlakyCpu("accel", failures=1)}
    seen = []
    r = execute(m, p, runs_dir=str(tmp_path), executors=executors, on_event=seen.append)
    assert r.status == "succeeded" and executors["accel"].calls == 2
    pid = p.nodes["y"].partition
    mine = [(e["event"], e["attempt"]) for e in seen if e.get("id") == pid]
    assert mine == [("started", 1), ("retried", 1), ("started", 2), ("finished", 2)]
    retried = next(e for e in seen if e["event"] == "retried")
    assert retried["error"] == "backend error: device busy" and retried["timed_out"] is False
    assert r.record["nodes"]["y"] == {**r.record["nodes"]["y"], "status": "succeeded", "attempts": 2}
    assert r.record["live_activations_after"] == {"host": 0, "accel": 0}


def test_retries_run_out(manifest_file, tmp_path):
    m, p = setup(manifest_file, retries=1)
    executors = {"host": CpuExecutor("host"), "accel": FlakyCpu("accel", failures=5)}
    with pytest.raises(RunFailed) as info:
        execute(m, p, runs_dir=str(tmp_path), executors=executors)
    assert str(info.value) == "stage 'y' failed: backend error: device busy"
    record = json.loads(Path(info.value.record_path).read_text())
    assert record["nodes"]["y"]["status"] == "failed" and record["nodes"]["y"]["attempts"] == 2
    assert executors["accel"].calls == 2
    assert record["live_activations_after"] == {"host": 0, "accel": 0}


def test_a_slow_attempt_times_out_and_the_retry_succeeds(manifest_file, tmp_path):
    m, p = setup(manifest_file, retries=1, timeout=0.2)
    assert p.partition_of("y").timeout == 0.2 and p.partition_of("y").retries == 1
    slow = FlakyCpu("accel", failures=1, delay=1.0)
    executors = {"host": CpuExecutor("host"), "accel": slow}
    seen = []
    r = execute(m, p, runs_dir=str(tmp_path), executors=executors, on_event=seen.append)
    assert r.status == "succeeded" and r.record["nodes"]["y"]["attempts"] == 2
    retried = next(e for e in seen if e["event"] == "retried")
    assert retried["timed_out"] is True and retried["error"] == "timed out after 0.2 s"
    deadline = time.time() + 5
    while slow.live_activations() and time.time() < deadline:  # the abandoned attempt ends and is released
        time.sleep(0.05)
    assert slow.live_activations() == 0


def test_a_timeout_without_retries_fails_the_run_as_timed_out(manifest_file, tmp_path):
    m, p = setup(manifest_file, timeout=0.1)
    executors = {"host": CpuExecutor("host"), "accel": FlakyCpu("accel", failures=1, delay=0.5)}
    with pytest.raises(RunFailed) as info:
        execute(m, p, runs_dir=str(tmp_path), executors=executors)
    assert str(info.value) == "stage 'y' failed: timed out after 0.1 s"
    record = json.loads(Path(info.value.record_path).read_text())
    assert record["nodes"]["y"]["status"] == "timed out"
    assert record["nodes"]["y"]["error"] == "timed out after 0.1 s"
    assert record["live_activations_after"] == {"host": 0, "accel": 0}


@pytest.mark.parametrize("timeout", [".inf", "1e300", "10000000000"])
def test_a_timeout_longer_than_a_wait_can_be_is_no_deadline(manifest_file, tmp_path, timeout):
    """A lock's wait takes at most threading.TIMEOUT_MAX seconds: ``timeout: .inf`` crashed the run with
    OverflowError ("timestamp out of range for platform time_t") after validate and plan took it."""
    path = manifest_file(PIPE.replace("RETRIES", "0").replace("TIMEOUT", timeout))
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["run", path, "--runs-dir", str(tmp_path / "runs"), "--no-cache", "--quiet"], out=out,
                    err=err) == 0, err.getvalue()
    record = json.loads((tmp_path / "runs" / out.getvalue().split()[-1] / "record.json").read_text())
    assert record["status"] == "succeeded" and record["nodes"]["y"]["status"] == "succeeded"


def test_bad_retries_and_timeout_are_manifest_errors(manifest_file):
    code_out, err = io.StringIO(), io.StringIO()
    path = manifest_file(PIPE.replace("RETRIES", "-1").replace("TIMEOUT", "0"))
    assert cli.main(["validate", path], out=code_out, err=err) == 2
    lines = err.getvalue().splitlines()
    assert lines == [f"{path}:9:56: error: stages.y.retries must be at least 0, found -1",
                     f"{path}:9:69: error: stages.y.timeout must be more than 0, found 0"]


def test_formats(manifest_file, tmp_path):
    path = manifest_file(PIPE.replace("RETRIES", "0").replace("TIMEOUT", "null"))
    runs = str(tmp_path / "runs")
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["run", path, "--runs-dir", runs, "--log-format", "json"], out=out, err=err) == 0
    events = [json.loads(line) for line in err.getvalue().splitlines()]
    assert events[0]["event"] == "started" and events[0]["kind"] == "run" and events[0]["mode"] == "threads"
    assert events[-1]["event"] == "finished" and events[-1]["kind"] == "run"
    assert {e["kind"] for e in events} == {"run", "partition", "export", "import", "output"}

    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["run", path, "--runs-dir", runs], out=out, err=err) == 0
    lines = err.getvalue().splitlines()
    assert lines[0].startswith("[   0.000s] run ") and lines[0].endswith(" started: 8 tasks (threads)")
    assert any(" export x@accel finished on host in " in line and line.endswith(", 256 B") for line in lines)
    assert lines[-1].split("] ", 1)[1].startswith("run ") and lines[-1].endswith(" finished")
    assert "record: " in out.getvalue()

    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["run", path, "--runs-dir", runs, "--quiet"], out=out, err=err) == 0
    assert err.getvalue() == "" and "record: " in out.getvalue()


def test_the_rich_display_on_a_terminal(manifest_file, tmp_path):
    m, p = setup(manifest_file)
    screen = io.StringIO()
    display = ProgressDisplay(screen, force_terminal=True)
    execute(m, p, runs_dir=str(tmp_path), on_event=display)
    display.close()
    text = screen.getvalue()
    assert "8/8" in text and "512 B bridged" in text and "\x1b[" in text


def test_flags_that_do_not_go_together(manifest_file):
    path = manifest_file(PIPE.replace("RETRIES", "0").replace("TIMEOUT", "null"))
    for argv, message in [
        (["--workers", "2", "--scheduler", "tcp://127.0.0.1:1"], "--workers starts a new cluster and --scheduler joins one"),
        (["--threads-per-worker", "2"], "--threads-per-worker goes with --workers"),
        (["--place", "accel=0"], "--place needs a cluster"),
        (["--scheduler", "nowhere"], "--scheduler expects tcp://HOST:PORT or a scheduler file"),
    ]:
        err = io.StringIO()
        assert cli.main(["run", path, *argv], out=io.StringIO(), err=err) == 2, argv
        assert err.getvalue().startswith("hetflow: error: " + message), err.getvalue()


def test_stream_and_sinks_directly():
    text, js = io.StringIO(), io.StringIO()
    stream = EventStream([LineLog(text), JsonLog(js)])
    stream.emit(run_event("started", "r", tasks=1, mode="local-cluster", dashboard="http://127.0.0.1:8787/status"))
    stream.emit({"event": "failed", "kind": "partition", "id": "p0", "executor": "accel", "worker": "tcp://w:1",
                 "attempt": 3, "duration_s": 0.5, "error": "timed out after 0.5 s", "timed_out": True,
                 "start": 1.0, "end": 1.5, "status": "failed"})
    stream.emit({"event": "flush", "kind": "run", "id": "r", "worker": "tcp://w:1"})
    lines = text.getvalue().splitlines()
    assert lines[0].endswith("run r started: 1 tasks (local-cluster); dashboard http://127.0.0.1:8787/status")
    assert lines[1].endswith("partition p0 timed out on accel (worker tcp://w:1) in 0.500 s (attempt 3): "
                             "timed out after 0.5 s")
    assert len(lines) == 2 and len(js.getvalue().splitlines()) == 2
    assert [e["event"] for e in stream.tasks()] == ["failed"]
    assert format_line({"event": "started", "kind": "import", "id": "x@a", "executor": "a"}) == "import x@a started on a"
