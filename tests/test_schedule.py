"""Scheduled runs: fire times, run-due's once-only slots, catch-up, and a real ``serve``."""

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.batch import schedule as sched
from hetflow.engine.cli import main
from hetflow.engine.store.locks import RunLock, lock_path
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, loads

BODY = """\
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
outputs: {x: x}
"""


# A run that validates and then fails: a stage cannot finish within its timeout (a missing load file is bad input).
FAILS_AT_RUN_TIME = ("{op: matmul, inputs: [w, w], timeout: 0.000001}\n"
                     "  w: {op: random.normal, args: {shape: [1024, 1024], seed: 1}}")


def write(folder: Path, name: str, schedule: str, body: str = BODY, params: str = "{n: 4}") -> str:
    text = f"version: 1\nname: {name}\nparams: {params}\nschedule:\n{textwrap.indent(textwrap.dedent(schedule), '  ')}{body}"
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return str(path)


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def records(runs: Path) -> list[dict]:
    found = []
    for rec in sorted(runs.glob("*/record.json")):
        found.append(json.loads(rec.read_text()))
    return found


def at(text: str):
    return sched.parse_instant(text)


# --- fire times ---------------------------------------------------------------------------------


def test_month_ends_with_last_day_of_month():
    s = sched.Schedule("30 23 L * *", "UTC", False, "skip", {})
    got = [sched.slot_id(t) for t in s.after(at("2028-01-31T23:30:00Z"), 3)]
    assert got == ["2028-02-29T23:30:00Z", "2028-03-31T23:30:00Z", "2028-04-30T23:30:00Z"]  # 2028 is a leap year


def test_dst_spring_forward_and_fall_back_in_berlin():
    s = sched.Schedule("30 2 * * *", "Europe/Berlin", False, "skip", {})
    # 2026-03-29 02:30 does not exist in Berlin (clocks jump 02:00 -> 03:00): it fires at 03:00 CEST.
    spring = [sched.slot_id(t) for t in s.after(at("2026-03-27T12:00:00Z"), 3)]
    assert spring == ["2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"]
    # 2026-10-25 02:30 happens twice (CEST, then CET): it fires once.
    fall = [sched.slot_id(t) for t in s.after(at("2026-10-23T12:00:00Z"), 3)]
    assert fall == ["2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"]
    hourly = sched.Schedule("0 * * * *", "Europe/Berlin", False, "skip", {})
    # Every hour is still an hour apart in UTC across the spring gap.
    got = [sched.slot_id(t) for t in hourly.after(at("2026-03-29T00:30:00Z"), 3)]
    assert got == ["2026-03-29T01:00:00Z", "2026-03-29T02:00:00Z", "2026-03-29T03:00:00Z"]



def test_a_repeated_hour_runs_wildcard_jobs_as_any_hour_and_fixed_time_jobs_once():
    """Berlin's clocks go 03:00 CEST -> 02:00 CET on 2026-10-25 (01:00Z), so 02:00-02:59 happens twice. As in cron
    (Vixie, cronie), a job whose minute or hour field is a wildcard runs through both passes; a fixed-time one once."""
    for cron in ("*/15 * * * *", "0 * * * *", "@hourly", "30 * * * *", "0 0 * * * *"):
        s = sched.Schedule(cron, "Europe/Berlin", False, "skip", {})
        fires = s.after(at("2026-10-24T22:00:00Z"), 24)
        gaps = {(b - a).total_seconds() for a, b in zip(fires, fires[1:])}
        assert len(gaps) == 1, (cron, [sched.slot_id(t) for t in fires])
        backwards = s.latest(at("2026-10-25T04:00:00Z"), 12)
        assert {(a - b).total_seconds() for a, b in zip(backwards, backwards[1:])} == gaps, cron
    quarter = sched.Schedule("*/15 * * * *", "Europe/Berlin", False, "skip", {})
    assert [sched.slot_id(t) for t in quarter.after(at("2026-10-25T00:50:00Z"), 3)] == [
        "2026-10-25T01:00:00Z", "2026-10-25T01:15:00Z", "2026-10-25T01:30:00Z"]  # 02:00, 02:15, 02:30 CET
    # a catch-up across the repeated hour owes every quarter of it
    owed = sched.due_slots(sched.Schedule("*/15 * * * *", "Europe/Berlin", True, "skip", {}),
                           {"2026-10-25T00:45:00Z": "succeeded"}, at("2026-10-25T02:05:00Z"))
    assert [sched.slot_id(t) for t in owed] == [f"2026-10-25T0{h}:{m:02d}:00Z" for h in (1, 2) for m in (0, 15, 30, 45)
                                               if (h, m) <= (2, 0)]
    for cron in ("30 2 * * *", "30 1-3 * * *", "0,30 2 * * *"):
        s = sched.Schedule(cron, "Europe/Berlin", False, "skip", {})
        day = [t for t in s.after(at("2026-10-24T22:00:00Z"), 8) if t < at("2026-10-25T23:00:00Z")]
        local = [t.astimezone(s.tz).strftime("%H:%M") for t in day]
        assert len(local) == len(set(local)), (cron, [sched.slot_id(t) for t in day])
    # the same in New York, whose repeated hour is 01:00-01:59 (2026-11-01, 06:00Z)
    ny = sched.Schedule("*/30 * * * *", "America/New_York", False, "skip", {})
    assert [sched.slot_id(t) for t in ny.after(at("2026-11-01T05:10:00Z"), 4)] == [
        "2026-11-01T05:30:00Z", "2026-11-01T06:00:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:00:00Z"]
    assert [sched.slot_id(t) for t in sched.Schedule("30 1 * * *", "America/New_York", False, "skip", {})
            .after(at("2026-11-01T04:00:00Z"), 2)] == ["2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"]

def test_lord_howe_half_hour_fall_back_keeps_both_passes_in_order_forwards_and_backwards():
    """Lord Howe's clocks go 02:00 (+11:00) -> 01:30 (+10:30) on 2026-04-05 (15:00Z the day before), so 01:30-01:59
    happens twice. Fire times looked for forwards (schedule next, serve) and backwards (run-due's due slots) lost
    slots of one pass or the other, so a catch-up across it skipped runs and next named times run-due never ran."""
    every7 = sched.Schedule("*/7 * * * *", "Australia/Lord_Howe", True, "skip", {})
    first = [f"2026-04-04T14:{m:02d}:00Z" for m in (35, 42, 49, 56)]   # 01:35-01:56 +11:00
    second = [f"2026-04-04T15:{m:02d}:00Z" for m in (5, 12, 19, 26)]   # 01:35-01:56 +10:30
    expected = ["2026-04-04T14:28:00Z", *first, *second, "2026-04-04T15:30:00Z"]  # 01:28 +11:00, 02:00 +10:30
    for start in ("2026-04-04T14:27:00Z", "2026-04-04T13:00:00Z"):
        got = [sched.slot_id(t) for t in every7.after(at(start), 30)]
        assert got[got.index(expected[0]):][:10] == expected, start
    for now in ("2026-04-04T15:30:00Z", "2026-04-04T16:50:00Z"):
        got = [sched.slot_id(t) for t in every7.latest(at(now), 30)]
        assert got[got.index(expected[-1]):][:10] == expected[::-1], now
    owed = sched.due_slots(every7, {"2026-04-04T14:21:00Z": "succeeded"}, at("2026-04-04T15:31:00Z"))
    assert [sched.slot_id(t) for t in owed] == expected
    twice = sched.Schedule("*/20 1 * * *", "Australia/Lord_Howe", False, "skip", {})
    assert [sched.slot_id(t) for t in twice.after(at("2026-04-04T13:00:00Z"), 5)] == [
        "2026-04-04T14:00:00Z", "2026-04-04T14:20:00Z", "2026-04-04T14:40:00Z", "2026-04-04T15:10:00Z",
        "2026-04-05T14:30:00Z"]  # 01:00, 01:20, 01:40 in both passes; the next day's 01:00 (+10:30)
    # a fixed-time job fires once in the repeated half hour, and at 02:30 (+11:00) for the 02:15 the
    # spring-forward (2026-10-04, 02:00 +10:30 -> 02:30 +11:00) skips
    fixed = sched.Schedule("45 1 * * *", "Australia/Lord_Howe", False, "skip", {})
    assert [sched.slot_id(t) for t in fixed.after(at("2026-04-04T12:00:00Z"), 2)] == [
        "2026-04-04T14:45:00Z", "2026-04-05T15:15:00Z"]
    gap = sched.Schedule("15 2 * * *", "Australia/Lord_Howe", False, "skip", {})
    assert [sched.slot_id(t) for t in gap.after(at("2026-10-03T12:00:00Z"), 2)] == [
        "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"]


def test_a_scheduled_manifest_with_an_input_stage_is_refused_where_it_is_written(tmp_path):
    """No slot's run is given arrays: each would fail with bad input, a failure a day for a manifest that validated."""
    body = BODY.replace('x: {op: ones, args: {shape: ["${n}"]}}', 'x: {op: input, args: {shape: ["${n}"], dtype: fp32}}')
    m = write(tmp_path, "fed", 'cron: "0 * * * *"\n', body=body)
    line = next(i for i, text in enumerate(Path(m).read_text().splitlines(), 1) if "op: input" in text)
    for argv in (("validate", m), ("schedule", "list", m), ("schedule", "run-due", m, "--runs-dir", str(tmp_path / "runs"))):
        code, out, err = cli(*argv)
        assert code == 2, (argv, out, err)
        assert f"{m}:{line}:" in err and "stage 'x' is an input stage" in err and "op: load" in err, err
    assert not (tmp_path / "runs").exists()  # refused before a slot was claimed
    # without schedule: it runs, given its array
    plain = tmp_path / "plain.yaml"
    plain.write_text(Path(m).read_text().replace('schedule:\n  cron: "0 * * * *"\n', ""))
    np_file = tmp_path / "x.npy"
    np.save(np_file, np.ones(4, dtype=np.float32))
    code, _, err = cli("run", str(plain), "--input", f"x={np_file}", "--runs-dir", str(tmp_path / "r"), "--quiet")
    assert code == 0, err


def test_six_fields_put_seconds_first():
    s = sched.Schedule("*/20 0 12 * * *", "UTC", False, "skip", {})
    got = [sched.slot_id(t) for t in s.after(at("2026-05-01T11:59:59Z"), 4)]
    assert got == ["2026-05-01T12:00:00Z", "2026-05-01T12:00:20Z", "2026-05-01T12:00:40Z", "2026-05-02T12:00:00Z"]
    assert [sched.slot_id(t) for t in s.latest(at("2026-05-01T12:00:20Z"), 2)] == ["2026-05-01T12:00:20Z", "2026-05-01T12:00:00Z"]


def test_due_slots_first_time_catchup_and_latest_only():
    hourly = dict(cron="0 * * * *", timezone="UTC", max_active="skip", params={})
    now = at("2026-01-01T05:10:00Z")
    assert [sched.slot_id(t) for t in sched.due_slots(sched.Schedule(catchup=True, **hourly), {}, now)] == ["2026-01-01T05:00:00Z"]
    done = {"2026-01-01T02:00:00Z": "succeeded"}
    assert [sched.slot_id(t) for t in sched.due_slots(sched.Schedule(catchup=True, **hourly), done, now)] == [
        "2026-01-01T03:00:00Z", "2026-01-01T04:00:00Z", "2026-01-01T05:00:00Z"]
    assert [sched.slot_id(t) for t in sched.due_slots(sched.Schedule(catchup=False, **hourly), done, now)] == ["2026-01-01T05:00:00Z"]
    assert sched.due_slots(sched.Schedule(catchup=True, **hourly), {"2026-01-01T05:00:00Z": "failed"}, now) == []


# --- the manifest -------------------------------------------------------------------------------


def test_a_schedule_slot_that_is_no_fire_time_is_refused_before_it_is_recorded(tmp_path):
    """A run by hand with --schedule-slot 2030-01-01T00:00:07Z recorded that slot, the newest of the history: run-due
    then found nothing due until 2030 and status --check called the schedule healthy."""
    m = write(tmp_path, "hand", 'cron: "*/10 * * * *"\ntimezone: Australia/Lord_Howe\n')
    runs = tmp_path / "runs"
    code, out, err = cli("run", m, "--runs-dir", str(runs), "--schedule-slot", "2030-01-01T00:00:07Z", "--quiet")
    assert (code, out) == (2, ""), err
    assert err.strip() == ("hetflow: error: --schedule-slot 2030-01-01T00:00:07Z is not a fire time of schedule.cron "
                           "'*/10 * * * *' in Australia/Lord_Howe: the nearest are 2030-01-01T00:00:00Z and "
                           "2030-01-01T00:10:00Z")
    assert not runs.exists()
    code, out, err = cli("schedule", "run-due", m, "--runs-dir", str(runs), "--now", "2026-04-04T15:15:00Z")
    assert code == 0 and "succeeded manifest=hand slot=2026-04-04T15:10:00Z" in out, out + err
    # a slot a scheduler claimed is run though the cron was edited since
    Path(m).write_text(Path(m).read_text().replace('"*/10 * * * *"', '"0 3 * * *"'))
    code, out, err = cli("run", m, "--runs-dir", str(runs), "--schedule-slot", "2026-04-04T15:10:00Z", "--quiet")
    assert code == 0, err


def test_zone_folder_files_that_are_not_zones_are_refused_at_the_value(tmp_path):
    """"localtime" validated and meant the zone of whichever host read it (or none, where /etc/localtime is
    missing); "posixrules" and the posix/ and right/ copies loaded too, none of them an IANA name."""
    for name, hint in (("localtime", ""), ("posixrules", ""), ("right/Europe/Berlin", "; did you mean 'Europe/Berlin'?"),
                       ("posix/UTC", "; did you mean 'UTC'?"), ("utc", "; did you mean 'UTC'?")):
        bad = write(tmp_path, "zone", f'cron: "0 2 * * *"\ntimezone: "{name}"\n')
        code, out, err = cli("schedule", "list", bad, "--now", "2026-01-01T00:00:00Z")
        assert (code, out) == (2, ""), (name, out, err)
        assert err.strip() == (f"{bad}:6:13: error: unknown time zone {name!r} in schedule.timezone: give an IANA "
                               f"name such as Europe/Berlin or UTC{hint}"), name
    for name in ("US/Pacific", "EST5EDT", "Etc/GMT+5", "Asia/Kathmandu"):
        ok = write(tmp_path, "zone", f'cron: "0 2 * * *"\ntimezone: "{name}"\n')
        code, out, err = cli("schedule", "list", ok, "--now", "2026-01-01T00:00:00Z")
        assert code == 0, (name, err)
    code, out, err = cli("schedule", "list", ok, "--now", "2026-01-01T00:00:00Z", "--json", "--count", "1")
    assert json.loads(out)[0]["next"] == ["2026-01-01T20:15:00Z"]  # 02:00 at +05:45


def test_bad_cron_and_timezone_are_file_line_col_errors(tmp_path):
    bad = write(tmp_path, "bad", 'cron: "61 * * * *"\ntimezone: Europe/Berlinn\n')
    code, _, err = cli("validate", bad)
    assert code == 2
    assert f"{bad}:5:9: error: schedule.cron '61 * * * *' is not a valid cron expression" in err
    assert (f"{bad}:6:13: error: unknown time zone 'Europe/Berlinn' in schedule.timezone: give an IANA name such as "
            "Europe/Berlin or UTC; did you mean 'Europe/Berlin'?") in err
    assert "Traceback" not in err
    seven = write(tmp_path, "seven", 'cron: "0 0 0 1 1 * 2030"\n')
    code, _, err = cli("schedule", "list", seven)
    assert code == 2
    assert err.strip() == (f"{seven}:5:9: error: schedule.cron '0 0 0 1 1 * 2030' has 7 fields; a cron expression has 5 "
                           "(minute hour day-of-month month day-of-week) or 6 with seconds first")
    code, out, err2 = cli("schedule", "run-due", seven, "--runs-dir", str(tmp_path / "runs"))
    assert (code, out, err2) == (2, "", err) and not (tmp_path / "runs").exists()
    unknown = write(tmp_path, "unknown", 'cron: "@daily"\nmax_active: later\nparams: {m: 1}\n')
    code, _, err = cli("validate", unknown)
    assert code == 2
    assert f"{unknown}:6:15: error: schedule.max_active must be one of skip, queue, allow; found 'later'" in err
    assert f"{unknown}:7:12: error: schedule.params sets 'm', which is not a declared param (declared: n)" in err


def test_schedule_is_outside_the_digest():
    plain = "version: 1\nname: d\nparams: {n: 4}\n" + BODY
    with_schedule = plain.replace("params: {n: 4}\n", 'params: {n: 4}\nschedule: {cron: "0 3 * * *", params: {n: 5}}\n')
    a = compile_manifest(loads(plain, "a.yaml"))
    b = compile_manifest(loads(with_schedule, "b.yaml"))
    assert a.digest == b.digest and "schedule" not in b.resolved
    with pytest.raises(ManifestError) as e:
        compile_manifest(loads(with_schedule.replace("0 3", "0 ${n}"), "c.yaml"))
    assert str(e.value.diagnostics[0]).endswith("schedule: is not interpolated, write the expression itself")


def test_list_shows_next_fire_times(tmp_path):
    write(tmp_path, "nightly", 'cron: "0 2 * * *"\ntimezone: Europe/Berlin\n')
    (tmp_path / "plain.yaml").write_text("version: 1\nname: plain\nparams: {n: 1}\n" + BODY)
    code, out, err = cli("schedule", "list", str(tmp_path), "--now", "2026-03-28T12:00:00Z", "--count", "2")
    assert code == 0, err
    assert out.splitlines() == [
        f"nightly  {tmp_path / 'nightly.yaml'}  cron '0 2 * * *' in Europe/Berlin  catchup false  max_active skip",
        "  2026-03-29T01:00:00Z  (2026-03-29T03:00:00+02:00)",
        "  2026-03-30T00:00:00Z  (2026-03-30T02:00:00+02:00)",
    ]
    code, out, _ = cli("schedule", "list", str(tmp_path), "--now", "2026-03-28T12:00:00Z", "--json")
    assert [r["manifest"] for r in json.loads(out)] == ["nightly"]


# --- run-due ------------------------------------------------------------------------------------


def test_two_concurrent_run_due_start_a_slot_once(tmp_path):
    m = write(tmp_path, "race", 'cron: "*/5 * * * *"\n')
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", "2026-06-01T10:07:00Z",
            "--runs-dir", str(runs), "--log-format", "json"]
    procs = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    seen = [json.loads(line)["event"] for o, _ in outs for line in o.splitlines()]
    # The loser either finds the slot in the history already or loses the O_EXCL claim.
    assert seen.count("started") == 1 and seen.count("succeeded") == 1
    assert set(seen) <= {"started", "succeeded", "claimed-elsewhere"}
    assert [r["schedule"]["slot"] for r in records(runs)] == ["2026-06-01T10:05:00Z"]


def test_a_claim_is_won_once(tmp_path):
    m = write(tmp_path, "once", 'cron: "* * * * *"\n')
    entry = sched.load_entry(m)
    slot = at("2026-06-01T10:05:00Z")
    first = sched.claim(str(tmp_path / "runs"), entry, slot)
    assert first is not None and first.endswith("20260601T100500Z.json")
    assert sched.claim(str(tmp_path / "runs"), entry, slot) is None
    assert sched.history(str(tmp_path / "runs"), entry) == {"2026-06-01T10:05:00Z": "claimed"}


def test_run_due_is_idempotent_and_catches_up_after_downtime(tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write(folder, "all", 'cron: "0 * * * *"\ncatchup: true\nparams: {n: 3}\n')
    write(folder, "latest", 'cron: "0 * * * *"\ncatchup: false\n')
    runs = tmp_path / "runs"
    code, out, err = cli("schedule", "run-due", str(folder), "--now", "2026-06-01T10:20:00Z", "--runs-dir", str(runs))
    assert code == 0, out + err
    assert "started manifest=all slot=2026-06-01T10:00:00Z" in out and "succeeded manifest=all" in out
    code, out, err = cli("schedule", "run-due", str(folder), "--now", "2026-06-01T10:40:00Z", "--runs-dir", str(runs))
    assert code == 0 and out == "", out + err  # the 10:00 slot ran: nothing is due
    rec = next(r for r in records(runs) if r["manifest"]["name"] == "all")
    assert rec["status"] == "succeeded" and rec["overrides"] == {"n": 3}
    assert rec["schedule"] == {"slot": "2026-06-01T10:00:00Z", "cron": "0 * * * *", "timezone": "UTC"}
    assert rec["run_id"] in cli("runs", "--runs-dir", str(runs))[1]
    # Downtime: nothing ran at 11:00; the next invocation comes at 12:05.
    code, out, err = cli("schedule", "run-due", str(folder), "--now", "2026-06-01T12:05:00Z", "--runs-dir", str(runs))
    assert code == 0, out + err
    slots = {}
    for r in records(runs):
        slots.setdefault(r["manifest"]["name"], []).append(r["schedule"]["slot"])
    assert sorted(slots["all"]) == ["2026-06-01T10:00:00Z", "2026-06-01T11:00:00Z", "2026-06-01T12:00:00Z"]
    assert sorted(slots["latest"]) == ["2026-06-01T10:00:00Z", "2026-06-01T12:00:00Z"]


def test_skip_while_a_run_holds_the_lock(tmp_path):
    m = write(tmp_path, "busy", 'cron: "0 * * * *"\nmax_active: skip\n')
    runs = tmp_path / "runs"
    # the lock a slot's run takes: the manifest's name and its resolved params, here the defaults
    with RunLock(lock_path(str(runs), m, "busy", {"n": 4}), manifest=m):
        code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 0
    assert 'skipped manifest=busy slot=2026-06-01T10:00:00Z reason="a run of this manifest is active"' in out
    assert records(runs) == []
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:06:00Z", "--runs-dir", str(runs))
    assert out == ""  # a skipped slot is decided: never run later


def test_status_says_active_while_an_allowed_slot_runs_beside_others(tmp_path):
    m = write(tmp_path, "wide", 'cron: "0 * * * *"\nmax_active: allow\n')
    runs = str(tmp_path / "runs")

    def active() -> bool:
        code, out, _ = cli("schedule", "status", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", runs, "--json")
        assert code == 0, out
        (row,) = json.loads(out)
        return row["active"]

    assert active() is False
    # an allowed slot's run holds the lock of its own slot, with the schedule's params, not the manifest's
    with RunLock(lock_path(runs, m, "wide@20260601T100000Z", {"n": 4}), manifest=m):
        assert active() is True
        with RunLock(lock_path(runs, m, "wide@20260601T110000Z", {"n": 5}), manifest=m):
            assert active() is True
    # a run with other params is another run's, and a manifest whose name begins the same is another manifest
    with RunLock(lock_path(runs, m, "wide@20260601T100000Z", {"n": 5}), manifest=m), \
            RunLock(lock_path(runs, m, "wider@20260601T100000Z", {"n": 4}), manifest=m):
        assert active() is False


def test_failing_scheduled_run_exits_1_with_its_record(tmp_path):
    body = BODY.replace('{op: ones, args: {shape: ["${n}"]}}', FAILS_AT_RUN_TIME)
    m = write(tmp_path, "broken", 'cron: "0 * * * *"\n', body=body)
    runs = tmp_path / "runs"
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-01T10:05:00Z", "--runs-dir", str(runs))
    assert code == 1
    assert "failed manifest=broken slot=2026-06-01T10:00:00Z rc=1" in out
    (rec,) = records(runs)
    assert rec["status"] == "failed" and rec["schedule"]["slot"] == "2026-06-01T10:00:00Z"


# --- serve --------------------------------------------------------------------------------------


def serve(paths, runs: Path, log: Path) -> subprocess.Popen:
    f = open(log, "w")
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "serve", *paths, "--runs-dir", str(runs),
            "--log-format", "json", "--poll", "0.5"]
    return subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, text=True)


def events(log: Path) -> list[dict]:
    out = []
    for line in log.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    return proc.wait(timeout=15)


def wait_detached(runs: Path, timeout: float = 30) -> None:
    """Serve detaches its runs on exit; let them end before the test's folder goes."""
    pids = []
    for claim in runs.glob(".schedule/*/*.json"):
        body = json.loads(claim.read_text())
        if body.get("state") == "started":
            pids.append(body["run_pid"])

    def gone() -> bool:
        for pid in pids:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                continue
            return False
        return True

    wait_for(gone, timeout, "the detached runs")


# An op that sleeps: a run that outlasts the time between its slots on any machine, so the next slot finds it running.
SLOW_OP = "import time\n\nfrom hetflow import op\n\n\n@op('t.wait')\ndef wait(xp, x, *, seconds: float):\n    time.sleep(seconds)\n    return x\n"


def slow_body(seconds: float) -> str:
    return BODY.replace("executors:", "plugins: [slow_ops.py]\nexecutors:").replace(
        "outputs: {x: x}", f"  y: {{op: t.wait, inputs: [x], args: {{seconds: {seconds}}}}}\noutputs: {{y: y}}")


SLOW_BODY = slow_body(3)


def test_serve_fires_skips_survives_failures_reloads_and_stops_on_sigterm(tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "slow_ops.py").write_text(SLOW_OP)
    good = write(folder, "tick", 'cron: "* * * * * *"\nmax_active: skip\n', body=slow_body(1.5))
    body = BODY.replace('{op: ones, args: {shape: ["${n}"]}}', FAILS_AT_RUN_TIME)
    write(folder, "broken", 'cron: "*/3 * * * * *"\n', body=body)
    runs, log = tmp_path / "runs", tmp_path / "serve.log"
    proc = serve([str(folder)], runs, log)
    try:
        names = lambda e: [x.get("manifest") for x in events(log) if x["event"] == e]  # noqa: E731
        wait_for(lambda: names("failed").count("broken") >= 1 and names("succeeded").count("tick") >= 1, 45, "a failed and a succeeded run")
        # One-second slots, runs that wait 1.5 s, max_active skip: some slots are skipped.
        wait_for(lambda: "tick" in names("skipped"), 20, "a skipped slot")
        before = {r["run_id"] for r in records(runs)}
        Path(good).write_text(Path(good).read_text().replace("max_active: skip\n", "max_active: skip\n  params: {n: 7}\n"))
        wait_for(lambda: "tick" in names("reloaded"), 10, "the reload")
        wait_for(lambda: any(r["overrides"] == {"n": 7} and r["run_id"] not in before for r in records(runs)), 30,
                 "a run of the edited manifest")
        assert proc.poll() is None  # failures did not stop it
    finally:
        code = stop(proc)
    log_events = events(log)
    wait_detached(runs)
    assert code == 0
    assert log_events[0]["event"] == "serving" and log_events[-1]["event"] == "stopped"
    started = [e for e in log_events if e["event"] == "started" and e["manifest"] == "tick"]
    assert len(started) >= 2 and len({e["slot"] for e in started}) == len(started)
    assert "Traceback" not in log.read_text()


def test_serve_restart_catches_up_from_records(tmp_path):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    m = write(tmp_path, "every2", 'cron: "*/2 * * * * *"\ncatchup: true\nmax_active: queue\n', body=SLOW_BODY)
    runs, log1, log2 = tmp_path / "runs", tmp_path / "first.log", tmp_path / "second.log"
    first = serve([m], runs, log1)
    try:
        wait_for(lambda: any(e["event"] == "started" for e in events(log1)), 30, "a first run")
        wait_for(lambda: any(e["event"] == "queued" for e in events(log1)), 20, "a queued slot")
    finally:
        first.kill()  # no chance to clean up: the claims on disk are all that is left
        first.wait(timeout=10)
    states = {b["slot"]: b["state"] for b in (json.loads(c.read_text()) for c in runs.glob(".schedule/*/*.json"))}
    started_before = {s for s, state in states.items() if state == "started"}
    unstarted_before = sorted(s for s, state in states.items() if state in ("claimed", "queued"))
    assert started_before and unstarted_before, states
    time.sleep(3.0)  # downtime (plus the restart's own start-up): two or more slots pass with no scheduler
    second = serve([m], runs, log2)
    try:
        wait_for(lambda: len({e["slot"] for e in events(log2) if e["event"] in ("queued", "started")})
                 >= len(unstarted_before) + 2, 30, "caught-up slots")
    finally:
        code = stop(second)
    wait_detached(runs)
    assert code == 0
    caught = list(dict.fromkeys(e["slot"] for e in events(log2) if e["event"] in ("queued", "started")))
    # The slots the killed server had queued never ran: they are given back and taken again, in their turn,
    # then the ones missed while down, oldest first; none that started is taken twice.
    given_back = [e["slot"] for e in events(log2) if e["event"] == "unqueued" and e.get("detached")]
    assert sorted(given_back) == unstarted_before
    assert not set(caught) & started_before
    entry = sched.load_entry(m)
    missed = [sched.slot_id(t) for t in entry.schedule.after(sched.parse_instant(max(states)), 2)]
    assert caught[:len(unstarted_before) + 2] == unstarted_before + missed


def test_docstring_examples():
    import doctest

    result = doctest.testmod(sched)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("argv", [
    ("list", "--now", "9999-12-31T00:00:00Z"), ("status", "--now", "0001-01-01T00:00:00Z"),
    ("run-due", "--now", "9999-12-31T23:59:59Z", "--dry-run"), ("status", "--grace", "nan"),
    ("status", "--grace", "inf", "--check"), ("serve", "--poll", "nan"), ("serve", "--poll", "inf")])
def test_instants_and_durations_at_the_edges_are_bad_input_not_internal_errors(tmp_path, argv):
    """--now in year 9999 or 1 overflowed Python's dates (exit 3); --grace nan crashed and --poll nan served."""
    m = write(tmp_path, "edge", 'cron: "0 * * * *"\n')
    command, *rest = argv
    extra = [] if command == "list" else ["--runs-dir", str(tmp_path / "runs")]
    code, out, err = cli("schedule", command, m, *extra, *rest)
    assert code == 2 and err.startswith("hetflow: error: --") and "internal error" not in err, err
    assert not (tmp_path / "runs").exists()


def test_schedule_list_and_status_json_of_a_bad_manifest_print_the_one_error_object(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nname: b\nexecutors: {h: {vendor: cpu}}\nstages:\n  x: {op: onez}\noutputs: {x: x}\n"
                   "schedule: {cron: '* * * * *'}\n")
    for argv in (("list", str(bad), "--json"), ("status", str(bad), "--json", "--runs-dir", str(tmp_path / "runs"))):
        code, out, err = cli("schedule", *argv)
        data = json.loads(out)  # one object, not the empty list of the manifests that loaded
        assert (code, data["status"], data["exit_code"], data["error"]) == (2, "error", 2, "bad-input"), argv
        assert data["diagnostics"][0]["line"] == 5 and "unknown op 'onez'" in data["message"]


def test_serve_with_a_runs_directory_it_cannot_write_is_the_environments_at_once(tmp_path, monkeypatch):
    """It logged an OSError at every poll for ever; run-due exits 5 for the same folder."""
    import os as oslib

    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nexecutors: {h: {vendor: cpu}}\nstages:\n  x: {op: ones, args: {shape: [1]}}\n"
                        "outputs: {x: x}\nschedule: {cron: '* * * * *'}\n")
    ro = tmp_path / "ro"
    ro.mkdir()
    real = oslib.access
    monkeypatch.setattr(oslib, "access", lambda p, mode, **kw: False if oslib.path.abspath(p) == str(ro) else real(p, mode, **kw))
    for runs in (ro, ro / "runs"):
        code, out, err = cli("schedule", "serve", str(manifest), "--runs-dir", str(runs))
        assert code == 5 and "schedule serve could claim no slot" in err, err


def test_a_file_named_without_a_schedule_block_is_said_so_not_passed_over(tmp_path):
    """run-due and status of a manifest file with no schedule: did nothing and said nothing, exit 0."""
    path = tmp_path / "plain.yaml"
    path.write_text("version: 1\nname: plain\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                    "  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    for command in ("run-due", "status"):
        code, out, err = cli("schedule", command, str(path), "--runs-dir", str(tmp_path / "runs"))
        assert (code, out) == (2, "") and f"{path} has no schedule: block, so nothing of it is scheduled" in err, err
    assert not (tmp_path / "runs").exists()
    code, out, err = cli("schedule", "status", str(tmp_path), "--runs-dir", str(tmp_path / "runs"))
    assert (code, out) == (0, f"no scheduled manifests in {tmp_path}\n"), (out, err)


def test_a_start_that_finds_the_run_lock_taken_is_logged_queued_not_left_as_started(tmp_path):
    """Three run-due at once on one backlog: each start whose run lost the lock to another's logged ``started`` and
    then nothing, as if it had run the slot; only one process ran it. The run lock is held here the way the race
    holds it, flocked with its holder not yet written, so run-due sees no active run and its run finds the lock
    taken."""
    import fcntl

    m = write(tmp_path, "lost", 'cron: "0 * * * *"\nmax_active: queue\n')
    runs = tmp_path / "runs"
    held = lock_path(str(runs), m, "lost", {"n": 4})
    os.makedirs(os.path.dirname(held), exist_ok=True)
    fd = os.open(held, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    log = tmp_path / "run-due.log"
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", "2026-06-01T10:07:00Z",
            "--runs-dir", str(runs), "--log-format", "json"]
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 120
        while log.read_text().count('"started"') < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.close(fd)  # the lock given back: the next start runs the slot
    assert proc.wait(timeout=120) == 0, log.read_text()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    starts = [i for i, e in enumerate(events) if e["event"] == "started"]
    assert len(starts) >= 2, events
    for here, there in zip(starts, starts[1:]):
        between = [e for e in events[here + 1:there] if e["event"] == "queued"]
        assert [e["pid"] for e in between] == [events[here]["pid"]], events
        assert "found the run lock taken" in between[0]["reason"]
    assert [e["event"] for e in events[starts[-1] + 1:]] == ["succeeded"], events
    claim = json.loads((runs / ".schedule" / "lost" / "20260601T100000Z.json").read_text())
    assert claim["state"] == "succeeded"
    assert [r["schedule"]["slot"] for r in records(runs)] == ["2026-06-01T10:00:00Z"]


def test_day_of_month_and_day_of_week_both_restricted_fire_on_either_in_list_and_run_due(tmp_path):
    """`0 0 */2 * MON`: a day fires when it matches either field (the documented rule), and `schedule list` shows the
    same fire times that run-due decides on."""
    m = write(tmp_path, "either", 'cron: "0 0 */2 * MON"\n')
    code, out, err = cli("schedule", "list", m, "--now", "2026-06-01T00:00:00Z", "--count", "6", "--json")
    assert code == 0, err
    listed = json.loads(out)[0]["next"]
    # June 2026: the 3rd, 5th, 7th, 9th and 11th are odd days; the 8th is a Monday (and even)
    assert listed == ["2026-06-03T00:00:00Z", "2026-06-05T00:00:00Z", "2026-06-07T00:00:00Z", "2026-06-08T00:00:00Z",
                      "2026-06-09T00:00:00Z", "2026-06-11T00:00:00Z"]
    for slot in listed:
        code, out, err = cli("schedule", "run-due", m, "--now", slot, "--runs-dir", str(tmp_path / "runs"),
                             "--dry-run", "--log-format", "json")
        assert code == 0 and [json.loads(line)["slot"] for line in out.splitlines()] == [slot], (out, err)
    # an even day that is no Monday is no fire time: run-due at its midnight decides the slot before it
    code, out, _ = cli("schedule", "run-due", m, "--now", "2026-06-10T00:00:00Z", "--runs-dir", str(tmp_path / "runs"),
                       "--dry-run", "--log-format", "json")
    assert [json.loads(line)["slot"] for line in out.splitlines()] == ["2026-06-09T00:00:00Z"]
    doc = (Path(__file__).parents[1] / "docs" / "how-to" / "schedule.md").read_text()
    assert "`0 0 */2 * MON` on every odd day and every Monday" in " ".join(doc.split())


def test_a_downtime_longer_than_the_catch_up_says_which_fire_times_it_leaves_out(tmp_path, monkeypatch):
    """catchup: true after a downtime of more fire times than a catch-up runs (100, 2 here): the older ones were
    never run and no line said so; run-due (and its dry run) now log them, once, as missed."""
    from hetflow.engine.manifest import cron

    monkeypatch.setattr(cron, "CATCHUP_LIMIT", 2)
    m = write(tmp_path, "long", 'cron: "0 * * * *"\ncatchup: true\n')
    runs = str(tmp_path / "runs")
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T00:05:00Z", "--runs-dir", runs)[0] == 0
    later = ("schedule", "run-due", m, "--now", "2026-06-01T05:05:00Z", "--runs-dir", runs, "--log-format", "json")
    code, out, err = cli(*later, "--dry-run")
    seen = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(e["event"], e.get("slot")) for e in seen] == [
        ("would-miss", None), ("would-run", "2026-06-01T04:00:00Z"), ("would-run", "2026-06-01T05:00:00Z")], out
    assert (seen[0]["after"], seen[0]["before"]) == ("2026-06-01T00:00:00Z", "2026-06-01T04:00:00Z")
    code, out, err = cli(*later)
    seen = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and seen[0]["event"] == "missed" and "the newest 2" in seen[0]["reason"], out
    assert [e["slot"] for e in seen if e["event"] == "succeeded"] == ["2026-06-01T04:00:00Z", "2026-06-01T05:00:00Z"]
    # said once: the fire times left out are behind the newest decided slot from now on
    code, out, _ = cli(*later, "--dry-run")
    assert code == 0 and out == "", out


def test_list_count_is_bounded_and_fire_times_end_with_the_calendar_not_an_internal_error(tmp_path):
    """--count 10**20 listed for ever; a yearly schedule asked for 9000 fire times crashed at year 10000 (exit 3)."""
    m = write(tmp_path, "yearly", 'cron: "0 0 1 1 *"\n')
    for count in ("0", "10001", str(10**20)):
        code, out, err = cli("schedule", "list", m, "--count", count)
        assert (code, out) == (2, "") and f"--count must be from 1 to 10000, got {count}" in err, err
    code, out, err = cli("schedule", "list", m, "--now", "2026-06-01T00:00:00Z", "--count", "9000", "--json")
    assert code == 0, err
    listed = json.loads(out)[0]["next"]
    assert len(listed) == 9999 - 2027 + 1 and listed[0] == "2027-01-01T00:00:00Z" and listed[-1] == "9999-01-01T00:00:00Z"
    s = sched.Schedule("0 0 1 1 *", "Pacific/Kiritimati", False, "skip", {})
    from datetime import datetime, timezone

    assert [sched.slot_id(t) for t in s.after(at("8999-06-01T00:00:00Z"), 2)] == ["8999-12-31T10:00:00Z",
                                                                                   "9000-12-31T10:00:00Z"]
    assert sched.slot_id(s.after(datetime(9000, 6, 1, tzinfo=timezone.utc), 5000)[-1]) == "9998-12-31T10:00:00Z"


def test_a_backlog_whose_manifest_stops_validating_gives_its_slot_back_and_claims_no_more(tmp_path):
    """run-due read the manifest once: edited into a bad one while its backlog waited (or ran), every slot left
    started a run that failed as bad input and ran on_failure, for slots the schedule never ran. Now the slot about
    to start is given back, the rest are not claimed, and run-due exits 2 naming the problem; fixed, the file's
    next run-due takes them in turn."""
    m = write(tmp_path, "edited", 'cron: "0 * * * *"\ncatchup: true\n'
              "on_failure: 'echo \"$HETFLOW_SLOT\" >> failed.txt'\n")
    text = Path(m).read_text()
    runs = tmp_path / "runs"
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T00:05:00Z", "--runs-dir", str(runs))[0] == 0
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", m, "--now", "2026-06-01T02:05:00Z",
            "--runs-dir", str(runs), "--log-format", "json"]
    log = tmp_path / "run-due.log"
    with RunLock(lock_path(str(runs), m, "edited", {"n": 4}), manifest="edited"):  # a run by hand: the backlog waits
        with open(log, "w") as f:
            proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120
        while '"queued"' not in log.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        Path(m).write_text(text + "broken: [\n")
    _, err = proc.communicate(timeout=120)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    assert proc.returncode == 2 and f"{m}:" in err and "YAML syntax" in err, (events, err)
    assert [(e["event"], e["slot"]) for e in events] == [("queued", "2026-06-01T01:00:00Z"),
                                                         ("unqueued", "2026-06-01T01:00:00Z")], events
    assert "its manifest no longer validates" in events[-1]["reason"]
    claims = runs / ".schedule" / "edited"
    assert sorted(p.name for p in claims.iterdir() if not p.name.endswith(".log")) == [
        "20260601T000000Z.json", "20260601T010000Z.returned"]
    assert not (tmp_path / "failed.txt").exists()
    Path(m).write_text(text)
    code, out, err = cli("schedule", "run-due", m, "--now", "2026-06-01T02:05:00Z", "--runs-dir", str(runs))
    assert code == 0 and [line.split()[1:3] for line in out.splitlines() if " succeeded " in line] == [
        ["succeeded", "manifest=edited"]] * 2, out
    assert [r["schedule"]["slot"] for r in records(runs)].count("2026-06-01T01:00:00Z") == 1


def _strict(text: str):
    def refuse(word):
        raise ValueError(f"{word} is not JSON")
    return json.loads(text, parse_constant=refuse)


def test_schedule_list_and_status_json_are_json_with_an_infinite_param(tmp_path):
    """A schedule param of .inf was printed as bare Infinity, which is not JSON: jq and JSON.parse refused the
    whole list. It is the string the records spell it with, as every other --json says it."""
    m = write(tmp_path, "inf", 'cron: "0 * * * *"\nparams: {w: .inf}\n', params="{n: 4, w: 1.0}")
    code, out, err = cli("schedule", "list", m, "--json", "--count", "1")
    assert code == 0 and _strict(out)[0]["params"] == {"w": "Infinity"}, err
    code, out, err = cli("schedule", "status", m, "--json", "--runs-dir", str(tmp_path / "runs"))
    assert code == 0 and _strict(out)[0]["manifest"] == "inf", err
