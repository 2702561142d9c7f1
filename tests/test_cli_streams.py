"""What the CLI's output streams and exit codes promise, tried the way users meet them.

Real processes piped into readers that go away (``| head -1``, a pager
that quits, a terminal that hung up), signals, locks held by another
process, a cluster that is not there, a runs directory that cannot be
used. After each: the exit code, what standard output holds (one JSON
object with ``--json``; the id as its last line without), the records on
disk, and that no crash log was written under the process's ``TMPDIR``.
"""

import errno
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.run.events import EventStream, JsonLog, LineLog, ProgressDisplay, QuietStream, run_event

REPO = Path(__file__).resolve().parent.parent
QUICKSTART = str(REPO / "examples" / "quickstart.yaml")

WAIT_OP = "import time\n\nfrom hetflow import op\n\n\n@op('t.wait')\ndef wait(xp, x, *, seconds: float):\n    time.sleep(seconds)\n    return x\n"

#: one run: its only partition sleeps SECONDS
SLOW = """\
version: 1
name: slow
plugins: [wait_ops.py]
params: {seconds: SECONDS}
MATRIXexecutors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}}
  y: {op: t.wait, inputs: [x], args: {seconds: "${seconds}"}}
outputs: {y: y}
"""

#: four points, each sleeping a little: rows reach standard output well after the reader has gone
SWEEP_MATRIX = "matrix: {seconds: [0.2, 0.21, 0.22, 0.23]}\n"


def hetflow(*argv: str) -> list[str]:
    return [sys.executable, "-m", "hetflow.engine.cli", *argv]


def environment(tmp_path: Path, *, buffered: bool = False) -> dict:
    """The child's environment: its own TMPDIR (crash logs go under it) and stdout buffering as asked."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    env = dict(os.environ, TMPDIR=str(tmp))
    env.pop("PYTHONUNBUFFERED", None)
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    return env


def crash_logs(tmp_path: Path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "tmp" / "hetflow").glob("crash-*")) if (tmp_path / "tmp").exists() else []


def slow_manifest(folder: Path, seconds: float, matrix: str = "") -> str:
    (folder / "wait_ops.py").write_text(WAIT_OP)
    path = folder / "slow.yaml"
    path.write_text(SLOW.replace("SECONDS", str(seconds)).replace("MATRIX", matrix))
    return str(path)


def close_reader(argv: list[str], tmp_path: Path, *, stream: str = "stdout", at_once: bool = False,
                 buffered: bool = False) -> tuple[int, str, str]:
    """Run ``hetflow ARGV`` with ``stream`` piped to a reader that reads one line (or none) and goes away.

    Returns the exit code, the line read, and the whole of the other stream.
    """
    other = tmp_path / f"other-{time.monotonic_ns()}.txt"
    with open(other, "w") as sink:
        pipes = {"stdout": subprocess.PIPE, "stderr": sink} if stream == "stdout" else {"stdout": sink, "stderr": subprocess.PIPE}
        proc = subprocess.Popen(argv, text=True, env=environment(tmp_path, buffered=buffered), cwd=tmp_path, **pipes)
        reader = proc.stdout if stream == "stdout" else proc.stderr
        try:
            line = "" if at_once else reader.readline()
            reader.close()
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    return code, line, other.read_text()


@pytest.fixture(scope="module")
def one_run(tmp_path_factory):
    runs = tmp_path_factory.mktemp("listed") / "runs"
    out = io.StringIO()
    assert cli.main(["run", QUICKSTART, "--runs-dir", str(runs), "--quiet"], out=out, err=io.StringIO()) == 0
    return str(runs), out.getvalue().strip().splitlines()[-1]


LISTINGS = {
    "runs": lambda runs, run_id: ["runs", "--runs-dir", runs],
    "runs show": lambda runs, run_id: ["runs", "show", run_id, "--runs-dir", runs],
    "executors --ops": lambda runs, run_id: ["executors", "--ops"],
    "examples list": lambda runs, run_id: ["examples", "list"],
}


@pytest.mark.parametrize("command", sorted(LISTINGS))
@pytest.mark.parametrize("at_once", [False, True], ids=["reads-a-line", "closes-at-once"])
def test_a_listing_ends_quietly_with_its_own_exit_code_when_its_reader_goes(one_run, tmp_path, command, at_once):
    # closing at once with a buffered stdout fails the command's last flush; reading a line first with an
    # unbuffered one fails a write in the middle of the listing
    code, line, err = close_reader(hetflow(*LISTINGS[command](*one_run)), tmp_path, at_once=at_once,
                                   buffered=at_once)
    assert code == 0, err
    assert err == ""  # neither "internal error" nor the interpreter's "Exception ignored ... BrokenPipeError"
    assert at_once or line.strip()
    assert crash_logs(tmp_path) == []


def test_a_listing_whose_stdout_was_closed_before_it_started_exits_0(tmp_path):
    done = subprocess.run(hetflow("examples", "list"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          env=environment(tmp_path), preexec_fn=lambda: os.close(1), timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("log_format", ["text", "json"])
@pytest.mark.parametrize("at_once", [False, True], ids=["reads-a-line", "closes-at-once"])
def test_a_run_whose_stderr_closes_runs_to_its_end(tmp_path, log_format, at_once):
    runs = tmp_path / "runs"
    code, line, out = close_reader(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--log-format", log_format),
                                   tmp_path, stream="stderr", at_once=at_once)
    assert code == 0, out
    assert at_once or "started" in line
    run_id = out.strip().splitlines()[-1]
    record = json.loads((runs / run_id / "record.json").read_text())
    assert record["status"] == "succeeded" and record["error"] is None and set(record["outputs"]) == {"probs", "probs_bf16"}
    assert crash_logs(tmp_path) == []


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_sweep_whose_stdout_closes_after_its_first_line_runs_every_point(tmp_path, parallel):
    runs = tmp_path / "runs"
    path = slow_manifest(tmp_path, 0.2, SWEEP_MATRIX)
    code, line, err = close_reader(hetflow("run", path, "--runs-dir", str(runs), "--parallel", str(parallel)),
                                   tmp_path)
    assert code == 0, err
    assert line.startswith("succeeded slow[seconds=")
    (summary_file,) = runs.glob("*/sweep.json")
    summary = json.loads(summary_file.read_text())
    assert summary["status"] == "succeeded"
    assert [p["status"] for p in summary["points"]] == ["succeeded"] * 4
    for point in summary["points"]:
        assert json.loads((runs / point["run_id"] / "record.json").read_text())["status"] == "succeeded"
    assert "internal error" not in err and crash_logs(tmp_path) == []


def json_only(out: str) -> dict:
    """Standard output's one JSON object (and nothing else)."""
    data = json.loads(out)
    assert isinstance(data, dict)
    return data


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_json_on_bad_input_gives_the_diagnostics_with_their_place(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: bad\nexecutors: {host: {vendor: cpu}}\nstages:\n  x: {op: relu2}\noutputs: {x: x}\n")
    code, out, err = run_cli("run", str(bad), "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 2 and err.startswith(f"{bad}:5:11: error: unknown op 'relu2'")
    data = json_only(out)
    assert {k: data[k] for k in ("status", "exit_code", "error")} == {"status": "error", "exit_code": 2, "error": "bad-input"}
    (d,) = data["diagnostics"]
    assert (d["file"], d["line"], d["col"], d["severity"]) == (str(bad), 5, 11, "error")
    assert d["message"].startswith("unknown op 'relu2' in stage 'x'")
    assert not (tmp_path / "runs").exists()

    code, out, err = run_cli("run", QUICKSTART, "-p", "batchsize=8", "--runs-dir", str(tmp_path / "runs"), "--json")
    data = json_only(out)
    assert code == 2 and data["error"] == "bad-input" and data["diagnostics"] == [] and "batchsize" in data["message"]

    code, out, err = run_cli("runs", "show", "no-such-run", "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 2 and json_only(out)["exit_code"] == 2

    code, out, err = run_cli("run", "--json", "--no-such-flag", QUICKSTART)  # does not even parse
    assert code == 2 and json_only(out)["error"] == "bad-input"


HOLD = """
import sys, time
from hetflow.engine.store.locks import RunLock
lock = RunLock(sys.argv[1], manifest="held.yaml").acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def test_json_when_the_lock_is_held_names_the_holder(tmp_path):
    from hetflow.engine.store.locks import lock_path
    from hetflow.engine.manifest.validate import compile_manifest, load

    runs = str(tmp_path / "runs")
    manifest = compile_manifest(load(QUICKSTART), {})
    where = lock_path(runs, QUICKSTART, manifest.name, manifest.params)
    holder = subprocess.Popen([sys.executable, "-c", HOLD, where, "60"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        code, out, err = run_cli("run", QUICKSTART, "--runs-dir", runs, "--quiet", "--json")
    finally:
        holder.kill()
        holder.wait()
    assert code == 4 and "is already running" in err
    data = json_only(out)
    assert (data["status"], data["exit_code"], data["error"], data["lock"]) == ("error", 4, "locked", where)
    assert data["holder"]["pid"] == holder.pid and data["holder"]["manifest"] == "held.yaml"


def start_then_interrupt(argv: list[str], tmp_path: Path) -> tuple[int, str]:
    """Start ``hetflow ARGV`` with JSON events on stderr; SIGINT it once a partition has started."""
    proc = subprocess.Popen(hetflow(*argv, "--log-format", "json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=environment(tmp_path), start_new_session=True)
    try:
        for line in proc.stderr:
            if line.startswith("{") and json.loads(line).get("kind") == "partition":
                os.kill(proc.pid, signal.SIGINT)
                break
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_cancelled_run_says_so_on_stdout(tmp_path, as_json):
    runs = tmp_path / "runs"
    path = slow_manifest(tmp_path, 30)
    code, out = start_then_interrupt(["run", path, "--runs-dir", str(runs), *(["--json"] if as_json else [])], tmp_path)
    assert code == 130
    (record_file,) = runs.glob("*/record.json")
    run_id = record_file.parent.name
    assert json.loads(record_file.read_text())["status"] == "cancelled"
    if as_json:
        data = json_only(out)
        assert {k: data[k] for k in ("status", "exit_code", "signal", "run_id", "record")} == {
            "status": "cancelled", "exit_code": 130, "signal": "SIGINT", "run_id": run_id, "record": str(record_file)}
    else:
        assert out.strip().splitlines()[-1] == run_id
    assert crash_logs(tmp_path) == []


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_a_cancelled_sweep_says_so_on_stdout(tmp_path, as_json):
    runs = tmp_path / "runs"
    path = slow_manifest(tmp_path, 30, "matrix: {seconds: [30, 31]}\n")
    code, out = start_then_interrupt(["run", path, "--runs-dir", str(runs), *(["--json"] if as_json else [])], tmp_path)
    assert code == 130
    (summary_file,) = runs.glob("*/sweep.json")
    sweep_id = summary_file.parent.name
    assert json.loads(summary_file.read_text())["status"] == "cancelled"
    if as_json:
        data = json_only(out)
        assert (data["status"], data["exit_code"], data["sweep_id"], data["summary"]) == (
            "cancelled", 130, sweep_id, str(summary_file))
    else:
        assert out.strip().splitlines()[-1] == sweep_id


def test_an_unreachable_scheduler_exits_5_and_writes_nothing(tmp_path):
    runs = tmp_path / "runs"
    done = subprocess.run(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--scheduler", "tcp://127.0.0.1:1",
                                  "--json"), capture_output=True, text=True, env=environment(tmp_path), timeout=120)
    assert done.returncode == 5, done.stderr
    # a refused connection is judged by the refusal itself, not waited on for the client's whole timeout
    assert "cannot connect to the Dask scheduler at tcp://127.0.0.1:1: connection refused for 2 s" in done.stderr
    data = json_only(done.stdout)
    assert (data["status"], data["exit_code"], data["error"]) == ("error", 5, "environment")
    assert not runs.exists()
    assert crash_logs(tmp_path) == []


@pytest.mark.parametrize("target, said", [
    ("garbage.json", "not a Dask scheduler file: it is not JSON"),
    ("empty.json", "not a Dask scheduler file: it is not JSON"),
    ("nameless.json", "not a Dask scheduler file: it gives no address"),
    ("tls://127.0.0.1:8786", "a tls:// scheduler needs Dask's TLS settings for the client"),
    ("inproc://x", "inproc:// names a scheduler inside one process"),
    ("tcp://127.0.0.1:99999", "port 99999 is not a port (1-65535)"),
    ("tcp://", "no HOST:PORT after tcp://"),
])
def test_a_scheduler_named_wrong_is_bad_input_and_writes_nothing(tmp_path, target, said):
    """A scheduler file that is not one, or a tls:// address without Dask's TLS settings, was an internal error
    (an AssertionError, a TypeError from inside distributed); an address no scheduler can have was exit 5."""
    (tmp_path / "garbage.json").write_text("garbage {{{")
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "nameless.json").write_text('{"type": "Scheduler", "address": 12}')
    runs = tmp_path / "runs"
    done = subprocess.run(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--scheduler", target), cwd=tmp_path,
                          capture_output=True, text=True, env=environment(tmp_path), timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"hetflow: error: --scheduler {target}: ") and said in done.stderr, done.stderr
    assert not runs.exists() and crash_logs(tmp_path) == []


class _Listener:
    """A TCP service on loopback that is not a Dask scheduler: an HTTP server (what a scheduler's dashboard port
    is) that waits for a request, or one that greets first with a banner, as SSH does."""

    def __init__(self, banner: bytes | None) -> None:
        import socket
        import threading

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.banner, self.held = banner, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.held.append(conn)
            if self.banner:
                conn.sendall(self.banner)

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.mark.parametrize("service", ["http", "banner"])
def test_a_port_that_is_not_a_schedulers_exits_5_at_once_instead_of_waiting_for_ever(tmp_path, service):
    """Dask's client waits for a scheduler's handshake without a time limit: pointed at the dashboard's port (or
    any silent service) it would hold the command for ever, and another protocol's greeting read as a frame
    length is a MemoryError of exabytes."""
    from hetflow.engine.errors import EnvironmentUnavailable
    from hetflow.engine.run.distributed import Cluster

    listener = _Listener(b"SSH-2.0-OpenSSH_9.6\r\n" if service == "banner" else None)
    try:
        address = f"tcp://127.0.0.1:{listener.port}"
        started = time.monotonic()
        with pytest.raises(EnvironmentUnavailable) as refused:
            Cluster.connect(address, timeout=1.0)
        assert time.monotonic() - started < 30
        if service == "http":
            assert str(refused.value) == (
                f"cannot connect to the Dask scheduler at {address}: it accepted the connection but sent no Dask "
                "handshake in 1 s: is that a scheduler's port, and is its process running, not stopped or hung? (a "
                "scheduler listens on 8786 unless told otherwise; 8787 serves its dashboard)")
        else:
            # the command line, whole: exit 5, the JSON result, no crash log, nothing written
            runs = tmp_path / "runs"
            done = subprocess.run(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--scheduler", address, "--json"),
                                  capture_output=True, text=True, env=environment(tmp_path), timeout=120)
            assert done.returncode == 5, done.stderr
            assert (f"cannot connect to the Dask scheduler at {address}: what listens there is not a Dask scheduler: "
                    "its first bytes are b'SSH-2.0-'") in done.stderr
            assert json_only(done.stdout)["error"] == "environment"
            assert not runs.exists() and crash_logs(tmp_path) == []
    finally:
        listener.close()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stop_signal_while_joining_a_cluster_ends_the_command_at_once(tmp_path, signum):
    """The join waits up to 10 s for the scheduler's handshake (here a port that never sends one), as it waits
    for workers: a signal there is answered at once, as a stop (128 + its number), not when the wait ends with
    exit 5, and nothing is written."""
    listener = _Listener(None)
    runs = tmp_path / "runs"
    try:
        proc = subprocess.Popen(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--scheduler",
                                        f"tcp://127.0.0.1:{listener.port}", "--json"),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=environment(tmp_path),
                                start_new_session=True)
        deadline = time.monotonic() + 60
        while not listener.held and time.monotonic() < deadline:  # the probe is waiting on its connection
            time.sleep(0.05)
        sent = time.monotonic()
        os.killpg(proc.pid, signum)
        out, err = proc.communicate(timeout=60)
        assert time.monotonic() - sent < 5, "answered when the signal came, not at the end of the 10 s wait"
    finally:
        listener.close()
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, err
    assert f"hetflow: stopped by {name} before it joined the cluster at tcp://127.0.0.1:{listener.port}: nothing ran" in err
    data = json_only(out)
    assert (data["status"], data["exit_code"], data["signal"]) == ("cancelled", 128 + signum, name)
    assert "Traceback" not in err and crash_logs(tmp_path) == []
    assert not [p for p in runs.glob("*") if not p.name.startswith(".")]


def test_a_scheduler_file_naming_a_scheduler_gone_is_refused_in_its_grace(tmp_path):
    import socket

    from hetflow.engine.errors import EnvironmentUnavailable
    from hetflow.engine.run.distributed import Cluster

    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed again: nothing listens there now
    file = tmp_path / "scheduler.json"
    file.write_text(json.dumps({"type": "Scheduler", "address": f"tcp://127.0.0.1:{port}"}))
    started = time.monotonic()
    with pytest.raises(EnvironmentUnavailable, match=rf"at tcp://127.0.0.1:{port} \(from {file}\): connection "
                                                     r"refused for 2 s; is the scheduler running\?"):
        Cluster.connect(str(file))
    assert time.monotonic() - started < 9, "judged by the refusal, not the client's 10 s"


@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_runs_directory_that_is_a_file_is_bad_input_to_every_command(tmp_path, where):
    # one rule: plan took it silently, run exited 5 as if the disk were at fault, runs exited 2, each in its words
    (tmp_path / "taken").write_text("not a folder\n")
    runs = tmp_path / "taken" if where == "a file" else tmp_path / "taken" / "runs"
    said = (f"--runs-dir {str(runs)!r} is a file, not a folder" if where == "a file" else
            f"--runs-dir {str(runs)!r} is inside a file, {tmp_path / 'taken'}, not a folder")
    for argv in (["plan", QUICKSTART], ["run", QUICKSTART, "--quiet"], ["runs"], ["runs", "show", "latest"],
                 ["verify", "latest"], ["report", "latest"]):
        code, out, err = run_cli(*argv, "--runs-dir", str(runs))
        assert (code, out, err) == (2, "", f"hetflow: error: {said}\n"), argv
    code, out, _ = run_cli("run", QUICKSTART, "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 2 and json_only(out)["error"] == "bad-input"
    import hetflow
    from hetflow.engine.errors import UsageError

    for call in (hetflow.plan, hetflow.run):
        with pytest.raises(UsageError) as e:
            call(QUICKSTART, runs_dir=runs)
        assert str(e.value) == said.replace("--runs-dir", "runs_dir=")
    assert (tmp_path / "taken").read_text() == "not a folder\n"


def test_an_internal_error_is_one_json_object_and_a_crash_log(tmp_path, monkeypatch):
    import tempfile

    from hetflow.engine.cli import catalog

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    def broken(args, out, err):
        raise RuntimeError("a bug")

    monkeypatch.setattr(catalog, "cmd_executors", broken)
    code, out, err = run_cli("executors", "--json")
    data = json_only(out)
    assert code == 3 and (data["status"], data["error"], data["message"]) == ("error", "internal", "RuntimeError: a bug")
    assert Path(data["crash_log"]).parent == tmp_path / "hetflow" and "a bug" in Path(data["crash_log"]).read_text()
    assert err.startswith("hetflow: internal error: RuntimeError: a bug (traceback in ")


class Gone(io.StringIO):
    """A stream whose reader is gone: every write fails as a closed pipe does."""

    def write(self, text):
        raise BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_the_event_sinks_fall_silent_on_a_closed_stream_and_the_stream_goes_on():
    closed = io.StringIO()
    closed.close()
    stream = EventStream([LineLog(Gone()), JsonLog(Gone()), ProgressDisplay(Gone(), force_terminal=True),
                          LineLog(closed), JsonLog(closed)])
    stream.emit(run_event("started", "r1", tasks=1, mode="threads"))
    stream.emit({"event": "finished", "kind": "partition", "id": "p0", "executor": "host", "attempt": 1,
                 "duration_s": 0.001, "status": "succeeded", "start": 0.0, "end": 0.001})
    stream.emit(run_event("finished", "r1"))
    assert [e["event"] for e in stream.events] == ["started", "finished", "finished"]


def test_a_quiet_stream_keeps_a_full_disks_error_and_still_raises_what_is_not_a_gone_reader():
    class Refusing(io.StringIO):
        def __init__(self, code):
            super().__init__()
            self.code = code

        def write(self, text):
            raise OSError(self.code, os.strerror(self.code))

    full = QuietStream(Refusing(errno.ENOSPC))
    assert full.write("x") == 1 and full.gone and full.lost.errno == errno.ENOSPC  # silent, the error kept
    with pytest.raises(OSError, match="Invalid argument"):
        QuietStream(Refusing(errno.EINVAL)).write("x")
    ascii_only = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    with pytest.raises(UnicodeEncodeError):
        QuietStream(ascii_only).write("\u00e9")
    gone = QuietStream(Gone())
    assert gone.write("lost") == 4 and gone.gone and gone.wrote and not gone.isatty()


def test_event_lines_name_their_run_and_point_when_runs_share_a_stream():
    text, js = io.StringIO(), io.StringIO()
    stream = EventStream([LineLog(text), JsonLog(js)])
    a, b = "20260301T120000Z-rf-6bbe1414-a3f0", "20260301T120000Z-rf-0c0ffee0-77b2"
    stream.emit(run_event("started", a, tasks=1, mode="threads", run=a, point="rf[features=32]"))
    stream.emit(run_event("started", b, tasks=1, mode="threads", run=b, point="rf[features=64]"))
    stream.emit({"event": "started", "kind": "partition", "id": "p0", "executor": "host", "run": b,
                 "point": "rf[features=64]"})
    stream.emit({"event": "started", "kind": "partition", "id": "p0", "executor": "host"})  # a run alone: no tag
    lines = [line.split("] ", 1)[1] for line in text.getvalue().splitlines()]
    assert lines == [f"6bbe1414-a3f0 rf[features=32]: run {a} started: 1 tasks (threads)",
                     f"0c0ffee0-77b2 rf[features=64]: run {b} started: 1 tasks (threads)",
                     "0c0ffee0-77b2 rf[features=64]: partition p0 started on host",
                     "partition p0 started on host"]
    events = [json.loads(line) for line in js.getvalue().splitlines()]
    assert [(e.get("run"), e.get("point")) for e in events] == [
        (a, "rf[features=32]"), (b, "rf[features=64]"), (b, "rf[features=64]"), (None, None)]


def test_the_progress_display_keeps_a_bar_per_run_of_a_parallel_sweep():
    screen = io.StringIO()
    display = ProgressDisplay(screen, force_terminal=True)
    for run, point in (("r-aaaaaaaa-0001", "rf[k=1]"), ("r-bbbbbbbb-0002", "rf[k=2]")):
        display(run_event("started", run, tasks=1, run=run, point=point))
    display({"event": "finished", "kind": "partition", "id": "p0", "run": "r-bbbbbbbb-0002", "point": "rf[k=2]"})
    display(run_event("finished", "r-bbbbbbbb-0002", run="r-bbbbbbbb-0002"))
    assert display._bars  # the other run still has its bar
    display(run_event("failed", "r-aaaaaaaa-0001", error="boom", run="r-aaaaaaaa-0001", point="rf[k=1]"))
    assert not display._bars
    assert "rf[k=1]" in screen.getvalue() and "boom" in screen.getvalue()


def test_the_outcomes_examples_run():
    import doctest

    from hetflow.engine.cli import outcomes

    result = doctest.testmod(outcomes, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_a_name_the_terminals_encoding_cannot_show_is_escaped_not_a_crash(tmp_path):
    folder = tmp_path / "ünï"
    folder.mkdir()
    manifest = folder / "q é.yaml"
    manifest.write_text("version: 1\nname: q\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  z: {op: full, args: {shape: [2], value: 1}}\noutputs: {z: z}\n")
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    for argv in (["validate", str(manifest)], ["run", str(manifest), "--runs-dir", str(folder / "rüns")]):
        done = subprocess.run([sys.executable, "-c", "from hetflow.engine.cli.main import entry; entry()", *argv],
                              capture_output=True, timeout=120, env=env)
        assert done.returncode == 0, done.stderr
        assert b"Traceback" not in done.stderr and b"internal error" not in done.stderr
        assert b"\\xfcn\\xef" in done.stdout  # the path, escaped


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full (every write: no space left) is Linux's")
@pytest.mark.parametrize("stream", ["stdout", "stderr"])
@pytest.mark.parametrize("sweep", [False, True])
def test_output_on_a_full_disk_is_lost_not_the_run(tmp_path, stream, sweep):
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nparams: {k: 1}\n" + ("matrix: {k: [1, 2, 3]}\n" if sweep else "")
                        + "executors: {h: {vendor: cpu}}\nstages:\n  z: {op: full, args: {shape: [2], value: \"${k}\"}}\n"
                        "outputs: {z: z}\n")
    runs = tmp_path / "runs"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", str(runs)],
                              stdout=full if stream == "stdout" else subprocess.PIPE,
                              stderr=full if stream == "stderr" else subprocess.PIPE, timeout=120)
    assert done.returncode == 5  # the environment's: the command's output is lost
    if stream == "stdout":  # what could not go to standard output is said on standard error
        assert done.stderr.decode().strip().splitlines()[-1] == \
            "hetflow: error: standard output could not be written: No space left on device"
    records = [json.loads(p.read_text()) for p in runs.glob("*/record.json")]
    assert len(records) == (3 if sweep else 1) and {r["status"] for r in records} == {"succeeded"}  # every run ran
    if sweep:
        assert json.loads(next(runs.glob("*-sweep/sweep.json")).read_text())["status"] == "succeeded"


def failing_at_2(folder: Path) -> Path:
    """A manifest whose stage ``y`` fails where its param ``k`` (default 1) is 2, with the plugin it needs."""
    manifest = folder / "m.yaml"
    manifest.write_text("version: 1\nname: m\nparams: {k: 1}\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  z: {op: full, args: {shape: [2], value: \"${k}\"}}\n  y: {op: t.boom, inputs: [z]}\n"
                        "plugins: [ops.py]\noutputs: {y: y}\n")
    (folder / "ops.py").write_text("from hetflow import op\n\n\n@op('t.boom')\ndef boom(xp, x):\n"
                                   "    if float(x[0]) == 2.0:\n        raise ValueError('no')\n    return x\n")
    return manifest


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="/dev/full (every write: no space left) is Linux's")
def test_a_failed_command_whose_output_is_lost_keeps_its_code_and_says_its_output_was_lost(tmp_path):
    """A failing run's stdout on a full disk exited 1 and said nothing at all: what it printed of why was lost."""
    manifest = failing_at_2(tmp_path)
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir",
                               str(tmp_path / "runs"), "-p", "k=2"], stdout=full, stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 1, done.stderr
    assert done.stderr.decode().strip().splitlines()[-1] == \
        "hetflow: error: standard output could not be written: No space left on device"


def test_every_errors_exit_code_is_the_one_the_command_line_exits_with():
    from hetflow.engine.cli.outcomes import outcome
    from hetflow.engine.errors import (EnvironmentUnavailable, HetflowError, LockHeld, ManifestError, OutputDamaged,
                                       RunCancelled, RunFailed, StillRunning, StorageUnavailable, UsageError)
    # every module that defines one is imported here: the check must not depend on what other tests loaded
    from hetflow.engine.batch.sweeps import SummaryUnwritten
    from hetflow.engine.importers.onnximport import OnnxImportError
    from hetflow.engine.store.runs import NoSuchRun
    from hetflow.executors.userops import PluginError

    made = [HetflowError("x"), ManifestError([]), UsageError("x"), NoSuchRun("x"), OnnxImportError("x"),
            EnvironmentUnavailable("x"), StorageUnavailable("x"), LockHeld("p", {}), RunFailed("x"),
            RunCancelled("x", None, "SIGTERM"), RunCancelled("x", None, "SIGHUP"), RunCancelled("x", None, None),
            OutputDamaged("y", "gone"), PluginError("x"), StillRunning("x", {}), SummaryUnwritten("x", "s", None, [])]

    def kinds(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from kinds(sub)

    assert {type(e) for e in made} >= {k for k in kinds(HetflowError) if k.__module__.startswith("hetflow")}
    assert [e.exit_code for e in made] == [outcome(e).code for e in made] == [1, 2, 2, 2, 2, 5, 5, 4, 1, 143, 129, 130, 1, 2, 4, 5]


def test_a_stray_sys_exit_with_a_message_is_an_internal_error_not_a_traceback(monkeypatch):
    import importlib

    cli_main = importlib.import_module("hetflow.engine.cli.main")

    def leaves(args, out, err):
        raise SystemExit("a library gave up")  # what sys.exit("...") deep in some library raises

    monkeypatch.setattr(cli_main, "_command", lambda name: leaves)
    out, err = io.StringIO(), io.StringIO()
    assert cli_main.main(["examples", "list"], out=out, err=err) == 3
    assert err.getvalue().startswith("hetflow: internal error: SystemExit: a library gave up (traceback in ")


@pytest.mark.parametrize("refusal", [errno.ENOLCK, errno.EOPNOTSUPP])
def test_a_runs_directory_whose_file_system_keeps_no_locks_exits_5(tmp_path, monkeypatch, refusal):
    """NFS without its lock service answers flock with ENOLCK: the environment's refusal (exit 5, said plainly),
    not an internal error, and no run without the lock that keeps two runs of a manifest apart."""
    from hetflow.engine.store import locks

    def refuse(fd, op):
        raise OSError(refusal, os.strerror(refusal))

    monkeypatch.setattr(locks.fcntl, "flock", refuse)
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", str(QUICKSTART), "--runs-dir", str(runs), "--json"], out=out, err=err)
    assert code == 5, err.getvalue()
    assert f"refused a lock on quickstart-" in err.getvalue() and os.strerror(refusal) in err.getvalue()
    assert "hetflow needs a runs directory that keeps flock locks" in err.getvalue()
    assert json.loads(out.getvalue())["error"] == "environment"  # not "internal" (exit 3, a crash log)
    assert not [p for p in runs.glob("*") if not p.name.startswith(".")]


def test_a_sealed_stream_takes_no_other_threads_lines_so_a_forced_exits_id_stays_last():
    """A parallel sweep's point printed its row after a second Ctrl-C's report had printed the sweep's id:
    ``...-swept-sweepcancelled swept[scale=2.5] ...`` on the last line, where the id alone belongs."""
    import threading

    from hetflow.engine.run.events import QuietStream

    out = QuietStream(io.StringIO())
    out.write("succeeded m[k=1]  r1\n")
    out.seal()
    late = threading.Thread(target=lambda: out.write("cancelled m[k=2]  r2\n"))
    late.start()
    late.join()
    print("m-sweep", file=out)
    assert out._stream.getvalue() == "succeeded m[k=1]  r1\nm-sweep\n"
    # a write under way when the seal comes ends whole first
    other = QuietStream(io.StringIO())
    entered, go = threading.Event(), threading.Event()

    class Slow(io.StringIO):
        def write(self, text):
            entered.set()
            go.wait(5)
            return super().write(text)

    other._stream = Slow()
    writer = threading.Thread(target=lambda: other.write("cancelled m[k=2]  r2\n"))
    writer.start()
    entered.wait(5)
    sealer = threading.Thread(target=other.seal)
    sealer.start()
    go.set()
    writer.join()
    sealer.join()
    assert other._stream.getvalue() == "cancelled m[k=2]  r2\n"


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_stop_signal_after_the_run_has_ended_does_not_call_it_cancelled(tmp_path, signum):
    """A SIGINT that came once the run's record was final (its id printed), while the process ended, exited 130
    or killed it (-2), where exit 130 means "the record says cancelled" and the record said succeeded; a SIGTERM or
    SIGHUP in the interpreter's teardown, where Python puts back the default actions, killed it (-15, -1)."""
    runs = tmp_path / "runs"
    codes = []
    for delay in (0.0, 0.002, 0.005, 0.01, 0.02, 0.04):
        proc = subprocess.Popen(hetflow("run", QUICKSTART, "--runs-dir", str(runs), "--no-cache"), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environment(tmp_path))
        for line in proc.stdout:
            if line.startswith("record:"):  # the record is final: only the id's line is left to print
                time.sleep(delay)
                proc.send_signal(signum)
                break
        rest = proc.stdout.read()
        proc.wait(60)
        codes.append(proc.returncode)
        assert rest.strip() == "" or rest.strip().startswith("20"), rest
    assert codes == [0] * len(codes), codes
    assert {json.loads(p.read_text())["status"] for p in runs.glob("*/record.json")} == {"succeeded"}


def test_the_stop_signals_are_ignored_once_the_command_line_has_done_its_work(tmp_path):
    """What the process's teardown meets: the default action of SIGTERM and SIGHUP ended it with the signal."""
    probe = ("import importlib, signal, sys\nmain = importlib.import_module('hetflow.engine.cli.main')\nsys.argv = ['hetflow', 'validate', sys.argv[1]]\n"
             "try:\n    main.entry()\nexcept SystemExit as e:\n"
             "    print(e.code, [signal.getsignal(s) is signal.SIG_IGN for s in main._stop_signals()])\n")
    done = subprocess.run([sys.executable, "-c", probe, QUICKSTART], capture_output=True, text=True, timeout=120,
                          env=environment(tmp_path))
    assert done.stdout.splitlines()[-1] == "0 [True, True, True]", (done.stdout, done.stderr)


def test_a_failed_run_a_sweep_and_a_verify_mismatch_carry_exit_code_and_message_in_their_json(tmp_path):
    """The --json contract's "every object": these printed their own result without the process's exit code."""
    manifest = failing_at_2(tmp_path)
    runs = str(tmp_path / "runs")
    code, out, err = run_cli("run", str(manifest), "--runs-dir", runs, "--json", "-p", "k=2")
    data = json_only(out)
    assert (code, data["status"], data["exit_code"]) == (1, "failed", 1)
    assert data["message"] in err.splitlines() and data["message"].startswith("hetflow: run failed: ")
    code, out, _ = run_cli("run", str(manifest), "--runs-dir", runs, "--json")
    data = json_only(out)
    assert (code, data["status"], data["exit_code"], "message" in data) == (0, "succeeded", 0, False)
    (tmp_path / "m.yaml").write_text(manifest.read_text().replace("params: {k: 1}", "params: {k: 1}\nmatrix: {k: [1, 2]}"))
    code, out, _ = run_cli("run", str(manifest), "--runs-dir", runs, "--json")
    data = json_only(out)
    assert (code, data["status"], data["exit_code"]) == (1, "failed", 1)
    assert data["message"] == data["error"] and data["message"].startswith("1 of 2 points did not succeed: m[k=2] ")
    ok_run = next(p["run_id"] for p in data["points"] if p["status"] == "succeeded")
    (tmp_path / "ops.py").write_text((tmp_path / "ops.py").read_text().replace("return x", "return x + 1"))
    code, out, _ = run_cli("verify", ok_run, "--runs-dir", runs, "--json")
    data = json_only(out)
    assert (code, data["status"], data["exit_code"], data["match"]) == (1, "failed", 1, False)
    assert data["message"] == f"verify {ok_run}: MISMATCH in y"


def test_sigterm_to_a_json_command_that_is_no_run_prints_its_one_object(tmp_path):
    """emulate --json, runs gc --json ...: SIGTERM killed them with nothing on standard output."""
    import signal

    guest = Path(__file__).resolve().parent.parent / "examples" / "guests" / "spin.elf"
    child = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "emulate", str(guest), "--backend",
                              "reference", "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(3.0)  # the interpreter loaded and the guest spinning
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    finally:
        child.kill()
    data = json.loads(out)
    assert (child.returncode, data["status"], data["exit_code"], data["signal"]) == (143, "cancelled", 143, "SIGTERM")
    assert "interrupted by SIGTERM" in err


#: an op that writes to standard output past Python's sys.stdout: to the descriptor itself, and from a subprocess
LOUD_OPS = """\
import os
import subprocess
import sys

from hetflow import op


@op('t.loud')
def loud(xp, x):
    os.write(1, b"from the descriptor\\n")
    subprocess.run([sys.executable, "-c", "print('from a subprocess')"], check=True)
    sys.__stdout__.write("from sys.__stdout__\\n")
    return x
"""


@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
@pytest.mark.parametrize("command", ["run", "verify"])
def test_what_an_op_writes_to_file_descriptor_1_goes_to_stderr_not_into_the_result(tmp_path, as_json, command):
    """`hetflow run --json | jq` broke on an op whose subprocess printed: only Python's print went to stderr."""
    (tmp_path / "ops.py").write_text(LOUD_OPS)
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nexecutors: {h: {vendor: cpu}}\nplugins: [ops.py]\nstages:\n"
                        "  z: {op: full, args: {shape: [2], value: 1}}\n  y: {op: t.loud, inputs: [z]}\n"
                        "outputs: {y: y}\n")
    runs = str(tmp_path / "runs")
    first = subprocess.run(hetflow("run", str(manifest), "--runs-dir", runs, "--json", "--quiet"),
                           capture_output=True, text=True, timeout=120, env=environment(tmp_path, buffered=True))
    argv = ["run", str(manifest), "--no-cache", "--quiet"] if command == "run" else \
        ["verify", json_only(first.stdout)["run_id"]]
    done = subprocess.run(hetflow(*argv, "--runs-dir", runs, *(["--json"] if as_json else [])),
                          capture_output=True, text=True, timeout=120, env=environment(tmp_path, buffered=True))
    assert done.returncode == 0, done.stderr
    for said in ("from the descriptor", "from a subprocess", "from sys.__stdout__"):
        assert said not in done.stdout and said in done.stderr, (said, done.stdout, done.stderr)
    if as_json:
        assert json_only(done.stdout)["status"] == "succeeded"
    else:
        assert done.stdout.strip()
    assert not crash_logs(tmp_path)


#: its op sleeps only where the environment asks: the run is quick, verify's rerun of it slow
SLEEPS_WHEN_ASKED = '''\
import os
import time
from hetflow import op


@op("t.sleep_if_asked")
def sleep_if_asked(xp, x):
    if os.environ.get("SLEEP_IF_ASKED"):
        open(os.environ["SLEEP_IF_ASKED_MARK"], "w").close()
        time.sleep(float(os.environ["SLEEP_IF_ASKED"]))
    return x
'''


def test_a_cancelled_verify_names_the_run_it_verifies_and_its_rerun(tmp_path):
    """Cancelled, verify's object named the stopped rerun as run_id; finished, the run verified: one key, two
    meanings. Both now say run_id for the run verified and rerun_id for the rerun."""
    (tmp_path / "sleepy.py").write_text(SLEEPS_WHEN_ASKED)
    path = tmp_path / "v.yaml"
    path.write_text("version: 1\nname: v\nplugins: [sleepy.py]\nexecutors: {host: {vendor: cpu}}\n"
                    "stages:\n  x: {op: ones, args: {shape: [4]}}\n  y: {op: t.sleep_if_asked, inputs: [x]}\n"
                    "outputs: {y: y}\n")
    runs = tmp_path / "runs"
    code, out, err = run_cli("run", str(path), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    run_id = out.strip().splitlines()[-1]
    entered = tmp_path / "entered"
    env = dict(environment(tmp_path), SLEEP_IF_ASKED="30", SLEEP_IF_ASKED_MARK=str(entered))
    proc = subprocess.Popen(hetflow("verify", run_id, "--runs-dir", str(runs), "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        # stopped inside the rerun's stage, not at a moment a loaded machine makes random
        while time.monotonic() < deadline and not entered.exists():
            time.sleep(0.05)
        assert entered.exists(), "verify's rerun never reached its stage"
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130
    data = json_only(out)
    (rerun,) = [p.parent.name for p in runs.glob("*/record.json") if p.parent.name != run_id]
    assert (data["status"], data["run_id"], data["rerun_id"]) == ("cancelled", run_id, rerun)
    assert data["record"] == str(runs / rerun / "record.json")
    assert json.loads((runs / rerun / "record.json").read_text())["status"] == "cancelled"
