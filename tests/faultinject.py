"""Faults injected into real ``hetflow run`` processes, and the checks that the state on disk stayed true.

A *trial* starts the CLI on a workload (one run, a sweep, a sweep with
``--parallel 2``, a run on a local Dask cluster), waits a seeded random
time and then does one of :data:`FAULTS` to it: a signal (SIGINT, two
SIGINTs 10 ms apart, SIGTERM, SIGHUP, SIGKILL) or closing the reading end
of its stdout or stderr pipe. When the process has ended, :func:`judge`
reads what it left:

- a record *lies* when ``hetflow runs --json`` still shows it ``running``
  (or a sweep's point ``running`` or ``pending`` in a sweep that says it
  succeeded), when a ``succeeded`` record's outputs are missing, or when a
  sweep's row disagrees with its run's record;
- a crash log under the process's ``TMPDIR`` is an internal error;
- whatever did not succeed is resumed (``--resume``): the resumed outputs
  must equal a clean run's, and every partition whose cache entry existed
  before the resume must be a cache hit of it (no finished partition runs
  twice).

``tests/test_faults.py`` runs a few dozen trials; ``bench/faults.py`` runs
hundreds and prints the counts.
"""

from __future__ import annotations

import json
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from hetflow.engine.store.cache import Cache

FAULTS = ("SIGINT", "SIGINT*2", "SIGTERM", "SIGHUP", "SIGKILL", "close-stdout", "close-stderr")
WORKLOADS = ("run", "sweep", "sweep-parallel", "cluster")
TERMINAL = frozenset({"succeeded", "failed", "cancelled", "died"})
EXPECTED_EXIT = {"SIGINT": 130, "SIGINT*2": 130, "SIGTERM": 143, "SIGHUP": 129, "SIGKILL": -9,
                 "close-stdout": 0, "close-stderr": 0}

SLEEP_OP = """\
import time

from hetflow import op


@op("f.wait")
def wait(xp, x, *, seconds: float):
    time.sleep(seconds)
    return x
"""

STEPS = 6  # partitions of the chain, alternating between two executors
STEP_S = 0.25


def manifest_text(matrix: bool) -> str:
    """A chain of sleeping steps on two executors (so every step is a partition of its own, cached)."""
    stages = ['  x: {op: random.normal, args: {shape: [32, 32], seed: 3}, executor: a}']
    previous = "x"
    for i in range(STEPS):
        on = "b" if i % 2 == 0 else "a"
        stages.append(f"  w{i}: {{op: f.wait, inputs: [{previous}], args: {{seconds: {STEP_S}}}, executor: {on}}}")
        stages.append(f'  s{i}: {{op: mul, inputs: [w{i}], args: {{value: "${{scale}}"}}, executor: {on}}}')
        previous = f"s{i}"
    head = "matrix: {scale: [0.5, 1.5, 2.5]}\n" if matrix else ""
    return (f"version: 1\nname: {'swept' if matrix else 'chain'}\nplugins: [fault_ops.py]\nparams: {{scale: 1.5}}\n"
            f"{head}executors: {{a: {{vendor: cpu}}, b: {{vendor: cpu}}}}\nstages:\n" + "\n".join(stages)
            + f"\noutputs: {{y: {previous}}}\n")


def write_workloads(folder: Path) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "fault_ops.py").write_text(SLEEP_OP)
    (folder / "chain.yaml").write_text(manifest_text(False))
    (folder / "swept.yaml").write_text(manifest_text(True))
    return {"run": folder / "chain.yaml", "sweep": folder / "swept.yaml"}


def hetflow(*argv: str) -> list[str]:
    return [sys.executable, "-m", "hetflow.engine.cli", *argv]


def workload_argv(workload: str, manifests: dict[str, Path], runs: Path) -> list[str]:
    if workload == "run":
        return ["run", str(manifests["run"]), "--runs-dir", str(runs)]
    if workload == "cluster":
        return ["run", str(manifests["run"]), "--runs-dir", str(runs), "--workers", "2"]
    extra = ["--parallel", "2"] if workload == "sweep-parallel" else []
    return ["run", str(manifests["sweep"]), "--runs-dir", str(runs), *extra]


def clean_outputs(manifests: dict[str, Path], folder: Path) -> dict[str, dict]:
    """Each manifest's outputs from a run no fault touched: {"run": {output: digest}, "sweep": {point: {...}}}."""
    out = {}
    for kind, path in manifests.items():
        done = subprocess.run(hetflow("run", str(path), "--runs-dir", str(folder / f"clean-{kind}"), "--quiet",
                                      "--json", "--no-cache"), capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout.strip().splitlines()[-1])
        out[kind] = result["outputs"] if kind == "run" else {p["name"]: p["outputs"] for p in result["points"]}
    return out


@dataclass
class Trial:
    index: int
    workload: str
    fault: str
    delay_s: float


@dataclass
class Verdict:
    trial: Trial
    exit_code: int | None = None
    lies: list[str] = field(default_factory=list)
    crash_logs: list[str] = field(default_factory=list)
    resumed: bool = False
    resume_differed: list[str] = field(default_factory=list)
    reran: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    stdout_tail: str = ""
    top_id: str | None = None

    @property
    def ok(self) -> bool:
        return not (self.lies or self.crash_logs or self.resume_differed or self.reran)


# how long after its start a workload is still running on a quiet machine: a fault comes in that window
SPAN_S = {"run": 2.6, "sweep": 5.0, "sweep-parallel": 3.5, "cluster": 9.0}


def plan_trials(n: int, seed: int, workloads: tuple[str, ...] = WORKLOADS,
                faults: tuple[str, ...] = FAULTS) -> list[Trial]:
    """``n`` trials cycling through every (workload, fault) pair in a seeded order, each at a seeded moment.

    >>> [(t.workload, t.fault) for t in plan_trials(3, 1, ("run",), ("SIGTERM",))]
    [('run', 'SIGTERM'), ('run', 'SIGTERM'), ('run', 'SIGTERM')]
    """
    rng = random.Random(seed)
    pairs = [(w, f) for w in workloads for f in faults]
    rng.shuffle(pairs)
    trials = []
    for i in range(n):
        workload, fault = pairs[i % len(pairs)]
        trials.append(Trial(i, workload, fault, round(rng.uniform(0.05, SPAN_S[workload]), 3)))
    return trials


def inject(trial: Trial, manifests: dict[str, Path], folder: Path, timeout_s: float = 120) -> tuple[int | None, str]:
    """Run the trial's process and do its fault at its moment; returns (exit code, stdout text)."""
    runs, tmp = folder / "runs", folder / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(hetflow(*workload_argv(trial.workload, manifests, runs)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    selector = selectors.DefaultSelector()
    streams = {"stdout": proc.stdout, "stderr": proc.stderr}
    for name, stream in streams.items():
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ, name)
    chunks: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    started, done_fault = time.monotonic(), False
    try:
        while True:
            now = time.monotonic() - started
            if not done_fault and now >= trial.delay_s:
                done_fault = True
                _fault(proc, trial.fault, selector, streams)
            if now > timeout_s:
                raise TimeoutError(f"trial {trial.index} ({trial.workload}, {trial.fault}) did not end in {timeout_s} s")
            events = selector.select(timeout=0.01) if selector.get_map() else []
            for key, _ in events:
                data = key.fileobj.read1(65536) if hasattr(key.fileobj, "read1") else key.fileobj.read(65536)
                if data:
                    chunks[key.data].append(data)
                else:
                    selector.unregister(key.fileobj)
            if not selector.get_map() and proc.poll() is not None:
                break
            if not selector.get_map():
                time.sleep(0.01)
        return proc.wait(), b"".join(chunks["stdout"]).decode(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        _kill_group(proc.pid)
        selector.close()
        for stream in streams.values():
            if not stream.closed:
                stream.close()


def _fault(proc: subprocess.Popen, fault: str, selector, streams) -> None:
    if fault.startswith("close-"):
        stream = streams[fault[len("close-"):]]
        if stream in (key.fileobj for key in selector.get_map().values()):
            selector.unregister(stream)
        stream.close()
        return
    if proc.poll() is not None:
        return
    name, _, times = fault.partition("*")
    for i in range(int(times or 1)):
        if i:
            time.sleep(0.01)
        try:
            os.kill(proc.pid, getattr(signal, name))
        except ProcessLookupError:
            return


def _kill_group(pid: int) -> None:
    # a killed command's Dask workers (its process group) go too; a waiting reader must not be left behind
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def cli_json(*argv: str, timeout_s: float = 300) -> tuple[int, object]:
    done = subprocess.run(hetflow(*argv), capture_output=True, text=True, timeout=timeout_s)
    text = done.stdout.strip()
    try:
        return done.returncode, json.loads(text.splitlines()[-1] if "\n" in text and text.lstrip()[0] != "[" else text)
    except (ValueError, IndexError):
        return done.returncode, {"stdout": done.stdout, "stderr": done.stderr}


def _records(runs: Path) -> dict[str, dict]:
    out = {}
    for path in runs.glob("*/record.json"):
        try:
            out[path.parent.name] = json.loads(path.read_text())
        except ValueError:
            out[path.parent.name] = {"status": "unreadable"}
    return out


def judge(verdict: Verdict, manifests: dict[str, Path], folder: Path, clean: dict[str, dict]) -> Verdict:
    """Check what the trial's process left in ``folder/runs``, then resume it; fills ``verdict``."""
    trial, runs = verdict.trial, folder / "runs"
    crash = folder / "tmp" / "hetflow"
    verdict.crash_logs = sorted(p.name for p in crash.glob("crash-*.log")) if crash.is_dir() else []
    code, rows = cli_json("runs", "--json", "--runs-dir", str(runs))
    if code != 0 or not isinstance(rows, list):
        verdict.lies.append(f"hetflow runs --json failed: {rows}")
        return verdict
    verdict.statuses = sorted(f"{r['kind']}:{r['status']}" for r in rows)
    records = _records(runs)
    for r in rows:
        if r["status"] not in TERMINAL:
            verdict.lies.append(f"{r['kind']} {r['id']} says {r['status']} after its process ended")
    for run_id, record in records.items():
        if record.get("status") == "succeeded":
            for name, o in (record.get("outputs") or {}).items():
                if "file" in o and not (runs / run_id / o["file"]).is_file():
                    verdict.lies.append(f"run {run_id} succeeded without its output {name}")
    sweeps = [r for r in rows if r["kind"] == "sweep"]
    for s in sweeps:
        summary = json.loads((runs / s["id"] / "sweep.json").read_text())
        for p in summary["points"]:
            record = records.get(p.get("run_id") or "")
            if s["status"] == "succeeded" and p["status"] != "succeeded":
                verdict.lies.append(f"sweep {s['id']} succeeded with point {p['name']} {p['status']}")
            if p["status"] == "succeeded" and (record is None or record.get("status") != "succeeded"):
                verdict.lies.append(f"sweep {s['id']} point {p['name']} succeeded but its run says "
                                    f"{None if record is None else record.get('status')}")
            if p["status"] in ("running", "pending") and s["status"] in ("succeeded", "failed"):
                verdict.lies.append(f"sweep {s['id']} ended {s['status']} with point {p['name']} {p['status']}")
    if verdict.lies:
        return verdict
    sweep_kind = trial.workload.startswith("sweep")
    tops = sweeps if sweep_kind else [r for r in rows if r["kind"] == "run"]
    if not tops:
        return verdict  # stopped before its record existed: nothing to resume, nothing to lie about
    top = tops[0]
    verdict.top_id = top["id"]
    manifest = manifests["sweep" if sweep_kind else "run"]
    if top["status"] != "succeeded":
        cached_before = set(Cache(str(runs / ".cache")).keys())
        code, result = cli_json("run", str(manifest), "--runs-dir", str(runs), "--resume", top["id"], "--quiet", "--json")
        verdict.resumed = True
        if code != 0 or not isinstance(result, dict):
            verdict.resume_differed.append(f"resume of {top['id']} exited {code}: {result}")
            return verdict
        for record in _records(runs).values():
            if not record.get("resumed") or record.get("status") != "succeeded":
                continue
            hits = set((record.get("cache") or {}).get("hits") or [])
            keys = (record.get("cache") or {}).get("keys") or {}
            for pid, entry in keys.items():
                key = entry.get("key") if isinstance(entry, dict) else None
                if key in cached_before and pid not in hits:
                    verdict.reran.append(f"{record['run_id']} ran {pid} again although its cache entry existed")
    got = _outputs(runs, top["id"], sweep_kind)
    want = clean["sweep" if sweep_kind else "run"]
    if got != want:
        verdict.resume_differed.append(f"{top['id']}: outputs {got} differ from a clean run's {want}")
    return verdict


def _outputs(runs: Path, entry_id: str, sweep_kind: bool) -> dict:
    if sweep_kind:
        summary = json.loads((runs / entry_id / "sweep.json").read_text())
        return {p["name"]: p["outputs"] for p in summary["points"]}
    record = json.loads((runs / entry_id / "record.json").read_text())
    return {k: v["digest"] for k, v in record["outputs"].items()}


def run_trial(trial: Trial, manifests: dict[str, Path], root: Path, clean: dict[str, dict]) -> Verdict:
    folder = root / f"trial-{trial.index:04d}"
    code, stdout = inject(trial, manifests, folder)
    verdict = Verdict(trial, exit_code=code, stdout_tail=stdout[-300:])
    return judge(verdict, manifests, folder, clean)
