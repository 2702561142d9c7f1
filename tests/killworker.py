"""A Dask cluster started as an operator starts one, and a hetflow run whose executor's worker is SIGKILLed.

Shared by ``tests/test_distributed_kill.py`` and ``bench/recovery.py``.
The scheduler and the workers are the ``dask`` command line of the
installed ``distributed`` (``python -m distributed.cli.dask_*`` where
there is no ``dask`` script), on loopback, each worker under a nanny that
restarts it under the same name after the kill. The run is the ``hetflow``
command line with ``--log-format json``: the kill is sent when the Nth
event of a kind appears on its stderr, so a moment is named by an event,
not by a clock.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

START_TIMEOUT_S = 60
STEPS = 8  # partitions, alternating host, accel, host...: the last is accel's
STEP_S = 0.3

WAIT_OP = """\
import time

from hetflow import op


@op("k.wait")
def wait(xp, x, *, seconds: float):
    time.sleep(seconds)
    return x
"""

#: Replica reduction as Dask ships it, and as hard as it goes: ReduceReplicas every 50 ms.
CONFIGS = {
    "default": {},
    "reduce-replicas": {"DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__START": "true",
                        "DASK_DISTRIBUTED__SCHEDULER__ACTIVE_MEMORY_MANAGER__INTERVAL": "50ms"},
}

#: (event, kind, executor, n): kill when the n-th such event appears
MOMENTS = {
    "accel's first partition starts": ("started", "partition", "accel", 1),
    "accel's first partition finished": ("finished", "partition", "accel", 1),
    "mid-bridge out of accel (exported, not imported)": ("finished", "export", "accel", 1),
    "mid-bridge into accel (exported, not imported)": ("finished", "export", "host", 2),
    "bridge into accel imported": ("finished", "import", "accel", 2),
    "host's import of accel's tensor done": ("finished", "import", "host", 2),
    "accel's third partition starts": ("started", "partition", "accel", 3),
    "accel's third partition finished": ("finished", "partition", "accel", 3),
    "accel's last partition starts": ("started", "partition", "accel", STEPS // 2),
    "after the last partition": ("finished", "partition", "accel", STEPS // 2),
    "after the outputs": ("finished", "output", "accel", 2),
}


def manifest(folder: Path) -> Path:
    """A chain of STEPS sleeping partitions alternating between ``host`` and ``accel``, bridged at every step."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wait_ops.py").write_text(WAIT_OP)
    stages = ["  x: {op: random.normal, args: {shape: [64, 64], seed: 5}, executor: host}"]
    previous = "x"
    for i in range(STEPS):
        on = "accel" if i % 2 else "host"
        first = f"w{i}" if i else "x"
        if i:
            stages.append(f"  w{i}: {{op: k.wait, inputs: [{previous}], args: {{seconds: {STEP_S}}}, executor: {on}}}")
        stages.append(f"  s{i}: {{op: softmax, inputs: [{first}], executor: {on}}}")
        previous = f"s{i}"
    path = folder / "alternating.yaml"
    path.write_text("version: 1\nname: alternating\nplugins: [wait_ops.py]\n"
                    "executors: {host: {vendor: cpu}, accel: {vendor: cpu}}\nstages:\n" + "\n".join(stages)
                    + f"\noutputs: {{y: {previous}, mid: s3}}\n")
    return path


def _dask(*argv: str) -> list[str]:
    if shutil.which("dask"):
        return ["dask", *argv]
    module = {"scheduler": "distributed.cli.dask_scheduler", "worker": "distributed.cli.dask_worker"}[argv[0]]
    return [sys.executable, "-m", module, *argv[1:]]


@dataclass
class RealCluster:
    folder: Path
    file: Path
    procs: list
    log: object

    def client(self):
        from distributed import Client

        return Client(scheduler_file=str(self.file), timeout=START_TIMEOUT_S, set_as_default=False)

    def wait_for(self, names: tuple[str, ...]) -> dict[str, str]:
        """Wait until a worker of each name is up (a nanny restart takes seconds): {name: address}."""
        with self.client() as client:
            deadline = time.time() + START_TIMEOUT_S
            while time.time() < deadline:
                info = client.scheduler_info(n_workers=-1)["workers"]
                by_name = {str(w["name"]): a for a, w in info.items()}
                if all(n in by_name for n in names) and len(info) == len(names):
                    return by_name
                time.sleep(0.2)
        raise TimeoutError(f"workers {names} did not all join: {(self.folder / 'cluster.log').read_text()[-3000:]}")

    def pid(self, address: str) -> int:
        with self.client() as client:
            return client.run(os.getpid, workers=[address])[address]

    def stop(self) -> None:
        # killed, not asked to close: a nanny asked to close waits 8 s on its worker, which leaves with its nanny
        # anyway (Dask's worker process exits when its parent's pipe closes)
        for p in reversed(self.procs):
            if p.poll() is None:
                p.kill()
        for p in self.procs:
            p.wait(30)
        self.log.close()


WORKERS = ("w-host", "w-accel")


def start(folder: Path, config: str = "default") -> RealCluster:
    """``dask scheduler --host 127.0.0.1 --port 0`` and two ``dask worker``s under nannies, one thread each."""
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / "scheduler.json"
    env = {**os.environ, **CONFIGS[config]}
    log = open(folder / "cluster.log", "w")
    procs = [subprocess.Popen(_dask("scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                                    "--scheduler-file", str(file)), env=env, stdout=log, stderr=subprocess.STDOUT)]
    cluster = RealCluster(folder, file, procs, log)
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            if procs[0].poll() is not None:
                raise RuntimeError((folder / "cluster.log").read_text())
            time.sleep(0.1)
        for name in WORKERS:
            procs.append(subprocess.Popen(
                _dask("worker", "--scheduler-file", str(file), "--name", name, "--nthreads", "1", "--host", "127.0.0.1",
                      "--no-dashboard"), env=env, stdout=log, stderr=subprocess.STDOUT))
        cluster.wait_for(WORKERS)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def _kill(pid: int, fired: list[float]) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        fired.append(time.time())
    except ProcessLookupError:
        pass


def _ended_at(lines: list[str]) -> float | None:
    """When the run's own closing event says its work ended (epoch seconds), from its JSON log."""
    for line in reversed(lines):
        if line.startswith("{"):
            event = json.loads(line)
            if event.get("kind") == "run" and event.get("event") in ("finished", "failed", "cancelled"):
                return event.get("time")
    return None


@dataclass
class Outcome:
    exit_code: int
    record: dict
    killed: str | None
    stderr: list[str]

    @property
    def digests(self) -> dict:
        return {k: v["digest"] for k, v in (self.record.get("outputs") or {}).items()}


def run(cluster: RealCluster, path: Path, runs: Path, moment: tuple | None = None, timeout: float = 120,
        delay: float = 0.0) -> Outcome:
    """``hetflow run PATH --scheduler FILE --place accel=w-accel``; SIGKILL accel's worker ``delay`` s after ``moment``."""
    addresses = cluster.wait_for(WORKERS)
    victim = addresses["w-accel"]
    pid = cluster.pid(victim) if moment else None
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--scheduler", str(cluster.file),
                             "--place", "host=w-host", "--place", "accel=w-accel", "--runs-dir", str(runs),
                             "--log-format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env=env)
    seen = 0
    killed = None
    timer: threading.Timer | None = None
    fired: list[float] = []
    lines = []
    deadline = time.time() + timeout
    # a run that hangs writes nothing more: reading its stderr would wait for ever without this
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    for line in proc.stderr:
        lines.append(line.rstrip("\n"))
        if moment is None or killed or not line.startswith("{"):
            continue
        event = json.loads(line)
        what, kind, executor, n = moment
        if event.get("event") == what and event.get("kind") == kind and event.get("executor") == executor:
            seen += 1
            if seen == n:
                if delay:
                    timer = threading.Timer(delay, _kill, (pid, fired))
                    timer.start()
                else:
                    _kill(pid, fired)
                killed = victim
        if time.time() > deadline:
            break
    try:
        code = proc.wait(max(1.0, deadline - time.time()))
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    finally:
        watchdog.cancel()
    if timer is not None:
        # a delayed kill that had not come when the run ended never comes: the next run must find the worker
        timer.cancel()
        timer.join()
    ended = _ended_at(lines)
    if not fired or (ended is not None and fired[0] > ended):
        killed = None  # no kill, or one after the run's work was done: nothing was there to lose
    records = sorted(runs.glob("**/record.json"), key=lambda p: p.stat().st_mtime)
    record = json.loads(records[-1].read_text()) if records else {}
    return Outcome(code, record, killed, lines)
