"""Faults at random moments against ``hetflow schedule serve``, and whether the schedule's history stayed true.

One campaign is one runs directory and one manifest that fires every 2
seconds (``catchup: true``, a ``max_active`` policy, hooks that append
the slot and its status to a file, runs that wait 0.3-2.5 s and, in half
the campaigns, fail a third of the time). Each round starts ``serve``,
lets it work for a seeded random while, then stops it one way: SIGTERM,
SIGINT, SIGHUP, SIGKILL, SIGKILL of it and every run it started (a
reboot), SIGTERM and then SIGKILL of its runs, or its log pipe closed
before a SIGTERM; then a random downtime, during which slots come due
unseen. At the end one more ``serve`` for 20 s, stopped with SIGTERM, the
runs it left waited for, and a ``run-due``. What must hold then:

* every claimed slot is concluded (succeeded, failed, skipped or died),
  and no slot is left given back and not taken again;
* no fire time from the first slot to the last is missing (catch-up);
* no slot has two records; a claim's state agrees with its record's
  status as readers show it (``died`` for a killed run);
* every concluded run's hook ran, with the claim's status, and a skipped
  slot's did not (a hook runs twice only when SIGKILL cut its scheduler
  short while it ran; those are counted, not failed);
* under ``queue`` no slot is skipped.

``--matrix`` gives the manifest a matrix of two points: each slot's run is
a sweep, whose summary (as readers show it) must agree with its slot.

``--driver run-due`` keeps the schedule from cron instead: a ``run-due``
started every 0.3-2 s for ``--seconds`` (they overlap), each live one
SIGKILLed (alone or with its process group), SIGTERMed or SIGINTed with
a seeded chance at each start; then the same end and the same checks.

    python bench/schedule_faults.py --seeds 1-4 --rounds 10
    python bench/schedule_faults.py --seeds 1-4 --driver run-due --seconds 60

One JSON line per campaign, then the totals.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

CLI = [sys.executable, "-m", "hetflow.engine.cli"]
FAULTS = ("SIGTERM", "SIGINT", "SIGHUP", "SIGKILL", "SIGKILL+runs", "SIGTERM+runs-killed")

OPS = """\
import time

from hetflow import op


@op("sf.wait")
def wait(xp, x, *, seconds: float, fail: bool = False):
    time.sleep(seconds)
    if fail and int(time.time() * 10) % 3 == 0:
        raise RuntimeError("flaky")
    return x
"""

HOOK = "'sleep 0.2; echo \"$HETFLOW_SLOT $HETFLOW_STATUS\" >> hooks.txt'"


def manifest(policy: str, seconds: float, fail: bool, matrix: bool = False) -> str:
    # with a matrix each slot runs a sweep of two points, and the slot's record is the sweep's summary
    swept = "\nmatrix: {n: [3, 4]}" if matrix else ""
    return f"""version: 1
name: every2
params: {{n: 4}}{swept}
schedule:
  cron: "*/2 * * * * *"
  catchup: true
  max_active: {policy}
  on_failure: {HOOK}
  on_success: {HOOK}
plugins: [sf_ops.py]
executors: {{host: {{vendor: cpu}}}}
stages:
  x: {{op: ones, args: {{shape: ["${{n}}"]}}}}
  y: {{op: sf.wait, inputs: [x], args: {{seconds: {seconds}, fail: {str(fail).lower()}}}, cache: false}}
outputs: {{y: y}}
"""


def run_pids(runs: Path) -> list[int]:
    """The scheduled runs of this runs directory still going, by their command lines."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--schedule-slot" in argv and str(runs).encode() in argv:
            found.append(int(proc.name))
    return found


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def serve(root: Path, runs: Path, log) -> subprocess.Popen:
    return subprocess.Popen(CLI + ["schedule", "serve", str(root / "m.yaml"), "--runs-dir", str(runs),
                                   "--log-format", "json", "--poll", "0.5"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=root)


def setup(rng: random.Random, root: Path, policy: str | None, matrix: bool = False) -> tuple[str, float, bool, Path]:
    policy = policy or rng.choice(["queue", "skip", "allow"])
    seconds, fail = rng.choice([0.3, 1.0, 2.5]), rng.random() < 0.5
    root.mkdir(parents=True, exist_ok=True)
    (root / "sf_ops.py").write_text(OPS)
    (root / "m.yaml").write_text(manifest(policy, seconds / 2 if matrix else seconds, fail, matrix))
    return policy, seconds, fail, root / "runs"


def campaign_run_due(seed: int, seconds_total: float, root: Path, policy: str | None, matrix: bool = False) -> dict:
    rng = random.Random(seed)
    policy, seconds, fail, runs = setup(rng, root, policy, matrix)
    started, faults, unexpected = [], Counter(), []
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds_total:
        log = open(root / f"run-due{len(started)}.log", "w")
        proc = subprocess.Popen(CLI + ["schedule", "run-due", str(root / "m.yaml"), "--runs-dir", str(runs)],
                                stdout=log, stderr=subprocess.STDOUT, cwd=root, start_new_session=True)
        started.append((proc, log))
        time.sleep(rng.uniform(0.3, 2.0))
        for other, _ in started:
            if other.poll() is None and rng.random() < 0.15:
                how = rng.choice(["SIGKILL", "SIGKILL+group", "SIGTERM", "SIGINT"])
                faults[how] += 1
                if how == "SIGKILL+group":
                    os.killpg(other.pid, signal.SIGKILL)
                else:
                    other.send_signal(getattr(signal, how))
    for proc, log in started:
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            unexpected.append(f"run-due {proc.pid} still going after 300 s")
        log.close()
    unexpected += [f"a traceback in {p.name}" for p in root.glob("run-due*.log") if "Traceback" in p.read_text()]
    return {"seed": seed, "driver": "run-due", "policy": policy, "run_s": seconds, "flaky": fail,
            "run_dues": len(started), "faults": dict(faults), **finish(root, runs, policy, unexpected)}


def finish(root: Path, runs: Path, policy: str, unexpected: list[str]) -> dict:
    _wait_gone(runs)
    due = subprocess.run(CLI + ["schedule", "run-due", str(root / "m.yaml"), "--runs-dir", str(runs)], cwd=root,
                         capture_output=True, text=True, timeout=300)
    _wait_gone(runs)
    from hetflow.engine.batch import schedule as sched

    sched.settle(sched.load_entry(str(root / "m.yaml")), str(runs), lambda *_: None)
    return {"run_due_exit": due.returncode, **judge(root, runs, policy, unexpected)}


def campaign(seed: int, rounds: int, root: Path, policy: str | None, matrix: bool = False) -> dict:
    rng = random.Random(seed)
    policy, seconds, fail, runs = setup(rng, root, policy, matrix)
    faults, unexpected = Counter(), []
    for r in range(rounds):
        piped = rng.random() < 0.15
        with open(root / f"serve{r}.log", "w") as log:
            proc = serve(root, runs, subprocess.PIPE if piped else log)
            time.sleep(rng.uniform(0.5, 8.0))
            fault = "close-pipe" if piped else rng.choice(FAULTS)
            faults[fault] += 1
            if fault == "close-pipe":
                proc.stdout.close()
                time.sleep(rng.uniform(0.5, 4.0))
                proc.send_signal(signal.SIGTERM)
            elif fault == "SIGKILL+runs":
                proc.send_signal(signal.SIGKILL)
                kill_all(run_pids(runs))
            elif fault == "SIGTERM+runs-killed":
                proc.send_signal(signal.SIGTERM)
                time.sleep(rng.uniform(0.0, 0.5))
                kill_all(run_pids(runs))
            else:
                proc.send_signal(getattr(signal, fault))
            rc = proc.wait(timeout=60)
        expected = -signal.SIGKILL if fault.startswith("SIGKILL") else 0
        if rc != expected:
            unexpected.append(f"round {r}: {fault} -> exit {rc}, not {expected}")
        time.sleep(rng.uniform(0.0, 5.0))
    with open(root / "serve-last.log", "w") as log:
        proc = serve(root, runs, log)
        time.sleep(20)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    return {"seed": seed, "driver": "serve", "policy": policy, "run_s": seconds, "flaky": fail,
            "faults": dict(faults), **finish(root, runs, policy, unexpected)}


def _wait_gone(runs: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while run_pids(runs) and time.monotonic() < deadline:
        time.sleep(0.5)


def judge(root: Path, runs: Path, policy: str, problems: list[str]) -> dict:
    from hetflow.engine.store.runs import status_of

    folder = runs / ".schedule" / "every2"
    claims = {}
    for path in sorted(folder.glob("*.json")):
        try:
            body = json.loads(path.read_text())
        except ValueError as e:
            problems.append(f"claim {path.name} unreadable: {e}")
            continue
        claims[body["slot"]] = body
    problems += [f"given back and never taken again: {p.name}" for p in folder.glob("*.returned")]
    records = [json.loads(p.read_text()) for p in runs.glob("*/record.json")]
    sweeps = [json.loads(p.read_text()) for p in runs.glob("*/sweep.json")]
    if sweeps or any((r.get("matrix_point") or {}).get("sweep") for r in records):
        # each slot's run is a sweep: its summary is the slot's record, and no point's run may say running
        from hetflow.engine.store.runs import sweep_view

        problems += [f"point run {r['run_id']} still running" for r in records if status_of(r) == "running"]
        # a summary that does not say its slot (written before sweeps did) has it from its points' records
        told = {(r.get("matrix_point") or {}).get("sweep"): r.get("schedule") for r in records if r.get("schedule")}
        records = [{"run_id": v["sweep_id"], "status": v["status"], "schedule": v.get("schedule") or told.get(v["sweep_id"])}
                   for v in (sweep_view(summary, str(runs)) for summary in sweeps)]
    for slot, body in claims.items():
        if body["state"] not in ("succeeded", "failed", "skipped", "died"):
            problems.append(f"slot {slot} left {body['state']}")
    slots = sorted(datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ") for s in claims)
    problems += [f"no slot between {a} and {b}" for a, b in zip(slots, slots[1:]) if (b - a).total_seconds() != 2]
    per_slot = Counter(r["schedule"]["slot"] for r in records if r.get("schedule"))
    problems += [f"slot {s} has {n} records" for s, n in per_slot.items() if n > 1]
    word = {"succeeded": "succeeded", "failed": "failed", "cancelled": "failed", "died": "died"}
    for record in records:
        status = status_of(record)
        slot = (record.get("schedule") or {}).get("slot")
        if status == "running":
            problems.append(f"record {record['run_id']} still running")
        elif slot not in claims:
            problems.append(f"record of slot {slot} with no claim")
        elif claims[slot]["state"] != word.get(status):
            problems.append(f"slot {slot}: claim {claims[slot]['state']}, record {status}")
    hooks: dict[str, list[str]] = {}
    path = root / "hooks.txt"
    for line in path.read_text().splitlines() if path.exists() else []:
        slot, status = line.split(" ")
        hooks.setdefault(slot, []).append(status)
    for slot, body in claims.items():
        said = hooks.get(slot, [])
        if body["state"] == "skipped":
            if said:
                problems.append(f"slot {slot} skipped, yet its hook ran")
        elif not said or set(said) != {body["state"]}:
            problems.append(f"slot {slot} {body['state']}: hook said {said}")
    states = Counter(b["state"] for b in claims.values())
    if policy == "queue" and states["skipped"]:
        problems.append(f"{states['skipped']} slots skipped under queue")
    return {"slots": dict(states), "records": len(records),
            "hooks_run_twice": sum(len(v) > 1 for v in hooks.values()), "problems": problems}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", default="1-4", help="a seed, or a range A-B (one campaign each)")
    parser.add_argument("--rounds", type=int, default=10, help="serve's starts and stops per campaign")
    parser.add_argument("--policy", choices=["queue", "skip", "allow"], help="max_active (default: seeded)")
    parser.add_argument("--driver", choices=["serve", "run-due"], default="serve",
                        help="who keeps the schedule: serve, or run-due from a cron-like loop")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long the run-due loop goes on")
    parser.add_argument("--matrix", action="store_true",
                        help="a manifest with a matrix of two points: each slot's run is a sweep")
    args = parser.parse_args(argv)
    lo, _, hi = args.seeds.partition("-")
    totals = Counter()
    with tempfile.TemporaryDirectory(prefix="hetflow-schedule-faults-") as tmp:
        for seed in range(int(lo), int(hi or lo) + 1):
            folder = Path(tmp) / f"seed{seed}"
            if args.driver == "serve":
                result = campaign(seed, args.rounds, folder, args.policy, args.matrix)
            else:
                result = campaign_run_due(seed, args.seconds, folder, args.policy, args.matrix)
            print(json.dumps(result), flush=True)
            totals.update(result["slots"])
            totals["problems"] += len(result["problems"])
            totals["hooks run twice"] += result["hooks_run_twice"]
            totals["faults"] += sum(result["faults"].values())
    print(json.dumps({"totals": dict(totals)}))
    return 1 if totals["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
