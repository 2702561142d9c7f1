"""A slot given back (``SLOT.returned``) that no decision will take again is concluded as missed, in its claim, its
log line and ``schedule status``: one a catch-up's limit cuts, one older than the latest under ``catchup: false``."""

import json

import pytest

from hetflow.engine.batch import schedule as sched

from test_schedule import cli, records, write


def _given_back(runs: str, m: str, slot: str) -> None:
    """A slot claimed by a scheduler that was stopped before its run ran, as ``serve`` gives back its queued slots."""
    entry = sched.load_entry(m)
    path = sched.claim(runs, entry, sched.parse_instant(slot), state="queued")
    assert path is not None and sched.give_back(path)


@pytest.mark.parametrize("catchup", ["true", "false"])
def test_a_given_back_slot_no_decision_takes_again_is_missed_not_overdue_for_ever(tmp_path, monkeypatch, catchup):
    from hetflow.engine.manifest import cron

    monkeypatch.setattr(cron, "CATCHUP_LIMIT", 2)  # a catch-up runs the newest 2 fire times
    m = write(tmp_path, "hourly", f'cron: "0 * * * *"\ncatchup: {catchup}\n')
    runs = str(tmp_path / "runs")
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T00:05:00Z", "--runs-dir", runs)[0] == 0
    _given_back(runs, m, "2026-06-01T01:00:00Z")
    later = ("schedule", "run-due", m, "--now", "2026-06-01T04:05:00Z", "--runs-dir", runs, "--log-format", "json")
    code, out, err = cli(*later, "--dry-run")
    said = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and ("would-miss", "2026-06-01T01:00:00Z") in [(e["event"], e.get("slot")) for e in said], out
    code, out, err = cli(*later)
    said = [json.loads(line) for line in out.splitlines()]
    assert code == 0, (out, err)
    missed = [e for e in said if e["event"] == "missed" and e.get("slot") == "2026-06-01T01:00:00Z"]
    assert len(missed) == 1 and "it is never run" in missed[0]["reason"], said
    ran = ["2026-06-01T03:00:00Z", "2026-06-01T04:00:00Z"] if catchup == "true" else ["2026-06-01T04:00:00Z"]
    assert [e["slot"] for e in said if e["event"] == "succeeded"] == ran, said
    folder = tmp_path / "runs" / ".schedule" / "hourly"
    assert not list(folder.glob("*.returned"))
    body = json.loads((folder / "20260601T010000Z.json").read_text())
    assert body["state"] == "skipped" and body["missed"] is True and "never run" in body["reason"], body
    # status says nothing is overdue, and no later decision runs the slot out of its turn
    code, out, err = cli("schedule", "status", m, "--now", "2026-06-01T04:10:00Z", "--runs-dir", runs, "--check")
    assert code == 0 and "overdue" not in out, (out, err)
    code, out, err = cli("schedule", "run-due", m, "--now", "2026-06-01T04:10:00Z", "--runs-dir", runs)
    assert code == 0 and out == "", out
    assert "2026-06-01T01:00:00Z" not in [r["schedule"]["slot"] for r in records(tmp_path / "runs")]


def test_a_given_back_slot_a_decision_still_takes_is_overdue_until_it_does(tmp_path):
    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\ncatchup: true\n')
    runs = str(tmp_path / "runs")
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T00:05:00Z", "--runs-dir", runs)[0] == 0
    _given_back(runs, m, "2026-06-01T01:00:00Z")
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T01:05:00Z", "--runs-dir", runs, "--dry-run")[0] == 0
    code, out, err = cli("schedule", "status", m, "--now", "2026-06-01T01:30:00Z", "--runs-dir", runs, "--check")
    assert code == 6 and "overdue: 2026-06-01T01:00:00Z not decided" in out, (out, err)
    code, out, err = cli("schedule", "run-due", m, "--now", "2026-06-01T01:30:00Z", "--runs-dir", runs)
    assert code == 0 and "succeeded manifest=hourly slot=2026-06-01T01:00:00Z" in out, out


def test_serve_concludes_a_given_back_slot_it_passes_over_as_missed(tmp_path):
    from hetflow.engine.batch.serve import Server

    m = write(tmp_path, "hourly", 'cron: "0 * * * *"\ncatchup: false\n')
    runs = str(tmp_path / "runs")
    assert cli("schedule", "run-due", m, "--now", "2026-06-01T00:05:00Z", "--runs-dir", runs)[0] == 0
    _given_back(runs, m, "2026-06-01T01:00:00Z")
    said: list[tuple[str, dict]] = []
    server = Server([m], runs, lambda e, f: said.append((e, dict(f))), clock=lambda: sched.parse_instant(
        "2026-06-01T04:05:00Z"))
    server.scan()
    server.tick()
    for child in list(server.running):  # the latest slot, 04:00, is started: let it end and be concluded
        child.process.wait(timeout=120)
    server.reap()
    server._concluded()
    assert ("missed", "2026-06-01T01:00:00Z") in [(e, f.get("slot")) for e, f in said], said
    assert ("succeeded", "2026-06-01T04:00:00Z") in [(e, f.get("slot")) for e, f in said], said
    body = json.loads((tmp_path / "runs" / ".schedule" / "hourly" / "20260601T010000Z.json").read_text())
    assert body["state"] == "skipped" and body["missed"] is True, body
