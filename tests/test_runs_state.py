"""The runs directory tells the truth: a killed process reads ``died``, names mean one thing, modes follow the umask.

The killed runs are real ``hetflow run`` processes, stopped with SIGKILL
while their record says ``running``: nothing in them gets to write again,
so whatever reads ``died`` afterwards was told by the owner the record
names.
"""

import io
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hetflow
from hetflow.engine.store import owner
from hetflow.engine.store.cache import Cache
from hetflow.engine.cli import main
from hetflow.engine.store.records import write_json_atomic
from hetflow.engine.store.runs import status_of

# An op that holds its partition for as long as a file exists: a run that is surely running when it is killed,
# and that a resume, after the file is gone, finishes at once.
HOLD_OP = """\
import os
import time

from hetflow import op


@op("t.hold")
def hold(xp, x, *, path: str):
    while os.path.exists(path):
        time.sleep(0.02)
    return x
"""

BODY = """\
version: 1
name: held
plugins: [hold_ops.py]
params: {k: 1}
MATRIXexecutors: {a: {vendor: cpu}, h: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [3], value: "${k}"}, executor: a}
  y: {op: t.hold, inputs: [x], args: {path: HOLD}, executor: h}
outputs: {y: y}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def held_manifest(folder: Path, matrix: str = "") -> tuple[str, Path]:
    hold = folder / "hold"
    hold.write_text("")
    (folder / "hold_ops.py").write_text(HOLD_OP)
    path = folder / "held.yaml"
    path.write_text(BODY.replace("MATRIX", matrix).replace("HOLD", json.dumps(str(hold))))
    return str(path), hold


def wait_for(what, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def running_record(runs: Path) -> dict | None:
    for path in runs.glob("*/record.json"):
        try:
            record = json.loads(path.read_text())
        except ValueError:
            continue
        if record.get("status") == "running" and record.get("owner"):
            return record
    return None


def start_and_kill(argv: list[str], runs: Path, ready=None) -> dict:
    """Start ``hetflow ARGV``; SIGKILL it once a run record says running (and ``ready()``); the record."""
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", *argv, "--quiet"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        record = wait_for(lambda: running_record(runs) if ready is None or ready() else None)
        os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=30) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
    assert record["owner"]["pid"] == proc.pid
    return record


def test_a_killed_run_reads_died_everywhere_is_resumable_and_gc_removes_what_it_left(tmp_path):
    path, hold = held_manifest(tmp_path)
    runs = tmp_path / "runs"
    cache = Cache(str(runs / ".cache"))
    record = start_and_kill(["run", path, "--runs-dir", str(runs)], runs, ready=lambda: any(cache.keys()))
    run_id = record["run_id"]
    assert json.loads((runs / run_id / "record.json").read_text())["status"] == "running"  # on disk, unchanged

    code, out, _ = cli("runs", "--runs-dir", str(runs), "--json")
    assert code == 0 and [(r["id"], r["status"]) for r in json.loads(out)] == [(run_id, "died")]
    _, out, _ = cli("runs", "--runs-dir", str(runs), "--status", "died", "--json")
    assert [r["id"] for r in json.loads(out)] == [run_id]
    _, out, _ = cli("runs", "--runs-dir", str(runs), "--status", "running", "--json")
    assert json.loads(out) == []
    code, out, _ = cli("runs", "--runs-dir", str(runs), "show", run_id[-4:])
    assert code == 0 and out.startswith(f"run {run_id}: died  manifest held")
    assert "duration -  digest" in out and "None" not in out
    assert f"died: its process (pid {record['owner']['pid']} on {record['owner']['host']}) ended without writing" in out
    assert f"resume with: hetflow run {path} --resume {run_id}" in out
    assert hetflow.open_run(run_id, runs_dir=str(runs)).status == "died"
    _, out, _ = cli("runs", "--runs-dir", str(runs), "table", run_id, "--format", "json")
    assert [r["status"] for r in json.loads(out)["rows"]] == ["died"]
    code, _, _ = cli("report", "latest", "--runs-dir", str(runs), "-o", str(tmp_path / "r.html"))
    assert code == 0 and '<span class="badge status-died">died</span>' in (tmp_path / "r.html").read_text()

    # the killed process never released its lock: the file is left, held by no one
    locks = list((runs / ".locks").iterdir())
    assert len(locks) == 1
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0", "--dry-run")
    assert "would remove 1 cache entries: no kept run uses them" in out
    assert f"would remove run {run_id}  held  died  started {record['started_at']}: beyond the newest 0 of held" in out
    assert f"would remove stale lock .locks/{locks[0].name}: no process holds it" in out
    assert locks[0].exists() and (runs / run_id).is_dir()

    # a died run kept by gc keeps the cache entries it stored, though its record does not name them yet
    (stored,) = cache.keys()
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    assert json.loads(out)["removed_cache_entries"] == 0 and list(cache.keys()) == [stored]

    # --resume takes a died run: the lock is taken over, the run finishes in its own folder, what finished is reused
    hold.unlink()
    code, out, err = cli("run", path, "--runs-dir", str(runs), "--resume", run_id, "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["run_id"] == run_id and len(result["cache_hits"]) == 1
    assert hetflow.open_run("latest", runs_dir=str(runs)).status == "succeeded"
    assert list((runs / ".locks").iterdir()) == []

    hold.write_text("")
    second = start_and_kill(["run", path, "--runs-dir", str(runs), "-p", "k=2"], runs)
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    result = json.loads(out)
    assert code == 0 and result["removed_runs"] == [run_id] and result["kept_runs"] == [second["run_id"]]
    assert len(result["removed_locks"]) == 1 and list((runs / ".locks").iterdir()) == []
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0", "--json")
    assert json.loads(out)["removed"][0]["status"] == "died" and not (runs / second["run_id"]).exists()
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == []


def test_a_killed_sweep_and_its_running_point_read_died_and_resume_latest_continues_the_sweep(tmp_path):
    path, hold = held_manifest(tmp_path, "matrix: {k: [1, 2]}\n")
    runs = tmp_path / "runs"

    def point_named() -> bool:  # the sweep names the run of its running point
        summary = next(runs.glob("*/sweep.json"), None)
        return summary is not None and bool(json.loads(summary.read_text())["points"][0]["run_id"])

    record = start_and_kill(["run", path, "--runs-dir", str(runs)], runs, ready=point_named)
    sweep_id = next(runs.glob("*/sweep.json")).parent.name
    assert json.loads((runs / sweep_id / "sweep.json").read_text())["status"] == "running"

    code, out, _ = cli("runs", "--runs-dir", str(runs), "show", sweep_id)
    assert code == 0 and out.startswith(f"sweep {sweep_id}: died  manifest held")
    assert f"  held[k=1]  died       {record['run_id']}" in out and "  held[k=2]  pending    -" in out
    assert f"resume with: hetflow run {path} --resume {sweep_id}" in out
    _, out, _ = cli("runs", "--runs-dir", str(runs), "--json")
    assert {r["id"]: r["status"] for r in json.loads(out)} == {sweep_id: "died", record["run_id"]: "died"}
    _, out, _ = cli("runs", "--runs-dir", str(runs), "table", "latest", "--format", "json")
    assert [r["status"] for r in json.loads(out)["rows"]] == ["died", "pending"]
    from hetflow.engine.results import Sweep

    assert Sweep(runs / sweep_id).status == "died"

    # latest, where a sweep is taken, is the sweep of the newest run: the sweep resumes, its point continues its run
    hold.unlink()
    code, out, err = cli("run", path, "--runs-dir", str(runs), "--resume", "latest", "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    assert result["sweep_id"] == sweep_id and [p["status"] for p in result["points"]] == ["succeeded", "succeeded"]
    assert result["points"][0]["run_id"] == record["run_id"]


def test_a_record_whose_pid_was_reused_reads_died_and_one_whose_process_lives_is_never_collected(tmp_path):
    runs = tmp_path / "runs"
    me = owner.current()
    if me["start_ticks"] is None:
        pytest.skip("no /proc/PID/stat here: a process's start time cannot be read")
    cases = {"reused": {**me, "start_ticks": me["start_ticks"] + 1},  # this pid, another process's start
             "live": me,
             "legacy-dead": None,  # a record older than `owner`: its host's pid decides
             "legacy-live": None}
    hosts = {"legacy-dead": {"hostname": me["host"], "pid": 2**30},
             "legacy-live": {"hostname": me["host"], "pid": os.getpid()}}
    for i, (name, who) in enumerate(cases.items()):
        run_id = f"20260101T00000{i}Z-{name}-0123abcd-000{i}"
        (runs / run_id).mkdir(parents=True)
        record = {"run_id": run_id, "status": "running", "started_at": f"2026-01-01T00:00:0{i}.000Z",
                  "manifest": {"name": name, "file": "/x.yaml", "digest": "sha256:0"}, "host": hosts.get(name)}
        if who is not None:
            record["owner"] = who
        write_json_atomic(str(runs / run_id / "record.json"), record)
    _, out, _ = cli("runs", "--runs-dir", str(runs), "--json")
    assert {r["manifest"]: r["status"] for r in json.loads(out)} == {
        "reused": "died", "live": "running", "legacy-dead": "died", "legacy-live": "running"}
    assert status_of({"status": "succeeded", "owner": cases["reused"]}) == "succeeded"
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0")
    assert code == 0
    assert "removed run 20260101T000000Z-reused-0123abcd-0000  reused  died" in out
    live = "20260101T000001Z-live-0123abcd-0001"
    assert (f"kept run {live}  live  started 2026-01-01T00:00:01.000Z: beyond the newest 0 of live, but run {live} "
            f"is still running (pid {os.getpid()} on {me['host']})") in out
    assert sorted(p.name.split("-")[1] for p in runs.iterdir()) == ["legacy", "live"]  # legacy-live and live


def test_an_owner_that_ended_and_waits_to_be_reaped_is_dead(tmp_path):
    # an orphan is reaped by init, which in a container may do it late or never: until then it is a zombie,
    # whose pid answers kill(0) and whose /proc entry stays
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    who = {**owner.current(), "pid": child.pid, "start_ticks": owner.start_ticks(child.pid)}
    if who["start_ticks"] is None:
        child.wait()
        pytest.skip("no /proc/PID/stat here: a process's state cannot be read")
    deadline = time.monotonic() + 30
    while Path(f"/proc/{child.pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0] != b"Z":
        assert time.monotonic() < deadline, "the child never ended"
        time.sleep(0.01)
    try:
        os.kill(child.pid, 0)  # still there, not reaped
        assert owner.alive(who) is False
        assert status_of({"status": "running", "owner": who}) == "died"
    finally:
        child.wait()
    assert owner.alive(who) is False


def run_cli(tmp_path: Path, name: str, text: str, *more: str) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json", *more)
    assert code == 0, err
    result = json.loads(out)
    return result.get("run_id") or result["sweep_id"]


SMALL = """\
version: 1
name: NAME
params: {k: 1}
MATRIXexecutors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: "${k}"}}
outputs: {z: z}
"""


def test_one_rule_names_runs_in_the_cli_and_the_api(tmp_path):
    runs = str(tmp_path / "runs")
    sweep = run_cli(tmp_path, "sw", SMALL.replace("NAME", "sw").replace("MATRIX", "matrix: {k: [1, 2]}\n"))
    first = run_cli(tmp_path, "one", SMALL.replace("NAME", "one").replace("MATRIX", ""))
    code, out, _ = cli("verify", "latest", "--runs-dir", runs, "--json")
    assert code == 0
    check = json.loads(out)["rerun_id"]

    def verified(rerun: str) -> str:
        return json.loads(Path(runs, rerun, "record.json").read_text())["verifies"]

    points = [p["run_id"] for p in json.loads(Path(runs, sweep, "sweep.json").read_text())["points"]]

    # latest leaves verification runs out, so verifying latest twice verifies the same run
    code, out, _ = cli("verify", "latest", "--runs-dir", runs, "--json")
    assert code == 0 and verified(check) == verified(json.loads(out)["rerun_id"]) == first
    for ref, want in [("latest", first), ("latest-run", first), ("latest-sweep", sweep),
                      ("latest-verification", json.loads(out)["rerun_id"]), (sweep, sweep), (sweep[:-3], sweep),
                      ("sw[k=2]", points[1]), (points[0][-4:], points[0]), (points[0][-13:-2], points[0])]:
        code, text, err = cli("runs", "--runs-dir", runs, "show", ref, "--json")
        assert code == 0, (ref, err)
        got = json.loads(text)
        assert got.get("run_id", got.get("sweep_id")) == want, ref
    assert hetflow.open_run("latest", runs_dir=runs).run_id == first
    assert hetflow.open_run(points[1][-4:], runs_dir=runs).run_id == points[1]
    assert hetflow.open_run("sw[k=1]", runs_dir=runs).run_id == points[0]
    assert hetflow.open_run("latest-verification", runs_dir=runs).record["verifies"] == first

    # a prefix that several ids start with is refused, naming them; so is a sweep where a run is wanted
    code, _, err = cli("runs", "--runs-dir", runs, "show", "2")
    assert code == 2 and f"hetflow: error: '2' matches 6 ids in {runs} (" in err and "); give more of it" in err
    assert all(i in err for i in [sweep, first, *points])
    with pytest.raises(hetflow.UsageError, match=r"'2' matches 5 ids in .*; give more of it"):
        hetflow.open_run("2", runs_dir=runs)
    with pytest.raises(hetflow.UsageError, match="latest-sweep names the newest sweep; this command takes a run"):
        hetflow.open_run("latest-sweep", runs_dir=runs)
    code, _, err = cli("runs", "--runs-dir", runs, "diff", "latest", "sw[k=3]")
    assert code == 2 and "no run 'sw[k=3]'" in err
    # after a sweep, latest (where a sweep is taken) is the sweep; where a run is wanted, its newest point's run
    again = run_cli(tmp_path, "sw", SMALL.replace("NAME", "sw").replace("MATRIX", "matrix: {k: [1, 2]}\n"))
    _, text, _ = cli("runs", "--runs-dir", runs, "show", "latest", "--json")
    assert json.loads(text)["sweep_id"] == again
    newest = json.loads(Path(runs, again, "sweep.json").read_text())["points"][1]["run_id"]
    assert hetflow.open_run("latest", runs_dir=runs).run_id == newest

    # a path to a folder of the runs directory, as a shell completes it, names that folder's run or sweep
    for ref, want in [(os.path.join(runs, first), first), (os.path.join(runs, first) + os.sep, first),
                      (os.path.join(runs, sweep, "sweep.json"), sweep),
                      (os.path.relpath(os.path.join(runs, points[1], "record.json")), points[1])]:
        code, text, err = cli("runs", "--runs-dir", runs, "show", ref, "--json")
        assert code == 0, (ref, err)
        got = json.loads(text)
        assert got.get("run_id", got.get("sweep_id")) == want, ref
    code, out, _ = cli("verify", os.path.join(runs, first), "--runs-dir", runs, "--json")
    assert code == 0 and verified(json.loads(out)["rerun_id"]) == first
    assert hetflow.open_run(os.path.join(runs, points[0]) + os.sep, runs_dir=runs).run_id == points[0]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.rename(os.path.join(runs, points[0]), elsewhere / points[0])
    code, _, err = cli("verify", str(elsewhere / points[0]), "--runs-dir", runs)
    assert code == 2 and err.strip() == (f"hetflow: error: {elsewhere / points[0]} is a run of the runs directory "
                                         f"{elsewhere}, not of {runs}; pass --runs-dir {elsewhere}")
    os.rename(elsewhere / points[0], os.path.join(runs, points[0]))


@pytest.mark.parametrize("mask, file_mode, folder_mode", [(0o022, 0o644, 0o755), (0o077, 0o600, 0o700)])
def test_files_and_folders_follow_the_umask(tmp_path, mask, file_mode, folder_mode):
    path = tmp_path / "m.yaml"
    path.write_text(SMALL.replace("NAME", "m").replace("MATRIX", "matrix: {k: [1, 2]}\n"))
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--runs-dir", str(runs),
                           "--quiet"], capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(mask))
    assert done.returncode == 0, done.stderr
    files, folders = [], []
    for root, dirs, names in os.walk(runs):
        folders += [os.path.join(root, d) for d in dirs]
        files += [os.path.join(root, n) for n in names]
    kinds = {os.path.basename(f) for f in files}
    assert {"record.json", "sweep.json", "z.npy", "entry.json", "0.bin"} <= kinds
    assert {f: oct(stat.S_IMODE(os.stat(f).st_mode)) for f in files} == {f: oct(file_mode) for f in files}
    assert {d: oct(stat.S_IMODE(os.stat(d).st_mode)) for d in folders} == {d: oct(folder_mode) for d in folders}


def test_a_run_whose_record_is_damaged_or_missing_is_listed_not_hidden(tmp_path):
    from importlib.resources import files

    runs = tmp_path / "runs"
    quickstart = str(files("hetflow.examples") / "quickstart.yaml")
    made = [hetflow.run(quickstart, runs_dir=runs, params={"batch": 2}).run_id for _ in range(4)]
    (runs / made[0] / "record.json").write_text("")                    # a disk that lost it
    (runs / made[1] / "record.json").write_text('{"status": "succ')    # cut short
    other = json.loads((runs / made[3] / "record.json").read_text())  # another layout, and a NaN as json writes it
    (runs / made[3] / "record.json").write_text(json.dumps({**other, "warm_up": [{"s": float("nan")}]}, indent=4))
    old, fresh = runs / "20260101T000000Z-quickstart-00000000-0000", runs / "20260101T000000Z-quickstart-00000000-0001"
    old.mkdir()
    fresh.mkdir()
    os.utime(old, (time.time() - 3600, time.time() - 3600))  # a folder left by a run that never wrote
    out = io.StringIO()
    assert main(["runs", "--runs-dir", str(runs), "--json"], out=out, err=io.StringIO()) == 0
    rows = {r["id"]: r["status"] for r in json.loads(out.getvalue())}
    assert rows == {made[0]: "unreadable", made[1]: "unreadable", made[2]: "succeeded", made[3]: "succeeded",
                    old.name: "empty"}
    assert math.isnan(hetflow.open_run(made[3], runs_dir=runs).record["warm_up"][0]["s"])  # read back
    out = io.StringIO()
    assert main(["runs", "--runs-dir", str(runs), "--status", "unreadable"], out=out, err=io.StringIO()) == 0
    assert sorted(line.split()[0] for line in out.getvalue().splitlines()[1:]) == sorted(made[:2])


def test_a_run_whose_folder_is_removed_under_it_says_so_and_exits_5(tmp_path):
    import shutil

    manifest, hold = held_manifest(tmp_path)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", manifest, "--runs-dir", str(runs),
                             "--quiet", "--no-cache"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        record = wait_for(lambda: running_record(runs))
        shutil.rmtree(runs / record["run_id"])  # a clean-up script, or a person, while the run holds its op
        hold.unlink()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 5, err
    assert f"run {record['run_id']}: its folder" in err and "was removed while it ran" in err
    assert "Traceback" not in err and "internal error" not in err
    assert not (runs / record["run_id"]).exists()
