"""The scheduler as a service, on real processes: a catch-up backlog under every max_active, hooks that survive
a stopped or killed serve, retries that rerun, a schedule's identity, status --check, one overlap rule."""

import json
import os
import shutil
import signal
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from hetflow.engine.batch import schedule as sched
from hetflow.engine.store.locks import RunLock, lock_path

from test_schedule import BODY, SLOW_OP, cli, events, records, serve, slow_body, stop, wait_detached, wait_for, write

HOOKS = """\
on_failure: 'echo "$HETFLOW_SLOT $HETFLOW_STATUS" >> hooks.txt'
on_success: 'echo "$HETFLOW_SLOT $HETFLOW_STATUS" >> hooks.txt'
"""


def claims(runs: Path) -> dict[str, dict]:
    """Slot -> claim body, for every claim under the runs directory."""
    out = {}
    for path in runs.glob(".schedule/*/*.json"):
        body = json.loads(path.read_text())
        out[body["slot"]] = body
    return out


def hook_lines(folder: Path) -> list[tuple[str, str]]:
    path = folder / "hooks.txt"
    return [tuple(line.split(" ")) for line in path.read_text().splitlines()] if path.exists() else []


def now_utc() -> datetime:
    return datetime.now(timezone.utc)


# --- catch-up ------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["skip", "queue", "allow"])
def test_a_backlog_of_missed_slots_runs_in_order_under_every_policy(tmp_path, policy):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "every2", f'cron: "*/2 * * * * *"\ncatchup: true\nmax_active: {policy}\n', body=slow_body(1))
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    entry = sched.load_entry(m)
    # the history ends four fire times ago: the scheduler was down over the three slots since
    last = entry.schedule.latest(now_utc(), 4)[-1]
    sched.mark(sched.claim(str(runs), entry, last), entry, last, "skipped", reason="before the downtime")
    missed = [sched.slot_id(t) for t in entry.schedule.after(last, 3)]
    proc = serve([m], runs, log)
    try:
        def caught_up() -> bool:
            done = {r["schedule"]["slot"]: r for r in records(runs) if r["status"] != "running"}
            return all(s in done for s in missed)

        wait_for(caught_up, 60, "a run of every missed slot")
    finally:
        code = stop(proc)
    wait_detached(runs)
    assert code == 0
    assert not [e for e in events(log) if e["event"] == "skipped" and e["slot"] in missed]
    runs_of = {r["schedule"]["slot"]: r for r in records(runs) if r["schedule"]["slot"] in missed}
    assert [runs_of[s]["status"] for s in missed] == ["succeeded"] * 3
    # one after another, oldest first: each starts after the one before it ended
    for before, after in zip(missed, missed[1:]):
        assert runs_of[before]["ended_at"] <= runs_of[after]["started_at"], (before, after)
    started = [e["slot"] for e in events(log) if e["event"] == "started"]
    assert [s for s in started if s in missed] == missed


@pytest.mark.parametrize("policy, how", [("skip", signal.SIGKILL), ("allow", signal.SIGTERM)], ids=["skip-SIGKILL",
                                                                                                    "allow-SIGTERM"])
def test_a_backlog_cut_short_goes_on_after_a_restart_though_a_later_slot_was_decided(tmp_path, policy, how):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "every2", f'cron: "*/2 * * * * *"\ncatchup: true\nmax_active: {policy}\n' + HOOKS,
              body=slow_body(1.5).replace("{seconds: 1.5}", "{seconds: 1.5}, cache: false"))
    runs, log1, log2 = tmp_path / "runs", tmp_path / "first.log", tmp_path / "second.log"
    entry = sched.load_entry(m)
    last = entry.schedule.latest(now_utc(), 4)[-1]
    sched.mark(sched.claim(str(runs), entry, last), entry, last, "skipped", reason="before the downtime")
    backlog = [sched.slot_id(t) for t in entry.schedule.after(last, 3)]
    first = serve([m], runs, log1)
    try:
        # the live schedule decides a slot after the backlog (skipped, or started beside it) while the
        # backlog's later slots still wait their turn
        wait_for(lambda: any(e["event"] in ("skipped", "started") and e["slot"] > backlog[-1] for e in events(log1)),
                 30, "a live slot decided during the backlog")
    finally:
        first.send_signal(how)
        first.wait(timeout=15)
    waiting = [e["slot"] for e in events(log1) if e["event"] == "queued" and e["slot"] in backlog]
    begun = {e["slot"] for e in events(log1) if e["event"] == "started"}
    cut = [s for s in waiting if s not in begun]
    assert cut, events(log1)  # slots of the backlog that never started
    wait_detached(runs)
    second = serve([m], runs, log2)
    try:
        def ran(slot: str) -> bool:
            return any(r["schedule"]["slot"] == slot and r["status"] == "succeeded" for r in records(runs))

        wait_for(lambda: all(ran(s) for s in cut), 60, "the rest of the backlog")
    finally:
        assert stop(second) == 0
    wait_detached(runs)
    sched.settle(entry, str(runs), lambda *_: None)
    bodies = claims(runs)
    assert all(bodies[s]["state"] == "succeeded" for s in cut), {s: bodies.get(s) for s in cut}
    assert not [p for p in runs.glob(".schedule/*/*.returned") if p.name[:-9] in {s.replace("-", "").replace(":", "")
                                                                                     for s in cut}]
    lines = hook_lines(tmp_path)
    assert all(lines.count((s, "succeeded")) == 1 for s in cut), lines  # no failure hook for a slot that never ran
    assert not [s for s, status in lines if s in cut and status != "succeeded"]


# --- hooks across a restart -----------------------------------------------------------------------


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_slot_is_concluded_once_whoever_outlives_its_run(tmp_path, how):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "every3", 'cron: "*/3 * * * * *"\nmax_active: skip\n' + HOOKS, body=slow_body(2.5))
    runs, log1, log2 = tmp_path / "runs", tmp_path / "first.log", tmp_path / "second.log"
    first = serve([m], runs, log1)
    try:
        wait_for(lambda: any(e["event"] == "started" for e in events(log1)), 30, "a first run")
    finally:
        first.send_signal(how)
        code = first.wait(timeout=15)
    (slot,) = [e["slot"] for e in events(log1) if e["event"] == "started"]
    if how == signal.SIGTERM:
        assert code == 0 and [e["slot"] for e in events(log1) if e["event"] == "detached"] == [slot]
    wait_detached(runs)
    assert claims(runs)[slot]["state"] == "started" and hook_lines(tmp_path) == []
    # the next serve and a run-due from cron, at once: both look at the detached slot, one concludes it
    second = serve([m], runs, log2)
    due = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--runs-dir", str(runs),
                            "--log-format", "json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: (slot, "succeeded") in hook_lines(tmp_path), 30, "the detached slot's hook")
        wait_for(lambda: any(e["event"] == "hook" and e["slot"] != slot for e in events(log2)), 30, "a later slot's hook")
    finally:
        code = stop(second)
        due_out, _ = due.communicate(timeout=60)
    wait_detached(runs)
    assert code == 0 and due.returncode == 0, due_out
    # what the second serve left detached, the next book-keeper concludes
    sched.settle(sched.load_entry(m), str(runs), lambda *_: None)
    concluded = [e for e in events(log2) if e["event"] == "succeeded" and e["slot"] == slot]
    concluded += [json.loads(line) for line in due_out.splitlines()
                  if line.startswith("{") and json.loads(line)["event"] == "succeeded" and json.loads(line)["slot"] == slot]
    assert len(concluded) == 1 and concluded[0]["detached"] is True
    bodies = claims(runs)
    assert {b["state"] for b in bodies.values()} <= {"succeeded", "skipped"}, bodies
    ran = sorted(s for s, b in bodies.items() if b["state"] == "succeeded")
    assert sorted(s for s, _ in hook_lines(tmp_path)) == ran  # exactly one hook call per finished slot
    assert {r["schedule"]["slot"] for r in records(runs)} == set(ran)


def test_run_due_that_waits_for_a_detached_run_concludes_its_slot_before_starting_the_next(tmp_path):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "every2", 'cron: "*/2 * * * * *"\nmax_active: queue\n' + HOOKS, body=slow_body(3))
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    first = serve([m], runs, log)
    try:
        wait_for(lambda: any(e["event"] == "started" for e in events(log)), 30, "a first run")
    finally:
        assert stop(first) == 0
    (detached,) = [e["slot"] for e in events(log) if e["event"] == "detached"]
    assert claims(runs)[detached]["state"] == "started"
    entry = sched.load_entry(m)
    (nxt,) = entry.schedule.after(sched.parse_instant(detached), 1)
    wait_for(lambda: now_utc() > nxt, 10, "the next fire time")
    # cron's run-due, while the detached run still goes: the next slot waits for it, then runs
    code, out, _ = cli("schedule", "run-due", m, "--runs-dir", str(runs), "--log-format", "json")
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert code == 0, out
    concluded = [i for i, e in enumerate(said) if e["event"] == "succeeded" and e["slot"] == detached]
    started = [i for i, e in enumerate(said) if e["event"] == "started"]
    assert len(concluded) == 1 and said[concluded[0]]["detached"] is True, out
    # its hook is not held back behind the next slot's run (a start that found the lock taken is tried again)
    assert started and concluded[0] < started[-1], out
    bodies = claims(runs)
    assert {b["state"] for b in bodies.values()} == {"succeeded"}, bodies
    assert sorted(s for s, _ in hook_lines(tmp_path)) == sorted(bodies)


def test_a_slot_whose_scheduler_died_before_starting_its_run_is_given_back_and_one_that_may_have_run_is_not(tmp_path):
    from hetflow.engine.batch.claims import claim_body
    from hetflow.engine.store import owner
    from hetflow.engine.store.records import utc_iso

    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\ncatchup: true\n' + HOOKS)
    entry, runs = sched.load_entry(m), tmp_path / "runs"
    gone = subprocess.Popen(["true"])
    dead = {**owner.current(), "pid": gone.pid, "start_ticks": owner.start_ticks(gone.pid)}
    gone.wait()  # a scheduler that was there, and is not

    def left(slot: str, state: str, age_s: float) -> Path:
        path = Path(sched.claim(str(runs), entry, sched.parse_instant(slot)))
        path.write_text(json.dumps({**claim_body(entry, sched.parse_instant(slot), state), **dead,
                                    "at": utc_iso(datetime.now(timezone.utc).timestamp() - age_s)}))
        return path

    older = left("2026-06-01T09:00:00Z", "queued", 3600)  # older than slots that stay decided
    starting_old = left("2026-06-01T10:00:00Z", "starting", 3600)
    queued = left("2026-06-01T11:00:00Z", "queued", 3600)
    claimed = left("2026-06-01T12:00:00Z", "claimed", 3600)
    starting_new = left("2026-06-01T13:00:00Z", "starting", 0)
    said = []
    done = sched.settle(entry, str(runs), lambda event, fields: said.append((event, fields["slot"])))
    assert not older.exists() and not queued.exists() and not claimed.exists()  # never ran: decided again
    assert sorted(s for e, s in said if e == "unqueued") == ["2026-06-01T09:00:00Z", "2026-06-01T11:00:00Z",
                                                             "2026-06-01T12:00:00Z"]
    # a scheduler that died while starting a run may have left one: after a minute with no record, it died
    assert [d["status"] for d in done] == ["died"]
    assert json.loads(starting_old.read_text())["state"] == "died"
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "died")]
    assert json.loads(starting_new.read_text())["state"] == "starting"  # its run may still be on its way
    # the given-back slots are due again, oldest first, with the fire times after the newest decided slot
    history = sched.history(str(runs), entry)
    assert history["2026-06-01T09:00:00Z"] == history["2026-06-01T12:00:00Z"] == sched.RETURNED
    due = sched.due_slots(entry.schedule, history, sched.parse_instant("2026-06-01T14:30:00Z"))
    assert [sched.slot_id(t) for t in due] == ["2026-06-01T09:00:00Z", "2026-06-01T11:00:00Z", "2026-06-01T12:00:00Z",
                                               "2026-06-01T14:00:00Z"]
    # `status --check` says a given-back slot that no scheduler took again is overdue
    (row,), _ = sched.status([m], str(runs), sched.parse_instant("2026-06-01T13:30:00Z"))
    assert row["overdue"] == "2026-06-01T09:00:00Z"
    # taken again: the claim is new, the given-back mark goes
    again = sched.claim(str(runs), entry, sched.parse_instant("2026-06-01T09:00:00Z"))
    assert again is not None and not Path(again[:-5] + ".returned").exists()
    assert sched.history(str(runs), entry)["2026-06-01T09:00:00Z"] == "claimed"


def test_a_slot_whose_run_found_the_lock_taken_when_its_scheduler_died_waits_its_turn_or_was_skipped(tmp_path):
    from hetflow.engine.batch.claims import claim_body
    from hetflow.engine.store import owner

    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\ncatchup: true\n' + HOOKS)
    entry, runs = sched.load_entry(m), tmp_path / "runs"
    gone = [subprocess.Popen(["true"]) for _ in range(2)]
    dead = [{**owner.current(), "pid": p.pid, "start_ticks": owner.start_ticks(p.pid)} for p in gone]
    for p in gone:
        p.wait()
    # what `hetflow run --json` says when the manifest's run lock is held (exit 4), from a real run
    held = RunLock(lock_path(str(runs), m, "hourly", {"n": 4}), manifest="hourly").acquire()
    try:
        code, out, _ = cli("run", m, "--runs-dir", str(runs), "--json", "--quiet")
    finally:
        held.release()
    assert code == 4

    def left(slot: str, requeue: bool) -> Path:
        path = Path(sched.claim(str(runs), entry, sched.parse_instant(slot)))
        log = path.with_suffix(".log")
        log.write_text(out)
        path.write_text(json.dumps({**claim_body(entry, sched.parse_instant(slot), "started"), **dead[0],
                                    "run_pid": dead[1]["pid"], "run_owner": dead[1], "log": str(log),
                                    **({"requeue": True} if requeue else {})}))
        return path

    waits = left("2026-06-01T10:00:00Z", requeue=True)  # queue, or a backlog: it waits its turn
    skipped = left("2026-06-01T11:00:00Z", requeue=False)  # skip: another run took the lock first
    said = []
    sched.settle(entry, str(runs), lambda event, fields: said.append((event, fields["slot"])))
    assert not waits.exists() and waits.with_suffix(".returned").exists()
    assert json.loads(skipped.read_text())["state"] == "skipped"
    assert ("unqueued", "2026-06-01T10:00:00Z") in said and ("skipped", "2026-06-01T11:00:00Z") in said
    assert hook_lines(tmp_path) == []  # neither ran: no failure to report


def test_runs_gc_removes_an_old_given_back_slot_with_its_log_and_keeps_the_newest_claim(tmp_path):
    from hetflow.engine.store.runs import collect_garbage

    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\n')
    entry, runs = sched.load_entry(m), tmp_path / "runs"
    paths = {}
    for slot, state in (("2026-01-01T09:00:00Z", "skipped"), ("2026-01-01T10:00:00Z", "queued"),
                        ("2026-01-01T11:00:00Z", "skipped")):
        path = sched.claim(str(runs), entry, sched.parse_instant(slot))
        sched.mark(path, entry, sched.parse_instant(slot), state)
        body = json.loads(Path(path).read_text())
        Path(path).write_text(json.dumps({**body, "at": "2026-01-01T12:00:00.000Z"}))
        Path(path[:-5] + ".log").write_text("its output\n")
        paths[slot] = Path(path)
    assert sched.give_back(str(paths["2026-01-01T10:00:00Z"]))
    returned = paths["2026-01-01T10:00:00Z"].with_suffix(".returned")
    assert returned.exists()
    result = collect_garbage(str(runs), older_than="1d")
    assert sorted(result["removed_claims"]) == sorted(os.path.relpath(p, runs) for p in
                                                      (paths["2026-01-01T09:00:00Z"], returned))
    left = sorted(p.name for p in (runs / ".schedule" / "hourly").iterdir())
    assert left == ["20260101T110000Z.json", "20260101T110000Z.log"]  # the newest claim is where run-due goes on


def test_a_run_killed_under_its_live_scheduler_is_died_not_failed_and_says_by_what(tmp_path):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "doomed", 'cron: "0 * * * *"\n' + HOOKS, body=slow_body(30))
    runs = tmp_path / "runs"
    due = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--runs-dir",
                            str(runs), "--now", "2026-06-01T10:00:00Z", "--log-format", "json"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(r["status"] == "running" for r in records(runs)), 60, "a running record")
        (body,) = claims(runs).values()
        os.killpg(body["run_pid"], signal.SIGKILL)  # the OOM killer, while run-due waits on it
        out, _ = due.communicate(timeout=60)
    finally:
        if due.poll() is None:
            due.kill()
    said = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    (ended,) = [e for e in said if e["event"] in ("succeeded", "failed", "died")]
    assert due.returncode == 1 and ended["event"] == "died", out
    assert ended["error"] == "its run was killed by SIGKILL before it finished its record" and ended["run_id"], out
    (body,) = claims(runs).values()
    assert (body["state"], body["run_id"]) == ("died", ended["run_id"])
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "died")]


def test_a_run_that_died_is_marked_so_and_its_failure_hook_runs(tmp_path):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "doomed", 'cron: "*/3 * * * * *"\n' + HOOKS, body=slow_body(30))
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    proc = serve([m], runs, log)
    try:
        wait_for(lambda: any(r["status"] == "running" for r in records(runs)), 30, "a running record")
    finally:
        proc.kill()
        proc.wait(timeout=10)
    (slot, body), = [(s, b) for s, b in claims(runs).items() if b["state"] == "started"]
    os.killpg(body["run_pid"], signal.SIGKILL)  # the run and its whole session, as the OOM killer or a reboot would
    wait_detached(runs)
    log_lines = []
    done = sched.settle(sched.load_entry(m), str(runs), lambda event, fields: log_lines.append((event, fields)))
    assert [d["status"] for d in done] == ["died"]
    assert claims(runs)[slot]["state"] == "died"
    assert hook_lines(tmp_path) == [(slot, "died")]
    assert sched.settle(sched.load_entry(m), str(runs), lambda *_: None) == []  # once


def test_a_slow_hook_holds_back_neither_other_schedules_nor_a_stop_and_what_it_left_is_run_by_the_next(tmp_path):
    """A hook runs beside the loop: another manifest's slots start and end meanwhile, its own manifest's slots are
    skipped (its slot is active until its hook has run), and a stop waits for the hook under way; under
    ``allow`` the hooks of slots that ended meanwhile are left to the next scheduler, which runs each once."""
    # a hook of four seconds: on a machine loaded by the other tests, two were once too short for the every-second
    # schedule beside it to start a slot meanwhile, though the loop was not held
    slow = "on_success: 'sleep 4; echo \"$HETFLOW_SLOT $HETFLOW_STATUS\" >> hooks.txt'\n"
    hooked = write(tmp_path, "hooked", 'cron: "* * * * * *"\n' + slow)
    piling = write(tmp_path, "piling", 'cron: "* * * * * *"\nmax_active: allow\n' + slow.replace("hooks.txt", "piled.txt"))
    plain = write(tmp_path, "plain", 'cron: "* * * * * *"\n')
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    proc = serve([hooked, piling, plain], runs, log)
    try:
        wait_for(lambda: any(e["event"] == "hook" and e["manifest"] == "hooked" for e in events(log)), 60,
                 "the first hook to end")
        first = next(e for e in events(log) if e["event"] == "hook" and e["manifest"] == "hooked")
    finally:
        code = stop(proc)
    wait_detached(runs)
    assert code == 0
    seen = events(log)
    ended = next(i for i, e in enumerate(seen) if e["event"] == "succeeded" and e["slot"] == first["slot"]
                 and e["manifest"] == "hooked")
    hooked_at = seen.index(first)
    meanwhile = seen[ended:hooked_at]
    # the loop went on while the hook ran: another manifest's slot began in that time (on a loaded machine a run of
    # it may take longer than the hook's four seconds to end, so its start is what tells the loop was not held)
    assert sum(e["event"] in ("started", "succeeded") and e["manifest"] == "plain" for e in meanwhile) >= 1, meanwhile
    skipped = [e for e in meanwhile if e["event"] == "skipped" and e["manifest"] == "hooked"]
    assert skipped and {e["reason"] for e in skipped} == {"the hook of its last slot is running"}, meanwhile
    # the stop came while a hook ran: it ran to its end, and the hooks not begun were left owed
    left = [e for e in seen if e["event"] == "hook-deferred"]
    assert left and {e["manifest"] for e in left} == {"piling"}, seen[-10:]
    bodies = [json.loads(p.read_text()) for p in runs.glob(".schedule/*/*.json")]
    owed = {b["slot"] for b in bodies if b.get("hook") == "pending" and b["manifest"] == piling}
    assert owed == {e["slot"] for e in left}
    # at an instant no manifest has a slot due: it only concludes what the stopped scheduler left
    now = min(max(b["slot"] for b in bodies if b["manifest"] == m) for m in (hooked, piling, plain))
    code, out, _ = cli("schedule", "run-due", hooked, piling, plain, "--now", now, "--runs-dir", str(runs),
                       "--log-format", "json")
    assert code == 0 and not [line for line in out.splitlines() if json.loads(line)["event"] == "started"], out
    paid = [json.loads(line) for line in out.splitlines() if json.loads(line)["event"] == "hook-owed"]
    assert {e["slot"] for e in paid} == owed
    piled = [line.split(" ")[0] for line in (tmp_path / "piled.txt").read_text().splitlines()]
    assert len(piled) == len(set(piled)) and owed <= set(piled)  # each once
    assert not any(json.loads(p.read_text()).get("hook") == "pending" for p in runs.glob(".schedule/*/*.json"))


def test_a_restarted_serve_runs_the_hooks_it_owes_beside_its_schedules_not_before_them(tmp_path):
    """The hook a scheduler now gone left owed is run by the next ``serve`` in a thread of its manifest's: every
    other schedule is decided, started and concluded while it runs, as while a hook of serve's own runs."""
    from hetflow.engine.batch.claims import claim_body
    from hetflow.engine.store import owner
    from hetflow.engine.store.records import utc_iso

    slow = "on_success: 'sleep 4; echo \"$HETFLOW_SLOT $HETFLOW_STATUS\" >> hooks.txt'\n"
    hooked = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + slow)
    plain = write(tmp_path, "plain", 'cron: "* * * * * *"\n')
    entry, runs, log = sched.load_entry(hooked), tmp_path / "runs", tmp_path / "serve.log"
    gone = subprocess.Popen(["true"])
    dead = {**owner.current(), "pid": gone.pid, "start_ticks": owner.start_ticks(gone.pid)}
    gone.wait()  # the scheduler that concluded the slot, and died before its hook had run
    slot = now_utc().replace(minute=0, second=0, microsecond=0)  # the latest fire time: no slot of it is due
    path = Path(sched.claim(str(runs), entry, slot))
    path.write_text(json.dumps({**claim_body(entry, slot, "succeeded"), **dead, "hook": "pending",
                                "at": utc_iso(now_utc().timestamp() - 5)}))
    proc = serve([hooked, plain], runs, log)
    try:
        wait_for(lambda: any(e["event"] == "hook" and e["manifest"] == "hooked" for e in events(log)), 60,
                 "the owed hook to end")
    finally:
        code = stop(proc)
    wait_detached(runs)
    assert code == 0
    seen = events(log)
    owed = next(i for i, e in enumerate(seen) if e["event"] == "hook-owed")
    paid = next(i for i, e in enumerate(seen) if e["event"] == "hook" and e["manifest"] == "hooked")
    meanwhile = [e for e in seen[owed:paid] if e["manifest"] == "plain"]
    # a slot started and concluded while the hook ran (one is enough, and all a loaded machine may fit in it)
    started = {e["slot"] for e in meanwhile if e["event"] == "started"}
    assert any(e["event"] == "succeeded" and e["slot"] in started for e in meanwhile), seen[owed:paid]
    assert hook_lines(tmp_path) == [(sched.slot_id(slot), "succeeded")]
    assert (json.loads(path.read_text())["hook"], json.loads(path.read_text())["hook_rc"]) == ("ran", 0)
    # a scheduler that stops before such a hook began leaves it owed to the next one, and says so
    from hetflow.engine.batch.serve import Server

    earlier = slot - timedelta(hours=1)
    left = Path(sched.claim(str(runs), entry, earlier))
    left.write_text(json.dumps({**claim_body(entry, earlier, "succeeded"), **dead, "hook": "pending",
                                "at": utc_iso(now_utc().timestamp() - 5)}))
    said = []
    server = Server([hooked], str(runs), lambda event, fields: said.append((event, dict(fields))))
    server.stopping = True
    sched.settle(entry, str(runs), server.log, later=lambda p, owed: server._later(entry, p, owed))
    server._concluded()
    assert [(e, f["slot"], f["hook"]) for e, f in said] == [("hook-deferred", sched.slot_id(earlier), "on_success")]
    assert json.loads(left.read_text())["hook"] == "pending" and len(hook_lines(tmp_path)) == 1


def test_a_hook_handed_on_by_conclude_is_paid_at_once_not_refused_by_the_slots_own_lock(tmp_path):
    """``conclude(later=)`` handed the hook on while it held the slot's lock: serve's thread, quick to try, found the
    lock taken and took the hook for another process's, and it was never run (a fresh-clone CI run, once)."""
    m = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + HOOKS)
    entry, runs = sched.load_entry(m), str(tmp_path / "runs")
    slot = sched.parse_instant("2026-06-01T10:00:00Z")
    path = sched.claim(runs, entry, slot)
    paid = []
    said = []
    assert sched.conclude(entry, slot, path, {"status": "succeeded"}, runs, lambda e, f: said.append(e),
                          later=lambda p, owed: paid.append(sched.pay_hook(entry, p, runs, lambda e, f: said.append(e),
                                                                           owed=owed)))
    assert paid == [True] and said == ["succeeded", "hook"]
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]
    assert json.loads(Path(path).read_text())["hook"] == "ran"


def test_a_hook_cut_short_by_its_schedulers_death_is_run_by_the_next(tmp_path):
    # the first call hangs until the kill; the one run again finishes at once
    hooks = ("on_success: 'echo begun >> begun.txt; [ $(wc -l < begun.txt) -gt 1 ] || sleep 60; "
             "echo \"$HETFLOW_SLOT $HETFLOW_STATUS\" >> hooks.txt'\n")
    m = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + hooks)
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z",
            "--runs-dir", str(runs), "--log-format", "json"]
    first = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "begun.txt").exists(), 60, "the hook to begin")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the scheduler and its hook, as a reboot would
        first.communicate(timeout=10)
    (slot, body), = claims(runs).items()
    assert (body["state"], body["hook"]) == ("succeeded", "pending")
    assert hook_lines(tmp_path) == []
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:06:00Z", "--runs-dir", str(runs),
                       "--log-format", "json")
    said = [json.loads(line)["event"] for line in out.splitlines() if line.startswith("{")]
    assert code == 0 and said == ["hook-owed", "hook"], out
    assert hook_lines(tmp_path) == [(slot, "succeeded")]
    assert (claims(runs)[slot]["hook"], claims(runs)[slot]["hook_rc"]) == ("ran", 0)
    assert (tmp_path / "begun.txt").read_text().count("begun") == 2
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:07:00Z", "--runs-dir", str(runs))
    assert (code, out) == (0, "") and hook_lines(tmp_path) == [(slot, "succeeded")]  # paid once


# --- a sweep as a slot's run ----------------------------------------------------------------------

POINT_OP = ("import time\n\nfrom hetflow import op\n\n\n@op('t.point')\ndef point(xp, x, *, fails: int, seconds: float):\n"
            "    time.sleep(seconds)\n    if fails:\n        raise RuntimeError('this point fails')\n    return x\n")


def swept(folder: Path, name: str, seconds: float) -> str:
    """A scheduled manifest whose matrix fails its first point and succeeds its second, ``seconds`` later."""
    (folder / "point_ops.py").write_text(POINT_OP)
    body = BODY.replace("executors:", "plugins: [point_ops.py]\nexecutors:").replace(
        "outputs: {x: x}", "  y: {op: t.point, inputs: [x], args: {fails: '${fails}', seconds: '${seconds}'}}\n"
                           "outputs: {y: y}").replace("{n: 4}", "")
    return write(folder, name, 'cron: "0 * * * *"\n' + HOOKS, body=body,
                 params=f"{{n: 4, fails: 0, seconds: 0}}\nmatrix: {{include: [{{fails: 1, seconds: 0}}, "
                        f"{{fails: 0, seconds: {seconds}}}]}}")


def run_due(manifest: str, now: str, runs: Path) -> list[str]:
    """``hetflow schedule run-due`` as a process of its own."""
    return [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", manifest, "--now", now,
            "--runs-dir", str(runs)]


def test_a_scheduled_sweep_whose_point_failed_fails_its_slot_though_its_last_point_succeeded(tmp_path):
    m = swept(tmp_path, "swept", 0)
    runs = tmp_path / "runs"
    code, out, err = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs),
                         "--log-format", "json")
    ended = [json.loads(line) for line in out.splitlines() if json.loads(line)["event"] in ("failed", "succeeded")]
    (sweep,) = [p.name for p in runs.glob("*-sweep*")]
    assert [(e["event"], e["run_id"]) for e in ended] == [("failed", sweep)], out
    assert ended[0]["error"].startswith("1 of 2 points did not succeed: swept[fails=1,seconds=0] failed: "), ended
    assert "this point fails" in ended[0]["error"]
    (body,) = claims(runs).values()
    assert (body["state"], body["run_id"]) == ("failed", sweep)
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "failed")]
    status = ("schedule", "status", m, "--runs-dir", str(runs), "--now", "2026-06-01T10:10:00Z")
    code, out, _ = cli(*status, "--json")
    (row,) = json.loads(out)
    assert (row["state"], row["status"], row["run_id"]) == ("failed", "failed", sweep), row
    assert cli(*status, "--check")[0] == 1


def test_a_detached_sweep_is_concluded_as_the_sweep_ended_not_as_its_newest_point(tmp_path):
    m = swept(tmp_path, "detached", 3)
    runs = tmp_path / "runs"
    first = subprocess.Popen(run_due(m, "2026-06-01T10:05:00Z", runs), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: any(r["status"] == "failed" for r in records(runs)), 60, "the first point to fail")
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # the scheduler; the sweep, in its own session, goes on
        first.wait(timeout=10)
    wait_detached(runs)
    (sweep,) = [p.name for p in runs.glob("*-sweep*")]
    assert [r["status"] for r in records(runs)] == ["failed", "succeeded"]  # the newest point succeeded
    done = sched.settle(sched.load_entry(m), str(runs), lambda *_: None)
    assert [(d["status"], d["run_id"]) for d in done] == [("failed", sweep)]
    assert "1 of 2 points did not succeed" in done[0]["error"]
    assert claims(runs)["2026-06-01T10:00:00Z"]["state"] == "failed"
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "failed")]


def test_a_slot_due_while_the_sweep_of_the_slot_before_runs_is_skipped_as_for_a_run(tmp_path):
    """The sweep holds the lock a schedule's decisions ask: a run-due started meanwhile (cron, every minute) skipped
    nothing and ran a second sweep, whose points met the first's at their locks, failing a point of each."""
    m = swept(tmp_path, "overlap", 2)
    text = Path(m).read_text()
    Path(m).write_text(text.replace('cron: "0 * * * *"', 'cron: "* * * * *"').replace("{fails: 1, seconds: 0}",
                                                                                      "{fails: 0, seconds: 1}"))
    runs = tmp_path / "runs"
    first = subprocess.Popen(run_due(m, "2026-06-01T10:00:30Z", runs), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    try:
        wait_for(lambda: any(r["status"] == "running" for r in records(runs)), 60, "the first sweep's first point")
        code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:01:30Z", "--runs-dir", str(runs))
    finally:
        said, _ = first.communicate(timeout=120)
    assert code == 0 and 'skipped manifest=overlap slot=2026-06-01T10:01:00Z reason="a run of this manifest is active"' in out, out
    assert first.returncode == 0 and "succeeded manifest=overlap slot=2026-06-01T10:00:00Z" in said, said
    assert [r["status"] for r in records(runs)] == ["succeeded", "succeeded"]
    assert len(list(runs.glob("*-sweep*"))) == 1


def test_a_sweep_whose_point_found_its_lock_taken_ran_and_failed_its_slot_and_is_not_queued_again(tmp_path):
    """Exit 4 from a sweep is a point that found its lock taken, after the others ran: the slot is not skipped (as
    for a run that ran nothing), and under ``queue`` its sweep is not started again."""
    # the run by hand outlasts run-due's sweep however loaded the machine, and is stopped once run-due is done
    m = swept(tmp_path, "held", 120)
    text = Path(m).read_text().replace("{fails: 1, seconds: 0}", "{fails: 0, seconds: 0}")
    Path(m).write_text(text.replace('cron: "0 * * * *"', 'cron: "0 * * * *"\n  max_active: queue'))
    runs = tmp_path / "runs"
    by_hand = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", m, "--point", "seconds=120",
                                "--runs-dir", str(runs), "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: any(r["status"] == "running" for r in records(runs)), 60, "the run by hand")
        code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    finally:
        by_hand.terminate()
        by_hand.communicate(timeout=60)
    assert code == 1 and out.count(" started manifest=held") == 1, out
    assert "failed manifest=held slot=2026-06-01T10:00:00Z rc=4" in out and "already running" in out, out
    (body,) = claims(runs).values()
    assert body["state"] == "failed" and body["run_id"].endswith("-sweep"), body
    assert len(list(runs.glob("*-sweep*"))) == 1


def test_gc_removes_the_claim_of_a_scheduled_sweep_with_the_sweep(tmp_path):
    m = swept(tmp_path, "gone", 0)
    runs = tmp_path / "runs"
    for now in ("2026-06-01T08:05:00Z", "2026-06-01T10:05:00Z"):
        cli("schedule", "run-due", m, "--now", now, "--runs-dir", str(runs))
    assert sorted(claims(runs)) == ["2026-06-01T08:00:00Z", "2026-06-01T10:00:00Z"]
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1")
    assert code == 0 and "removed 2 runs, 1 sweeps" in out and "1 schedule claims" in out, out
    assert sorted(claims(runs)) == ["2026-06-01T10:00:00Z"]


# --- retries ------------------------------------------------------------------------------------


FLAKY_OP = ("import os\n\nfrom hetflow import op\n\n\n@op('t.flaky')\ndef flaky(xp, x, *, flag: str):\n"
            "    if os.path.exists(flag):\n        raise RuntimeError('the flag file says fail')\n    return x\n")


def test_an_explicit_retry_of_a_failed_slot_reruns_it_and_exits_with_its_outcome(tmp_path):
    (tmp_path / "flaky_ops.py").write_text(FLAKY_OP)
    flag = tmp_path / "fail.flag"
    flag.write_text("")
    body = BODY.replace("executors:", "plugins: [flaky_ops.py]\nexecutors:").replace(
        "outputs: {x: x}", f"  y: {{op: t.flaky, inputs: [x], args: {{flag: {json.dumps(str(flag))}}}}}\noutputs: {{y: y}}")
    m = write(tmp_path, "flaky", 'cron: "0 * * * *"\n' + HOOKS, body=body)
    runs = tmp_path / "runs"
    slot = "2026-06-01T10:00:00Z"
    argv = ("schedule", "run-due", m, "--now", slot, "--runs-dir", str(runs))
    code, out, _ = cli(*argv)
    assert code == 1 and f"failed manifest=flaky slot={slot}" in out
    # not on a fire time: deciding as if it were that instant, as before; the failed slot stays decided
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert (code, out) == (0, "")
    code, out, _ = cli(*argv)  # Airflow's retry: the same --now
    assert code == 1 and f"retrying manifest=flaky slot={slot}" in out and f"failed manifest=flaky slot={slot}" in out
    flag.unlink()
    code, out, _ = cli(*argv)
    assert code == 0 and f"retrying manifest=flaky slot={slot}" in out and f"succeeded manifest=flaky slot={slot}" in out
    code, out, _ = cli(*argv)
    assert (code, out) == (0, "")  # a slot that succeeded is not run again
    assert [r["status"] for r in sorted(records(runs), key=lambda r: r["started_at"])] == ["failed", "failed", "succeeded"]
    assert hook_lines(tmp_path) == [(slot, "failed"), (slot, "failed"), (slot, "succeeded")]
    assert claims(runs)[slot]["state"] == "succeeded" and claims(runs)[slot]["tries"] == 3
    code, out, _ = cli("schedule", "status", m, "--runs-dir", str(runs), "--now", "2026-06-01T10:30:00Z", "--json")
    assert json.loads(out)[0]["status"] == "succeeded"


# --- identity -----------------------------------------------------------------------------------


def test_a_copied_manifest_shares_the_history_of_its_original(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    m = write(here, "nightly", 'cron: "0 * * * *"\n')
    runs = tmp_path / "runs"
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and "succeeded manifest=nightly slot=2026-06-01T10:00:00Z" in out
    shutil.copytree(here, there)
    copy = str(there / "nightly.yaml")
    code, out, _ = cli("schedule", "run-due", copy, "--now", "2026-06-01T10:30:00Z", "--runs-dir", str(runs))
    assert (code, out) == (0, "")  # the slot is in the history it shares: no second run
    code, out, _ = cli("schedule", "status", copy, "--now", "2026-06-01T10:30:00Z", "--runs-dir", str(runs), "--json")
    assert json.loads(out)[0]["last_slot"] == "2026-06-01T10:00:00Z" and json.loads(out)[0]["status"] == "succeeded"
    assert lock_path(str(runs), m, "nightly", {"n": 4}) == lock_path(str(runs), copy, "nightly", {"n": 4})
    code, out, _ = cli("schedule", "run-due", m, copy, "--now", "2026-06-01T11:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and out.count("succeeded manifest=nightly") == 1  # a copy given twice is one schedule
    Path(copy).write_text(Path(copy).read_text().replace("params: {n: 4}", "params: {n: 5}"))
    code, out, err = cli("schedule", "run-due", m, copy, "--now", "2026-06-01T12:05:00Z", "--runs-dir", str(runs))
    assert code == 2 and out == ""
    assert f"{m} and {copy} both name the manifest 'nightly' but differ" in err
    # and in two invocations: the newest claim says which file keeps the schedule
    code, out, err = cli("schedule", "run-due", copy, "--now", "2026-06-01T12:05:00Z", "--runs-dir", str(runs))
    assert code == 2 and out == ""
    assert f"{copy} and {os.path.abspath(m)} both name the manifest 'nightly' but differ" in err
    # a file moved away hands its history on
    os.remove(m)
    code, out, _ = cli("schedule", "run-due", copy, "--now", "2026-06-01T12:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and out.count("succeeded manifest=nightly slot=2026-06-01T12:00:00Z") == 1, out


# --- status --check -----------------------------------------------------------------------------


def test_status_check_says_failed_or_overdue_and_plain_status_stays_0(tmp_path):
    failing = BODY.replace('{op: ones, args: {shape: ["${n}"]}}', "{op: matmul, inputs: [w, w], timeout: 0.000001}\n"
                           "  w: {op: random.normal, args: {shape: [1024, 1024], seed: 1}}")
    bad = write(tmp_path, "broken", 'cron: "0 * * * *"\n', body=failing)
    good = write(tmp_path, "fine", 'cron: "0 * * * *"\n')
    runs = tmp_path / "runs"
    cli("schedule", "run-due", bad, good, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    status = ("schedule", "status", "--runs-dir", str(runs))
    assert cli(*status, bad, "--now", "2026-06-01T10:10:00Z")[0] == 0
    assert cli(*status, bad, "--now", "2026-06-01T10:10:00Z", "--check")[0] == 1
    assert cli(*status, good, "--now", "2026-06-01T10:10:00Z", "--check")[0] == 0
    # 11:00 passed an hour ago and nothing decided it: no scheduler is running
    code, out, _ = cli(*status, good, "--now", "2026-06-01T12:00:00Z", "--check", "--grace", "60")
    assert code == 6 and "overdue: 2026-06-01T11:00:00Z not decided" in out
    assert cli(*status, good, "--now", "2026-06-01T11:00:30Z", "--check", "--grace", "60")[0] == 0  # within the grace


def test_status_check_json_says_its_exit_code_as_every_json_result_with_one_does(tmp_path):
    """--check --json exited 1 or 6 and printed the bare list of rows: the one --json output whose exit code it
    did not say (run, verify, emulate and every failure's object carry exit_code)."""
    failing = BODY.replace('{op: ones, args: {shape: ["${n}"]}}', "{op: matmul, inputs: [w, w], timeout: 0.000001}\n"
                           "  w: {op: random.normal, args: {shape: [1024, 1024], seed: 1}}")
    bad = write(tmp_path, "broken", 'cron: "0 * * * *"\n', body=failing)
    good = write(tmp_path, "fine", 'cron: "0 * * * *"\n')
    runs = tmp_path / "runs"
    cli("schedule", "run-due", bad, good, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    status = ("schedule", "status", "--runs-dir", str(runs), "--json", "--check")
    for path, now, want in ((bad, "2026-06-01T10:10:00Z", (1, "failed")), (good, "2026-06-01T10:10:00Z", (0, "ok")),
                            (good, "2026-06-01T12:00:00Z", (6, "overdue"))):
        code, out, err = cli(*status, path, "--now", now, "--grace", "60")
        data = json.loads(out)
        assert (code, data["status"]) == want and data["exit_code"] == code, out
        assert [r["manifest"] for r in data["manifests"]] == [os.path.basename(path)[:-5]]
        if code:
            assert data["message"] in err, err
        else:
            assert "message" not in data and err == ""
    assert "2026-06-01T11:00:00Z not decided" in data["message"]
    assert "broken: last slot 2026-06-01T10:00:00Z failed" in json.loads(cli(*status, bad, "--now", "2026-06-01T10:10:00Z")[1])["message"]
    # without --check its exit code is 0 whatever it shows: the rows as they were
    code, out, _ = cli("schedule", "status", "--runs-dir", str(runs), "--json", bad, "--now", "2026-06-01T10:10:00Z")
    assert code == 0 and [r["manifest"] for r in json.loads(out)] == ["broken"]


# --- one overlap rule -----------------------------------------------------------------------------


def test_a_run_with_other_params_neither_blocks_a_slot_nor_is_blocked(tmp_path):
    m = write(tmp_path, "busy", 'cron: "0 * * * *"\nmax_active: skip\n')
    runs = tmp_path / "runs"
    with RunLock(lock_path(str(runs), m, "busy", {"n": 5}), manifest=m):  # `hetflow run busy.yaml -p n=5` by hand
        code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and "succeeded manifest=busy slot=2026-06-01T10:00:00Z" in out
    with RunLock(lock_path(str(runs), m, "busy", {"n": 4}), manifest=m):  # the params the slot's run resolves to
        code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T11:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and 'skipped manifest=busy slot=2026-06-01T11:00:00Z reason="a run of this manifest is active"' in out


def test_serve_says_once_that_a_named_path_is_gone_and_still_finds_new_files_in_the_others(tmp_path):
    """A manifest named on the command line is deleted while the service runs: one error line (not one per poll),
    its ``removed``; a folder named after it is still scanned, so a manifest new there is loaded."""
    from hetflow.engine.batch.serve import Server

    single, folder = tmp_path / "single", tmp_path / "folder"
    single.mkdir()
    folder.mkdir()
    gone = write(single, "gone", 'cron: "0 3 * * *"\n')
    seen: list[tuple[str, dict]] = []
    server = Server([gone, str(folder)], str(tmp_path / "runs"), log=lambda event, fields: seen.append((event, fields)))
    server.scan()
    assert [e for e, _ in seen] == ["loaded"]
    os.remove(gone)
    for _ in range(3):
        server.scan()
    assert [e for e, _ in seen] == ["loaded", "error", "removed"]
    assert seen[1][1]["error"] == f"{gone}: no such file or folder"
    write(folder, "fresh", 'cron: "0 4 * * *"\n')
    server.scan()
    assert [(e, f.get("manifest")) for e, f in seen[3:]] == [("loaded", "fresh")]
    write(single, "gone", 'cron: "0 3 * * *"\n')
    server.scan()
    server.scan()
    assert [(e, f.get("manifest")) for e, f in seen[4:]] == [("loaded", "gone")]


def _interpreter_that_can_go(folder: Path) -> Path:
    """This Python under a path of its own (its prefix's folders linked), which a test removes from under a
    long-lived ``serve``, as an upgrade of the interpreter or its venv does."""
    shadow = folder / "python"
    (shadow / "bin").mkdir(parents=True)
    for item in Path(sys.prefix).iterdir():
        if item.name != "bin":
            (shadow / item.name).symlink_to(item)
    exe = shadow / "bin" / "python"
    exe.symlink_to(os.path.realpath(sys.executable))
    return exe


def test_a_slot_whose_run_could_not_be_started_fails_saying_why_and_serve_goes_on(tmp_path):
    """``serve`` whose interpreter was removed: the slot's claim stayed ``claimed`` while ``serve`` lived, the slot
    never run and never failed, no hook."""
    exe = _interpreter_that_can_go(tmp_path)
    m = write(tmp_path, "gone", 'cron: "*/2 * * * * *"\n' + HOOKS)
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([str(exe), "-m", "hetflow.engine.cli", "schedule", "serve", m, "--runs-dir", str(runs),
                                 "--log-format", "json", "--poll", "0.5"], stdout=f, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: any(e["event"] == "succeeded" for e in events(log)), 60, "a slot run by serve")
        exe.unlink()
        wait_for(lambda: any(b["state"] == "failed" for b in claims(runs).values()), 30, "a slot that failed to start")
        exe.symlink_to(os.path.realpath(sys.executable))
        failed = [s for s, b in claims(runs).items() if b["state"] == "failed"]
        wait_for(lambda: any(b["state"] == "succeeded" and s > failed[0] for s, b in claims(runs).items()), 30,
                 "a slot run again once the interpreter is back")
    finally:
        assert stop(proc) == 0
        wait_detached(runs)
    body = claims(runs)[failed[0]]
    assert body["error"] == f"its run could not be started: No such file or directory: {exe}", body
    assert body.get("run_id") is None and body["hook"] == "ran"
    assert (failed[0], "failed") in hook_lines(tmp_path)
    said = [e for e in events(log) if e.get("slot") == failed[0]]
    assert [e["event"] for e in said] == ["failed", "hook"], said
    assert not any(e["event"] == "error" for e in events(log))
    assert not any(b["state"] in ("claimed", "starting") for b in claims(runs).values())


def test_run_due_whose_run_could_not_be_started_concludes_the_slot_failed_and_exits_1(tmp_path, monkeypatch):
    exe = _interpreter_that_can_go(tmp_path)
    exe.unlink()
    monkeypatch.setattr(sys, "executable", str(exe))  # the interpreter this process would start its runs with
    m = write(tmp_path, "gone", 'cron: "0 * * * *"\n' + HOOKS)
    runs = tmp_path / "runs"
    code, out, err = cli("schedule", "run-due", m, "--runs-dir", str(runs), "--now", "2026-03-01T10:00:30Z")
    assert code == 1, err
    (slot, body), = claims(runs).items()
    assert (slot, body["state"]) == ("2026-03-01T10:00:00Z", "failed")
    assert body["error"] == f"its run could not be started: No such file or directory: {exe}"
    assert hook_lines(tmp_path) == [(slot, "failed")]
    assert "Traceback" not in out + err


def test_a_run_killed_after_it_said_it_succeeded_is_concluded_from_its_record(tmp_path):
    """The OOM killer, or a crash at the interpreter's exit, after the run printed its result: the slot was
    concluded ``failed``, its error the run's own success line, and ``on_failure`` ran, while the record and
    ``hetflow runs`` said succeeded."""
    m = write(tmp_path, "late", 'cron: "0 * * * *"\n' + HOOKS)
    entry, runs, slot = sched.load_entry(m), tmp_path / "runs", sched.parse_instant("2026-06-01T10:00:00Z")
    path = sched.claim(str(runs), entry, slot)
    argv = sched.command(entry, slot, str(runs))
    assert argv[1:3] == ["-m", "hetflow.engine.cli"]
    # the slot's own command line, run in this process, which then takes SIGKILL once its result is out
    killed_after = ("import os, signal, sys\nfrom hetflow.engine.cli import main\nmain(sys.argv[1:])\n"
                    "sys.stdout.flush()\nos.kill(os.getpid(), signal.SIGKILL)\n")
    log = path[:-5] + ".log"
    with open(log, "ab") as f:
        process = subprocess.Popen([sys.executable, "-c", killed_after, *argv[3:]], stdout=f, stderr=subprocess.STDOUT,
                                   cwd=tmp_path)
    process.wait(timeout=120)
    assert process.returncode == -signal.SIGKILL
    assert '"status": "succeeded"' in Path(log).read_text()
    said = []
    info = sched._finish(sched.Child(entry, slot, path, process, log, runs_dir=str(runs)),
                         lambda event, fields: said.append(event))
    (record,) = records(runs)
    assert record["status"] == "succeeded"
    assert (info["status"], info["run_id"], info.get("error")) == ("succeeded", record["run_id"], None), info
    assert claims(runs)["2026-06-01T10:00:00Z"]["state"] == "succeeded"
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]


def test_a_hook_that_outlives_its_killed_scheduler_is_waited_for_not_run_again(tmp_path):
    """A scheduler SIGKILLed while its hook ran left the hook running on its own: the next ``serve`` ran it
    again beside it, in full, as owed. It now waits for that hook to end and takes the exit code its shell left."""
    hook = ('on_success: \'echo "start $HETFLOW_SLOT" >> hooks.txt; sleep 3; echo "end $HETFLOW_SLOT" >> hooks.txt; '
            'exit 7\'\n')
    m = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + hook)
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    slot = sched.slot_id(now_utc().replace(minute=0, second=0, microsecond=0))
    first = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", slot,
                              "--runs-dir", str(runs)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: ("start", slot) in hook_lines(tmp_path), 60, "the hook to start")
    finally:
        first.kill()
        first.wait()
    body = claims(runs)[slot]
    assert body["hook"] == "pending" and sched.owner.alive(body["hook_process"]) is True
    proc = serve([m], runs, log)
    try:
        wait_for(lambda: claims(runs)[slot].get("hook") == "ran", 60, "the hook's end to be taken")
    finally:
        code = stop(proc)
    wait_detached(runs)
    assert code == 0
    assert [line for line in hook_lines(tmp_path) if line[1] == slot] == [("start", slot), ("end", slot)]
    body = claims(runs)[slot]
    assert (body["hook_rc"], "hook_process" in body) == (7, False)
    seen = [e for e in events(log) if e.get("slot") == slot]
    assert [(e["event"], e.get("rc"), e.get("outlived_its_scheduler")) for e in seen] == [("hook", 7, True)]
    assert not list(runs.glob(".schedule/*/*.hook-exit"))


def test_a_hook_left_running_past_its_time_limit_is_ended_and_one_cut_short_runs_again(tmp_path):
    from hetflow.engine.batch.claims import claim_body
    from hetflow.engine.store import owner
    from hetflow.engine.store.records import utc_iso

    m = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + HOOKS)
    entry, runs = sched.load_entry(m), str(tmp_path / "runs")
    said = []
    log = lambda event, fields: said.append((event, dict(fields)))  # noqa: E731
    # a hook whose scheduler died, running for longer than hooks may: it is ended with the process it started
    survivor = subprocess.Popen(["/bin/sh", "-c", "sleep 60; true"])
    wait_for(lambda: owner.descendants(survivor.pid), 10, "the hook's sleep")
    sleep = owner.descendants(survivor.pid)[0]
    slot = sched.parse_instant("2026-06-01T10:00:00Z")
    path = Path(sched.claim(runs, entry, slot))
    gone = subprocess.Popen(["true"])
    dead = {"pid": gone.pid, "start_ticks": owner.start_ticks(gone.pid)}
    gone.wait()
    started = utc_iso(now_utc().timestamp() - sched.HOOK_TIMEOUT_S - 5)
    path.write_text(json.dumps({**claim_body(entry, slot, "succeeded"), **dead, "hook": "pending",
                                "hook_process": owner.of(survivor.pid), "hook_started": started}))
    assert sched.pay_hook(entry, str(path), runs, log) is True
    assert survivor.wait(timeout=10) == -signal.SIGKILL
    wait_for(lambda: owner.alive(owner.of(sleep)) is not True, 10, "the hook's sleep to end")
    assert said == [("hook", {"manifest": "hooked", "slot": "2026-06-01T10:00:00Z", "hook": "on_success",
                              "rc": "timed out", "outlived_its_scheduler": True})]
    assert (json.loads(path.read_text())["hook"], json.loads(path.read_text())["hook_rc"]) == ("ran", None)
    assert hook_lines(tmp_path) == []
    # one that ended without saying how (its process group killed with its scheduler) runs again, owed
    said.clear()
    path.write_text(json.dumps({**claim_body(entry, slot, "succeeded"), **dead, "hook": "pending",
                                "hook_process": {**owner.current(), **dead},
                                "hook_started": utc_iso(now_utc().timestamp() - 5)}))
    assert sched.pay_hook(entry, str(path), runs, log) is True
    assert [e for e, _ in said] == ["hook-owed", "hook"] and said[1][1]["rc"] == 0
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]
    assert json.loads(path.read_text())["hook"] == "ran"


def test_a_claim_whose_hook_process_names_no_pid_is_owed_not_waited_for(tmp_path):
    from hetflow.engine.batch.claims import claim_body
    from hetflow.engine.store import owner
    from hetflow.engine.store.records import utc_iso

    m = write(tmp_path, "hooked", 'cron: "0 * * * *"\n' + HOOKS)
    entry, runs = sched.load_entry(m), str(tmp_path / "runs")
    slot = sched.parse_instant("2026-06-01T10:00:00Z")
    path = Path(sched.claim(runs, entry, slot))
    gone = subprocess.Popen(["true"])
    dead = {"pid": gone.pid, "start_ticks": owner.start_ticks(gone.pid)}
    gone.wait()
    path.write_text(json.dumps({**claim_body(entry, slot, "succeeded"), **dead, "hook": "pending",
                                "hook_process": {**owner.current(), "pid": "x"}, "hook_started": utc_iso(0)}))
    said = []
    assert sched.pay_hook(entry, str(path), runs, lambda e, f: said.append(e)) is True
    assert said == ["hook-owed", "hook"] and hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_hook_ended_with_its_serve_by_a_signal_to_their_group_is_owed_and_run_by_the_next(tmp_path, sig):
    """A Ctrl-C (or a SIGTERM to the process group) reached the hook's shell with its serve: the claim said the hook
    had run, with exit code -2, and no scheduler ever ran it."""
    hooks = ("on_success: 'echo begun >> begun.txt; [ $(wc -l < begun.txt) -gt 1 ] || sleep 60; "
             "echo \"$HETFLOW_SLOT $HETFLOW_STATUS\" >> hooks.txt'\n")
    m = write(tmp_path, "hooked", 'cron: "* * * * * *"\nmax_active: skip\n' + hooks)
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    with open(log, "w") as f:
        proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "schedule", "serve", m, "--runs-dir",
                                 str(runs), "--log-format", "json", "--poll", "0.5"], stdout=f, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "begun.txt").exists(), 60, "the hook to begin")
        os.killpg(proc.pid, sig)  # as a terminal's Ctrl-C, or `kill -TERM -- -PGID`, reaches the whole group
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    wait_detached(runs)
    slot = next(e["slot"] for e in events(log) if e.get("event") == "hook-deferred" and "ended by" in e["reason"])
    body = claims(runs)[slot]
    assert (body["state"], body["hook"], "hook_rc" in body) == ("succeeded", "pending", False)
    assert hook_lines(tmp_path) == []
    code, out, _ = cli("schedule", "run-due", m, "--now", slot, "--runs-dir", str(runs), "--log-format", "json")
    assert code == 0, out
    assert (slot, "succeeded") in hook_lines(tmp_path)
    assert (claims(runs)[slot]["hook"], claims(runs)[slot]["hook_rc"]) == ("ran", 0)


# A serve whose start (its modules, its manifests read) waits at the check of their identities until the test has
# sent its signal: the moment a signal came on a loaded machine, where serve took a second to start.
SLOW_START = """\
import os, sys, time
from hetflow.engine.cli import scheduling

checked, ready, go = scheduling._check_identities, sys.argv[1], sys.argv[2]


def waiting(files):
    open(ready, "w").close()
    while not os.path.exists(go):
        time.sleep(0.01)
    checked(files)


scheduling._check_identities = waiting
sys.argv = ["hetflow", *sys.argv[3:]]
from hetflow.engine.cli.main import entry

entry()
"""


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_while_serve_starts_stops_it_as_one_while_it_serves(tmp_path, sig):
    """SIGTERM in serve's first second (its imports, its manifests read) killed it by the default action (exit
    -15; SIGINT exit 130 'cancelled'), where a stop once it serves ends it with 0: now it stops having claimed
    nothing."""
    m = write(tmp_path, "every2", 'cron: "*/2 * * * * *"\n')
    runs, ready, go = tmp_path / "runs", tmp_path / "ready", tmp_path / "go"
    (tmp_path / "start.py").write_text(SLOW_START)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "start.py"), str(ready), str(go), "schedule", "serve", m,
                             "--runs-dir", str(runs), "--log-format", "json", "--poll", "0.5"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_for(ready.exists, 60, "serve to start")
        proc.send_signal(getattr(signal, sig))
        go.touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, (out, err)
    said = [json.loads(line)["event"] for line in out.splitlines()]
    assert said[0] == "serving" and said[-1] == "stopped" and "started" not in said, said
    assert "Traceback" not in err and not claims(runs), err


# --- a stop signal while serve starts -------------------------------------------------------------

_SIGNAL_WHILE_LOADING = """
import os, signal, sys

sent = getattr(signal, sys.argv[1])


class Hook:
    # the signal comes as the command line's modules begin to load, long before serve's own handlers exist
    def find_spec(self, name, path=None, target=None):
        if name == "hetflow.engine.cli.main":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), sent)
        return None

sys.meta_path.insert(0, Hook())
sys.argv = ["hetflow", *sys.argv[2:]]
from hetflow._start import entry
entry()
"""


@pytest.mark.parametrize("signame", ["SIGTERM", "SIGINT", "SIGHUP"])
def test_a_stop_signal_while_the_console_script_loads_stops_serve_cleanly(tmp_path, signame):
    """The console script's serve was killed by the signal's default action (-15, -1) or printed the traceback
    of the import a Ctrl-C cut short, where a stop once it was up ends it with 0; it now starts, claims nothing
    and stops."""
    m = write(tmp_path, "early", 'cron: "* * * * *"\n')
    runs = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-c", _SIGNAL_WHILE_LOADING, signame, "schedule", "serve", m,
                           "--runs-dir", str(runs), "--log-format", "json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    assert [json.loads(line)["event"] for line in proc.stdout.splitlines()] == ["serving", "stopped"], proc.stdout
    assert "Traceback" not in proc.stderr
    assert not (runs / ".schedule").exists()


# --- a queued slot of a manifest that changed ----------------------------------------------------


def test_a_queued_slot_waits_while_its_manifest_is_invalid_and_is_given_back_when_it_is_gone(tmp_path):
    """serve paused a manifest that stopped validating but still started its queued slots: each run failed as bad
    input (exit 2) and ran on_failure, for slots the schedule never ran. Now they wait until it is fixed; one whose
    file is removed is given back."""
    from hetflow.engine.batch.serve import Server

    m = write(tmp_path, "paused", 'cron: "0 * * * *"\nmax_active: queue\n' + HOOKS)
    text = Path(m).read_text()
    runs = tmp_path / "runs"
    entry = sched.load_entry(m)
    seen = []
    clock = [sched.parse_instant("2026-06-01T10:00:30Z")]
    server = Server([m], str(runs), lambda event, fields: seen.append((event, dict(fields))), clock=lambda: clock[0])
    claim = runs / ".schedule" / "paused" / "20260601T100000Z.json"
    with RunLock(lock_path(str(runs), m, "paused", entry.params), manifest="paused"):
        server.scan()
        server.tick()  # a run by hand holds the lock: the slot queues
        assert [e for e, _ in seen][-1] == "queued" and json.loads(claim.read_text())["state"] == "queued"
        Path(m).write_text(text + "broken: [\n")
        server.scan()
        assert seen[-1][0] == "invalid"
    for _ in range(3):  # the run by hand has ended: the slot would start, were its manifest valid
        server.tick()
    assert "started" not in [e for e, _ in seen] and json.loads(claim.read_text())["state"] == "queued"
    assert not (tmp_path / "hooks.txt").exists()
    Path(m).write_text(text)
    server.scan()
    server.tick()
    assert [e for e, _ in seen][-2:] == ["reloaded", "started"], seen
    server.running[0].process.wait(timeout=120)
    while server.running or server.concluders:
        server.tick()
        server._concluded()
    assert json.loads(claim.read_text())["state"] == "succeeded"
    assert hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]
    # the next slot queues behind a run by hand, and its file goes: the slot is given back, not failed
    clock[0] = sched.parse_instant("2026-06-01T11:00:30Z")
    with RunLock(lock_path(str(runs), m, "paused", entry.params), manifest="paused"):
        server.tick()
        assert seen[-1][0] == "queued"
        os.remove(m)
        server.scan()
        server.tick()
    assert [e for e, _ in seen][-2:] == ["removed", "unqueued"] and seen[-1][1]["reason"] == "its manifest file is gone"
    assert (runs / ".schedule" / "paused" / "20260601T110000Z.returned").exists()
    assert not server.queued and hook_lines(tmp_path) == [("2026-06-01T10:00:00Z", "succeeded")]
