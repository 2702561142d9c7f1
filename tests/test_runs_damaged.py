"""What `runs show`, `runs table`, `runs` and `report` say of records and summaries that are damaged or were
written by hand: a clear error naming the file (exit 2), or what is there with the rest shown as absent; never an
internal error. And the commands they print to go on with a run are commands that work as printed."""

import io
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.engine.cli import main

SWEEP = """\
version: 1
name: sw
params: {k: 0}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: "${k}"}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def swept(tmp_path):
    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP)
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(path), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    return runs, result["sweep_id"], [p["run_id"] for p in result["points"]]


def _summary(runs: Path, sweep_id: str) -> Path:
    return runs / sweep_id / "sweep.json"


@pytest.mark.parametrize("damage, said", [
    (lambda text: text[:200], "error: not valid JSON"),  # cut short: said at the line and column where it ends
    (lambda text: "[]", ":1:1: error: expected a JSON object, found list"),
    (lambda text: "\x00\xff garbage", ": error: not a JSON file hetflow wrote: byte"),
    (lambda text: json.dumps({**json.loads(text), "points": [1, "x"]}), "its point 0 is int, not an object"),
    (lambda text: json.dumps({**json.loads(text), "points": "none"}), "its points are str, not a list"),
])
def test_a_damaged_sweep_summary_is_an_error_naming_it_in_every_command_that_shows_it(swept, tmp_path, damage, said):
    runs, sweep_id, _ = swept
    file = _summary(runs, sweep_id)
    text = damage(file.read_text())
    file.write_bytes(text.encode("latin-1") if "\xff" in text else text.encode())
    for argv in (("runs", "show", "--runs-dir", str(runs), sweep_id),
                 ("runs", "table", "--runs-dir", str(runs), sweep_id),
                 ("report", "--runs-dir", str(runs), sweep_id, "-o", str(tmp_path / "r.html"))):
        code, out, err = cli(*argv)
        assert code == 2, (argv, err)
        assert err.startswith(f"hetflow: error: {file}") and said in err, (argv, err)
        if "valid JSON" in said:
            assert re.match(rf"hetflow: error: {re.escape(str(file))}:\d+:\d+: error", err), err
        assert "internal error" not in err
    code, out, err = cli("runs", "--runs-dir", str(runs))
    assert code == 0 and sweep_id in out, err


def test_a_summary_or_record_lacking_what_hetflow_writes_is_shown_with_it_absent(swept, tmp_path):
    runs, sweep_id, points = swept
    _summary(runs, sweep_id).write_text('{"format": 1, "kind": "sweep"}')
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), sweep_id)
    assert code == 0, err
    assert out.startswith(f"sweep {sweep_id}: -  manifest - (-)  0 points over -")
    (runs / points[0] / "record.json").write_text(json.dumps(
        {"format": 2, "run_id": points[0], "status": "succeeded", "matrix_point": [1], "manifest": "m.yaml"}))
    for argv in (("runs", "show", "--runs-dir", str(runs), points[0]), ("runs", "--runs-dir", str(runs)),
                 ("runs", "gc", "--runs-dir", str(runs), "--keep", "9", "--dry-run")):
        code, out, err = cli(*argv)
        assert code == 0 and "internal error" not in err, (argv, err)
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), points[0])
    assert out.splitlines()[:3] == [f"run {points[0]}: succeeded  manifest - (-)  point -",
                                    "started -  duration -  digest -", "partitions: -, from cache: 0"]


def test_a_record_of_bytes_that_are_no_text_is_an_error_naming_it(swept, tmp_path):
    runs, _, points = swept
    record = runs / points[0] / "record.json"
    record.write_bytes(bytes(range(256)) * 8)
    code, out, err = cli("report", "--runs-dir", str(runs), points[0], "-o", str(tmp_path / "r.html"))
    assert code == 2 and err.startswith(f"hetflow: error: {record}: error: not a JSON file hetflow wrote"), err


def test_ages_beyond_the_clocks_first_day_are_that_day(swept):
    runs, sweep_id, points = swept
    code, out, err = cli("runs", "--runs-dir", str(runs), "--since", "999999999999d", "--json")
    assert code == 0 and {r["id"] for r in json.loads(out)} == {sweep_id, *points}, err
    code, out, err = cli("runs", "gc", "--runs-dir", str(runs), "--older-than", "999999999999d", "--json")
    assert code == 0 and json.loads(out)["removed_runs"] == [], err
    code, out, err = cli("runs", "gc", "--runs-dir", str(runs), "--older-than", "2099-01-01", "--dry-run")
    assert code == 0 and "started before 2099-01-01T00:00:00.000Z\n" in out, out  # a date, not an age "ago"


SLOW_OP = """\
import time

from hetflow import op


@op("d.wait")
def wait(xp, x, *, seconds: float):
    time.sleep(seconds)
    return x
"""

SLOW = """\
version: 1
name: slow
plugins: [slow_ops.py]
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [2], value: 1}, executor: a}
  w: {op: d.wait, inputs: [x], args: {seconds: 2}, executor: b}
outputs: {w: w}
"""


def test_the_resume_command_runs_show_prints_for_a_died_run_works_as_printed(tmp_path):
    (tmp_path / "slow_ops.py").write_text(SLOW_OP)
    (tmp_path / "slow.yaml").write_text(SLOW)
    runs = tmp_path / "elsewhere"
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", "slow.yaml", "--runs-dir", str(runs),
                             "--log-format", "json"], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stderr:  # killed once the sleeping stage has begun: the run's record says running
            if '"partition"' in line and '"started"' in line and '"b"' in line:
                break
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait(30)
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), "latest")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("died:")]
    command = line.split("resume with: ")[1]
    assert command.endswith(f"--runs-dir {runs}")
    # the command as printed, from where the user is, finds the run and goes on with it
    done = subprocess.run(command.replace("hetflow ", f"{sys.executable} -m hetflow.engine.cli ", 1), shell=True,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "no run or sweep" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0, done.stderr


def test_a_runs_dir_that_names_a_file_is_said_to_be_one_not_listed_as_empty(tmp_path):
    file = tmp_path / "m.yaml"
    file.write_text(SWEEP)
    for argv in (("runs", "--runs-dir", str(file)), ("runs", "gc", "--runs-dir", str(file), "--keep", "1")):
        code, out, err = cli(*argv)
        assert code == 2 and out == "" and f"--runs-dir '{file}' is a file, not a folder" in err, (argv, err)


def test_a_record_or_summary_of_a_newer_format_is_shown_with_a_note_saying_so(swept):
    runs, sweep_id, points = swept
    record = runs / points[0] / "record.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "format": 99}))
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), points[0])
    assert code == 0 and "note: this record is of format 99, written by a newer hetflow" in out, err
    summary = _summary(runs, sweep_id)
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "format": 7}))
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), sweep_id)
    assert code == 0 and "note: this summary is of format 7" in out, err


@pytest.mark.parametrize("edit, said", [
    ({"data": 5}, "its 'data' is 5, where a run record holds an object"),
    (lambda r: r["manifest"].update(file=7), "its 'manifest.file' is 7, where a run record holds a string or null"),
    (lambda r: r["attempts"][0].update(duration_s="x"),
     "its 'attempts[0].duration_s' is \"x\", where a run record holds a number or null"),
    (lambda r: r["outputs"]["z"].update(dtype=7), "its 'outputs.z.dtype' is 7, where a run record holds a string or null"),
    (lambda r: r["plan"].update(nodes="x"), "its 'plan.nodes' is \"x\", where a run record holds an object or null"),
    # deeper: what the report and diff read (internal errors, exit 3, before)
    (lambda r: r["plan"]["nodes"].update(z=None), "its 'plan.nodes.z' is null, where a run record holds an object"),
    (lambda r: r["tasks"][0].update(offset_s="x"),
     "its 'tasks[0].offset_s' is \"x\", where a run record holds a number or null"),
    (lambda r: r["tasks"][0].update(nodes=5), "its 'tasks[0].nodes' is 5, where a run record holds a list or null"),
    (lambda r: r["inventory"][0].update(devices=5),
     "its 'inventory[0].devices' is 5, where a run record holds a list or null"),
    (lambda r: r["plan"]["executors"].update({next(iter(r["plan"]["executors"])): 5}),
     "its 'plan.executors.h' is 5, where a run record holds an object"),
    (lambda r: r["scheduler"].update(workers=[None]),
     "its 'scheduler.workers[0]' is null, where a run record holds an object"),
    (lambda r: r["cache"].update(hits=5), "its 'cache.hits' is 5, where a run record holds a list or null"),
    (lambda r: r.update(cancelled={"signal": "SIGINT", "finished": [1]}),
     "its 'cancelled.finished[0]' is 1, where a run record holds a string"),
    ({"params": [1]}, "its 'params' is [1], where a run record holds an object"),
    ({"manifest": None}, "its 'manifest' is null, where a run record holds an object"),
])
def test_a_record_whose_keys_hold_what_no_record_does_is_an_error_for_the_commands_that_work_from_it(
        swept, tmp_path, edit, said):
    """verify, diff and --resume of a record edited by hand (valid JSON, a key of another kind) were internal errors
    (exit 3); report too. The commands that show a record still show what is there."""
    runs, _, points = swept
    record = runs / points[0] / "record.json"
    data = {**json.loads(record.read_text()), "status": "failed"}
    if callable(edit):  # a field inside a key (its --resume ran every partition, then failed, left running)
        edit(data)
    else:
        data.update(edit)
    record.write_text(json.dumps(data))
    manifest = str(tmp_path / "sw.yaml")
    for argv in (("verify", "--runs-dir", str(runs), points[0]), ("runs", "diff", "--runs-dir", str(runs), points[0],
                 points[1]), ("report", "--runs-dir", str(runs), points[0], "-o", str(tmp_path / "r.html")),
                 ("run", manifest, "--runs-dir", str(runs), "--resume", points[0])):
        code, out, err = cli(*argv)
        assert (code, err) == (2, f"hetflow: error: {record}: error: not a run record hetflow wrote: {said}\n"), argv
    code, out, err = cli("runs", "show", "--runs-dir", str(runs), points[0])
    assert code == 0 and out.startswith(f"run {points[0]}: failed"), err


@pytest.mark.parametrize("where, key, value", [
    ("record", "started_at", 1765072936.857), ("record", "duration_s", "long"), ("record", "error", "boom"),
    ("record", "verifies", [1]), ("record", "outputs", {"y": 1}), ("record", "tasks", [1, 2]),
    ("summary", "started_at", 17), ("summary", "name", [1, 2]), ("summary", "points", 17),
    ("point", "name", [1, 2]), ("point", "status", None), ("point", "run_id", {"x": 1}), ("point", "values", "x"),
])
def test_a_key_of_a_kind_hetflow_never_writes_is_shown_as_absent_by_every_listing(swept, tmp_path, where, key, value):
    """A record or summary of a later format, or edited by hand, with one key of another kind: the listing, show,
    table and gc failed (exit 3) on it; they show it as absent, as they show a key that is not there."""
    runs, sweep_id, points = swept
    file = runs / points[0] / "record.json" if where == "record" else _summary(runs, sweep_id)
    data = json.loads(file.read_text())
    if where == "point":
        data["points"][0][key] = value
    else:
        data[key] = value
    file.write_text(json.dumps(data))
    shown = points[0] if where == "record" else sweep_id
    for argv in (("runs",), ("runs", "--json"), ("runs", "show", shown), ("runs", "show", shown, "--json"),
                 ("runs", "table", sweep_id), ("runs", "gc", "--keep", "0", "--dry-run")):
        code, out, err = cli(*argv, "--runs-dir", str(runs))
        # a summary without a list of points is refused by what shows it, naming the file (exit 2)
        refused = key == "points" and argv[1:2] in (("show",), ("table",))
        assert (code == 2 and "its points are int" in err) if refused else code == 0, (argv, err)
        assert "internal error" not in err, (argv, err)
        if "--json" in argv and not refused:
            json.loads(out)


def test_a_runs_directory_or_a_run_folder_this_user_cannot_read_is_said_so(swept, monkeypatch):
    runs, sweep_id, points = swept
    import shutil

    theirs = "20261101T000000Z-sw-00000000-0000"
    shutil.copytree(runs / points[0], runs / theirs)
    real_listdir, real_access = os.listdir, os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if str(p).endswith(theirs) else real_access(p, mode, **k))
    # a folder of another user's run (a umask of 077): listed as such, never "empty", and gc leaves it to its owner
    code, out, err = cli("runs", "--runs-dir", str(runs), "--json")
    assert code == 0 and {r["id"]: r["status"] for r in json.loads(out)}[theirs] == "forbidden", err
    code, out, err = cli("runs", "show", theirs, "--runs-dir", str(runs))
    assert (code, err) == (2, f"hetflow: error: {runs / theirs}: the run's folder cannot be read by this user\n")
    code, out, err = cli("runs", "gc", "--older-than", "0s", "--runs-dir", str(runs), "--json")
    assert code == 0 and (runs / theirs).is_dir() and not (runs / sweep_id).exists(), err
    monkeypatch.setattr(os, "access", real_access)

    def listdir(path="."):
        if os.path.abspath(path) == os.path.abspath(runs):
            raise PermissionError(13, "Permission denied", str(path))
        return real_listdir(path)

    monkeypatch.setattr(os, "listdir", listdir)
    for argv in (("runs",), ("runs", "gc", "--keep", "1")):
        code, out, err = cli(*argv, "--runs-dir", str(runs))
        assert (code, err) == (5, f"hetflow: error: {runs}: the runs directory cannot be read here: Permission denied\n")


def test_diff_never_calls_an_output_whose_file_is_damaged_or_gone_the_same(tmp_path):
    """The two records' digests agreed, so runs diff said "same", with a's statistics, of an output whose file in b
    was garbage or deleted; runs show said both were damaged."""
    path = tmp_path / "one.yaml"
    path.write_text(SWEEP.replace("matrix: {k: [1, 2]}\n", ""))
    made = []
    for _ in range(2):
        code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json")
        assert code == 0, err
        made.append(json.loads(out)["run_id"])
    runs = tmp_path / "runs"
    code, out, err = cli("runs", "diff", *made, "--runs-dir", str(runs))
    assert code == 0 and "  z: same  " in out, err
    (runs / made[1] / "z.npy").write_bytes(b"garbage")
    code, out, err = cli("runs", "diff", *made, "--runs-dir", str(runs))
    assert code == 0 and "  z: not compared: a file of it is damaged or gone\n" in out, out
    assert f"    b: 2 fp32 ({runs / made[1] / 'z.npy'} cannot be read" in out, out
    (runs / made[1] / "z.npy").unlink()
    code, out, err = cli("runs", "diff", *made, "--runs-dir", str(runs), "--json")
    (row,) = json.loads(out)["outputs"]
    assert (row["same"], row["damaged"]) == (False, ["b"]) and "z.npy is not in" in row["b"]["missing"]


def test_runs_table_of_several_refs_takes_runs_only(swept, tmp_path):
    """A sweep among several refs was a row of status "missing" (exit 0); a run folder without its record too,
    where runs show says why it has none (exit 2)."""
    runs, sweep_id, points = swept
    code, out, err = cli("runs", "table", sweep_id, points[0], "--runs-dir", str(runs))
    assert (code, err) == (2, f"hetflow: error: {runs / sweep_id} is a sweep, not a run: runs table takes one sweep "
                              "alone, or runs\n")
    (runs / points[1] / "record.json").unlink()
    code, out, err = cli("runs", "table", points[0], points[1], "--runs-dir", str(runs))
    assert code == 2 and err.startswith(f"hetflow: error: {runs / points[1]} holds no record"), err


def test_runs_table_gives_a_point_not_run_yet_the_values_its_sweep_gives_it(swept):
    runs, sweep_id, points = swept
    summary = _summary(runs, sweep_id)
    data = json.loads(summary.read_text())
    data["points"][1].update(status="pending", run_id=None, record=None, outputs={})
    summary.write_text(json.dumps(data))
    code, out, err = cli("runs", "table", sweep_id, "--runs-dir", str(runs), "--format", "json")
    rows = json.loads(out)["rows"]
    assert code == 0 and [(r["status"], r["params"]) for r in rows] == [("succeeded", {"k": 1}), ("pending", {"k": 2})]


def test_a_record_damaged_deeper_than_its_checks_look_is_bad_input_to_the_report_with_a_crash_log(
        swept, tmp_path, monkeypatch):
    from hetflow.engine import report

    runs, _, points = swept

    def trips(*args, **kwargs):
        raise TypeError("'int' object is not iterable")

    monkeypatch.setattr(report, "render", trips)
    code, out, err = cli("report", "--runs-dir", str(runs), points[0], "-o", str(tmp_path / "r.html"))
    record = runs / points[0] / "record.json"
    assert code == 2 and err.startswith(f"hetflow: error: {record}: error: it could not be drawn (TypeError: "), err
    log = err.split("traceback in ")[1].split(")")[0]
    assert "not iterable" in Path(log).read_text() and not (tmp_path / "r.html").exists()
