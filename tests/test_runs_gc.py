"""runs gc: the newest N of each manifest (a sweep whole, verification runs with their run), by age, stale
locks, and a dry run that says what would go and why."""

import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from hetflow.engine.cli import main
from hetflow.engine.store.records import utc_iso, write_json_atomic

BODY = """\
version: 1
name: NAME
params: {k: 1}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: "${k}"}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run(tmp_path: Path, name: str, k: int) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(BODY.replace("NAME", name))
    code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "-p", f"k={k}", "--quiet", "--json")
    assert code == 0, err
    return json.loads(out)["run_id"]


def test_keep_counts_per_manifest(tmp_path):
    a = [run(tmp_path, "a", k) for k in (1, 2, 3)]
    b = run(tmp_path, "b", 9)
    runs = str(tmp_path / "runs")
    code, out, _ = cli("runs", "--runs-dir", runs, "gc", "--keep", "2", "--dry-run")
    assert code == 0
    assert out.splitlines()[0].startswith(f"would remove run {a[0]}  a  succeeded  started ")
    assert out.splitlines()[0].endswith(": beyond the newest 2 of a")
    assert sorted(p.name for p in Path(runs).iterdir() if not p.name.startswith(".")) == sorted(a + [b])
    code, out, _ = cli("runs", "--runs-dir", runs, "gc", "--keep", "2", "--json")
    result = json.loads(out)
    assert result["removed_runs"] == [a[0]] and sorted(result["kept_runs"]) == sorted(a[1:] + [b])
    assert result["removed_cache_entries"] == 1  # k=1's partition; the others are still used
    assert sorted(p.name for p in Path(runs).iterdir() if not p.name.startswith(".")) == sorted(a[1:] + [b])


def test_older_than_removes_by_age_and_says_so_in_a_dry_run(tmp_path):
    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    record_file = runs / old / "record.json"
    record = json.loads(record_file.read_text())
    record["started_at"] = utc_iso(time.time() - 40 * 86400)  # a run from 40 days ago
    write_json_atomic(str(record_file), record)
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "30d", "--dry-run")
    assert code == 0 and f"would remove run {old}  a  succeeded  started {record['started_at']}: started before " in out
    assert "(30d ago)" in out and "kept 1 runs; would remove 1 runs, 0 sweeps" in out and record_file.exists()
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "30d", "--keep", "1")
    assert "kept 1 runs; removed 1 runs, 0 sweeps" in out and not record_file.exists() and (runs / new).is_dir()
    code, _, err = cli("runs", "--runs-dir", str(runs), "gc")
    assert code == 2 and "runs gc needs --keep N (per manifest), --older-than AGE, or both" in err
    code, _, err = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "a month")
    assert code == 2 and "expected an age such as 30d" in err


SWEEP_BODY = """\
version: 1
name: sw
params: {k: 1, j: 0}
matrix: {j: [1, 2, 3]}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: "${k}"}}
  w: {op: full, args: {shape: [2], value: "${j}"}}
outputs: {z: z, w: w}
"""


def sweep(tmp_path: Path, *more: str) -> tuple[str, list[str]]:
    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP_BODY)
    code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json", *more)
    assert code == 0, err
    result = json.loads(out)
    return result["sweep_id"], [p["run_id"] for p in result["points"]]


def verify(tmp_path: Path, run_id: str) -> str:
    code, out, err = cli("verify", run_id, "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 0, err
    return json.loads(out)["rerun_id"]


def test_keep_counts_a_sweep_as_one_and_verification_runs_go_with_the_run_they_verify(tmp_path):
    from hetflow.engine.store.cache import Cache

    old, old_points = sweep(tmp_path, "-p", "k=7")
    a1, a2 = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    v_old, v_a1, v_a2 = verify(tmp_path, old_points[1]), verify(tmp_path, a1), verify(tmp_path, a2)
    new, new_points = sweep(tmp_path)
    v_new = verify(tmp_path, new_points[0])
    runs = tmp_path / "runs"
    records = {p.name: json.loads((p / "record.json").read_text())
               for p in runs.iterdir() if (p / "record.json").exists()}

    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--dry-run")
    assert code == 0
    lines = out.splitlines()
    started = {name: r["started_at"] for name, r in records.items()}
    started[old] = json.loads((runs / old / "sweep.json").read_text())["started_at"]
    assert lines[:7] == [
        f"would remove run {a1}  a  succeeded  started {started[a1]}: beyond the newest 1 of a",
        f"  with verification run {v_a1}",
        f"would remove sweep {old}  sw  succeeded  started {started[old]}: beyond the newest 1 of sw",
        *(f"  with its point run {p}" for p in old_points),
        f"  with verification run {v_old}",
    ]
    assert lines[7].startswith("would remove ") and lines[7].endswith(" cache entries: no kept run uses them")
    assert lines[8] == (f"kept 6 runs; would remove 6 runs, 1 sweeps, {lines[7].split()[2]} cache entries, "
                        "0 schedule claims, 0 stale locks (2 of the runs verification runs)")
    assert len(lines) == 9 and all((runs / name).is_dir() for name in records)

    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    result = json.loads(out)
    assert result["removed_sweeps"] == [old] and result["kept_sweeps"] == [new]
    assert result["removed_runs"] == [a1, v_a1, *old_points, v_old]
    assert result["removed_verifications"] == [v_a1, v_old]
    assert result["kept_runs"] == sorted([a2, v_a2, *new_points, v_new])
    assert [(u["kind"], u["id"], u["why"]) for u in result["removed"]] == [
        ("run", a1, "beyond the newest 1 of a"), ("sweep", old, "beyond the newest 1 of sw")]
    left = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))
    assert left == sorted([new, a2, v_a2, *new_points, v_new])
    # the kept sweep is whole, and every cache entry a kept run used is still there
    code, out, _ = cli("runs", "--runs-dir", str(runs), "table", new, "--format", "json")
    assert [r["status"] for r in json.loads(out)["rows"]] == ["succeeded"] * 3
    cache = set(Cache(str(runs / ".cache")).keys())
    used = {k["key"] for r in (a2, *new_points) for k in records[r]["cache"]["keys"].values() if k.get("key")}
    assert used <= cache and len(cache) == result["kept_cache_entries"]


def test_runs_leave_no_lock_files_and_gc_removes_the_stale_ones_only(tmp_path):
    from hetflow.engine.store.locks import LockHeld, RunLock, lock_path

    for k in range(5):
        run(tmp_path, "a", k)
    runs = tmp_path / "runs"
    assert list((runs / ".locks").iterdir()) == []
    stale = runs / ".locks" / "gone-0123456789ab.lock"
    stale.write_text('{"pid": 1073741824, "host": "h"}')  # what a holder killed outright leaves
    with RunLock(lock_path(str(runs), str(tmp_path / "a.yaml"), "a")) as held:
        code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "5", "--dry-run")
        assert f"would remove stale lock .locks/{stale.name}: no process holds it\n" in out and stale.exists()
        code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "5", "--json")
        assert json.loads(out)["removed_locks"] == [f".locks/{stale.name}"]
        assert [p.name for p in (runs / ".locks").iterdir()] == [os.path.basename(held.path)]
        with pytest.raises(LockHeld):
            RunLock(held.path).acquire()
    assert list((runs / ".locks").iterdir()) == []


def test_a_lock_unlinked_between_open_and_flock_is_taken_again_at_its_path(tmp_path, monkeypatch):
    from hetflow.engine.store import locks

    path = str(tmp_path / ".locks" / "m.lock")
    real_open, opened = os.open, []

    def open_then_lose(file, flags, mode=0o777):
        fd = real_open(file, flags, mode)
        if not opened:  # the holder before us releases right here: it unlinks the file we opened
            os.unlink(file)
        opened.append(fd)
        return fd

    monkeypatch.setattr(locks.os, "open", open_then_lose)
    lock = locks.RunLock(path).acquire()
    assert len(opened) == 2 and lock._fd == opened[1] and os.path.exists(path)
    monkeypatch.setattr(locks.os, "open", real_open)
    with pytest.raises(locks.LockHeld):
        locks.RunLock(path).acquire()
    lock.release()
    assert not os.path.exists(path)


def test_folders_whose_record_cannot_be_read_go_by_age_or_with_their_sweep(tmp_path):
    runs = tmp_path / "runs"
    damaged, fine = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    (runs / damaged / "record.json").write_text('{"status": "succ')  # a record cut short
    old_empty = runs / "20200101T000000Z-a-0123abcd-0001"  # a run that ended before its first write, long ago
    old_empty.mkdir()
    os.utime(old_empty, (time.time() - 3600, time.time() - 3600))
    sweep_id, points = sweep(tmp_path)
    (runs / points[0] / "record.json").unlink()  # a point's run, its record lost

    # --keep cannot place them by manifest: they stay, each with why
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0", "--json")
    result = json.loads(out)
    assert code == 0 and set(result["removed_runs"]) == {fine, *points} and result["removed_sweeps"] == [sweep_id]
    sweep_unit = next(u for u in result["removed"] if u["id"] == sweep_id)
    assert sweep_unit["damaged"] == [points[0]]
    assert {u["id"]: u["status"] for u in result["left_damaged"]} == {damaged: "unreadable", old_empty.name: "empty"}
    assert all("only --older-than removes it" in u["why"] for u in result["left_damaged"])
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) == sorted([damaged, old_empty.name])

    # an age removes the old one by the time in its id, and keeps the recent one
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "1d")
    assert code == 0 and f"removed run {old_empty.name}  -  empty  started 2020-01-01T00:00:00.000Z: it has no record;" in out
    assert f"kept run folder {damaged}" in out and "its record cannot be read, and it started after" in out
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == [damaged]


def test_what_the_file_system_will_not_remove_is_said_and_not_counted_removed(tmp_path):
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("an immutable file (chattr +i, root only) is how this test makes a file that cannot be removed")
    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    stuck = runs / old / "z.npy"
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip(f"this file system does not take chattr +i ({tmp_path})")
    try:
        code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
        result = json.loads(out)
        assert code == 5 and result["removed_runs"] == [old]
        assert result["not_removed"] == [{"path": f".gc-{old}",
                                          "error": f"{runs}/.gc-{old}/z.npy: Operation not permitted"}]
        assert err.strip() == (f"hetflow: warning: could not remove {runs}/.gc-{old}/z.npy: Operation not permitted; "
                               f".gc-{old} is left, and the next gc tries again")
        assert not (runs / old).exists() and (runs / f".gc-{old}" / "z.npy").exists()  # out of every listing
        code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1")  # tried again, and said again
        assert code == 5 and f".gc-{old} is left" in err
    finally:
        for path in (stuck, runs / f".gc-{old}" / "z.npy"):
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)
    code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1")
    assert code == 0 and err == "" and sorted(p.name for p in runs.iterdir()) == [".cache", ".locks", new]


def test_a_run_gc_cannot_move_is_left_whole_and_not_counted_removed(tmp_path):
    import shutil
    import subprocess

    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("an immutable folder (chattr +i, root only) is how this test makes a runs folder gc cannot change")
    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    before = sorted(p.name for p in (runs / old).iterdir())
    entries = sorted(p.name for p in (runs / ".cache").iterdir())
    if subprocess.run(["chattr", "+i", str(runs)], capture_output=True).returncode != 0:
        pytest.skip(f"this file system does not take chattr +i ({tmp_path})")
    try:
        code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
        result = json.loads(out)
        assert code == 5 and result["removed_runs"] == [] and result["removed"] == []
        assert sorted(result["kept_runs"]) == sorted([old, new])
        assert result["not_removed"] == [{"path": old, "error": f"{runs}/{old}: Operation not permitted"}]
        assert err.strip() == (f"hetflow: warning: could not remove {runs}/{old}: Operation not permitted; {old} is "
                               "left, and the next gc tries again")
        # nothing of it went: its record, its outputs, and the cache entries it names
        assert sorted(p.name for p in (runs / old).iterdir()) == before
        assert sorted(p.name for p in (runs / ".cache").iterdir()) == entries
        code, out, _ = cli("runs", "--runs-dir", str(runs), "--json")
        assert code == 0 and {r["id"]: r["status"] for r in json.loads(out)} == {old: "succeeded", new: "succeeded"}
    finally:
        subprocess.run(["chattr", "-i", str(runs)], capture_output=True)
    code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    assert code == 0 and json.loads(out)["removed_runs"] == [old] and not (runs / old).exists()


def test_a_sweep_whose_summary_is_damaged_keeps_its_points_runs_with_it(tmp_path):
    runs = tmp_path / "runs"
    sweep_id, points = sweep(tmp_path)
    (runs / sweep_id / "sweep.json").write_text('{"format": 1, "points": [')  # cut short
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0", "--json")
    result = json.loads(out)
    # --keep cannot place a sweep it cannot read, nor then its points: all of them stay, together
    assert code == 0 and result["removed_runs"] == [] and result["removed"] == []
    (left,) = result["left_damaged"]
    assert left["id"] == sweep_id and sorted(left["runs"]) == sorted(points)
    assert all((runs / p / "record.json").exists() for p in points)
    # an age removes the sweep's folder and its points' runs at once
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "0s", "--json")
    result = json.loads(out)
    assert code == 0 and sorted(result["removed_runs"]) == sorted(points)
    assert sorted(p.name for p in runs.iterdir() if not p.name.startswith(".")) == []


def test_a_run_being_resumed_is_not_removed_while_its_record_still_says_it_died(tmp_path):
    from hetflow.engine.store.locks import RunLock, lock_path

    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    record = json.loads((runs / old / "record.json").read_text())
    # a --resume's first moment: it holds the run's lock, naming the run; its record is the last attempt's
    with RunLock(lock_path(str(runs), record["manifest"]["file"], "a", record["params"]), manifest="a.yaml", run=old):
        code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
        result = json.loads(out)
        assert code == 0 and result["removed_runs"] == [] and (runs / old / "record.json").exists()
        (spared,) = result["spared"]
        assert spared["id"] == old and spared["kept_because"].startswith(f"run {old} is being resumed (pid {os.getpid()}")
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    assert code == 0 and json.loads(out)["removed_runs"] == [old]


def test_a_resume_that_takes_its_runs_lock_after_gc_looked_keeps_its_run(tmp_path, monkeypatch):
    """gc read the held locks once, at its start: a --resume that took its run's lock after that look had the run
    removed from under it (exit 5, the run lost). gc now holds each unit's run locks while it removes it."""
    from hetflow.engine.store import locks
    from hetflow.engine.store.locks import RunLock, lock_path

    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    record = json.loads((runs / old / "record.json").read_text())
    resume = RunLock(lock_path(str(runs), record["manifest"]["file"], "a", record["params"]), manifest="a.yaml", run=old)
    real = locks.held_runs

    def looked_before_the_resume(runs_dir):
        found = real(runs_dir)
        resume.acquire()  # the resume takes the lock just after gc's look
        return found

    monkeypatch.setattr(locks, "held_runs", looked_before_the_resume)
    try:
        code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    finally:
        monkeypatch.setattr(locks, "held_runs", real)
    try:
        result = json.loads(out)
        assert code == 0 and result["removed_runs"] == [] and (runs / old / "record.json").exists()
        (spared,) = result["spared"]
        assert (spared["id"], spared["kept_because"]) == (old, "a --resume of it began while gc ran")
    finally:
        resume.release()
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "1", "--json")
    assert code == 0 and json.loads(out)["removed_runs"] == [old]


def test_gc_while_a_run_runs_keeps_the_cache_entries_it_took(tmp_path):
    """A running run's record names its cache keys only when it ends: gc kept the entries written since the run
    began, and removed those it had already taken from the cache."""
    import hetflow

    path, runs, cache, entries = _chain(tmp_path)
    first = json.loads(next(runs.glob("*/record.json")).read_text())["run_id"]
    said = {}

    def gc_once_a_partition_is_taken(event):
        if event.get("kind") == "partition" and event.get("event") == "finished" and "gc" not in said:
            said["gc"] = cli("runs", "gc", "--keep", "0", "--runs-dir", str(runs), "--json")

    second = hetflow.run(path, runs_dir=runs, on_event=gc_once_a_partition_is_taken)
    code, out, err = said["gc"]
    assert code == 0 and json.loads(out)["removed_runs"] == [first], err
    hits = json.loads(Path(second.record_path).read_text())["cache"]["hits"]
    assert hits and sorted(cache.keys()) == entries


def _chain(tmp_path: Path) -> tuple[Path, Path, object, list[str]]:
    """A two-partition manifest run once, its two cache entries made an hour old (a run long gone wrote them)."""
    import hetflow
    from hetflow.engine.store.cache import Cache

    path = tmp_path / "chain.yaml"
    path.write_text(BODY.replace("NAME", "chain").replace("outputs: {z: z}", "  y: {op: relu, inputs: [z], executor: g}\n"
                                                                          "outputs: {y: y}").replace(
        "executors: {h: {vendor: cpu}}", "executors: {h: {vendor: cpu}, g: {vendor: cpu}}"))
    runs = tmp_path / "runs"
    hetflow.run(path, runs_dir=runs)
    cache = Cache(str(runs / ".cache"))
    entries = sorted(cache.keys())
    assert len(entries) == 2
    for key in entries:
        os.utime(os.path.join(cache._folder(key), "entry.json"), (time.time() - 3600, time.time() - 3600))
    return path, runs, cache, entries


def test_gc_keeps_what_a_run_took_before_its_first_record_reached_the_disk(tmp_path, monkeypatch):
    """A run's first record is written while the run goes on; a gc in between saw only its folder, and removed
    the cache entry the run had just taken (a CI run under load)."""
    import concurrent.futures

    import hetflow
    from hetflow.engine.run import execute

    path, runs, cache, entries = _chain(tmp_path)
    landed, said = threading.Event(), {}
    late = concurrent.futures.ThreadPoolExecutor(1)

    class Slow:  # the record writers, whose fsync has not ended by the time the first partition has
        def submit(self, write):
            return late.submit(lambda: landed.wait(60) and write())

    monkeypatch.setattr(execute, "_record_writers", lambda: Slow())

    def gc_once_a_partition_is_taken(event):
        if event.get("kind") == "partition" and event.get("event") == "finished" and "gc" not in said:
            said["records"] = sorted(p.name for p in runs.glob("*/record.json"))
            said["gc"] = cli("runs", "gc", "--keep", "0", "--runs-dir", str(runs), "--json")
            landed.set()

    second = hetflow.run(path, runs_dir=runs, on_event=gc_once_a_partition_is_taken)
    late.shutdown()
    code, out, err = said["gc"]
    assert code == 0, err
    assert len(said["records"]) == 1 and json.loads(out)["kept_runs"] == [], "the running record was on the disk"
    hits = json.loads(Path(second.record_path).read_text())["cache"]["hits"]
    assert hits and sorted(cache.keys()) == entries


def test_gc_keeps_an_entry_a_run_takes_after_gc_looked_at_the_runs(tmp_path, monkeypatch):
    """A run that begins once gc has read the runs directory is not among its runs: what it reads from the cache
    meanwhile is kept all the same."""
    from hetflow.engine.store import runs as runsmod

    path, runs, cache, entries = _chain(tmp_path)
    real = runsmod._scan

    def then_a_run_reads_an_entry(*args, **kwargs):
        yield from real(*args, **kwargs)
        assert type(cache)(cache.root).load(entries[0]) is not None

    monkeypatch.setattr(runsmod, "_scan", then_a_run_reads_an_entry)
    code, out, err = cli("runs", "gc", "--keep", "0", "--runs-dir", str(runs), "--json")
    said = json.loads(out)
    assert code == 0 and said["removed_cache_entries"] == 1 and said["kept_cache_entries"] == 1, err
    assert sorted(cache.keys()) == entries[:1]


def test_gc_puts_back_an_entry_a_run_read_as_gc_removed_it(tmp_path, monkeypatch):
    """An entry gc found unused, read by a run a moment before its removal, stays; one it found read stays
    unsaid (not a removal the file system refused); gc never removes a store made meanwhile."""
    from hetflow.engine.store.cache import Cache

    path, runs, cache, entries = _chain(tmp_path)
    real = Cache.remove

    def read_first(self, key, **kwargs):
        if key == entries[0]:
            assert Cache(self.root).load(key) is not None  # a run took it between gc's look and the removal
        return real(self, key, **kwargs)

    monkeypatch.setattr(Cache, "remove", read_first)
    code, out, err = cli("runs", "gc", "--keep", "0", "--runs-dir", str(runs), "--json")
    said = json.loads(out)
    assert code == 0 and said["removed_cache_entries"] == 1 and said["not_removed"] == [], err
    assert sorted(cache.keys()) == entries[:1]
    assert [p.name for p in Path(cache.root).glob("*/.*")] == []  # nothing left aside
    # a run's read that finds the entry moved aside is a miss, not a damaged entry
    folder = cache._folder(entries[0])
    os.rename(folder, folder + "-aside")
    reader = Cache(cache.root)
    assert reader.load(entries[0]) is None and reader.damaged == {}


def _claim(runs: Path, name: str, slot: str, **body) -> Path:
    folder = runs / ".schedule" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / (slot.replace("-", "").replace(":", "") + ".json")
    path.write_text(json.dumps({"slot": slot, "manifest": f"{name}.yaml", **body}))
    return path


def test_gc_keeps_the_run_and_the_claim_a_schedule_has_yet_to_conclude(tmp_path):
    """gc removed a scheduled run its killed scheduler never concluded: the next run-due concluded the slot
    "died" and ran on_failure for a run that had succeeded. It removed a claim whose hook was owed too."""
    scheduled, newer = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    record = runs / scheduled / "record.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "schedule": {"slot": "2026-06-01T10:00:00Z"}}))
    started = _claim(runs, "a", "2026-06-01T10:00:00Z", state="started", run_pid=1)
    owed = _claim(runs, "a", "2026-06-01T09:00:00Z", state="succeeded", run_id="gone", hook="pending")
    odd = _claim(runs, "a", "2026-06-01T08:00:00Z", state="skipped", run_id=["x"], at=5)  # no claim hetflow writes
    _claim(runs, "a", "2026-06-01T11:00:00Z", state="skipped")  # the newest, which run-due continues from
    code, out, err = cli("runs", "gc", "--keep", "1", "--older-than", "0s", "--runs-dir", str(runs), "--json")
    result = json.loads(out)
    assert code == 0, err
    assert result["removed_runs"] == [] and (runs / scheduled).is_dir(), result
    (spared,) = [u for u in result["spared"] if u["id"] == scheduled]
    assert spared["kept_because"] == (f"run {scheduled} is the run of schedule slot 2026-06-01T10:00:00Z, which is "
                                      "not concluded yet (the next schedule run-due or serve concludes it)")
    assert started.exists() and owed.exists() and odd.exists()
    started.write_text(json.dumps({**json.loads(started.read_text()), "state": "succeeded", "run_id": scheduled}))
    code, out, err = cli("runs", "gc", "--keep", "1", "--runs-dir", str(runs), "--json")
    assert code == 0 and json.loads(out)["removed_runs"] == [scheduled] and not started.exists(), err


def test_a_gc_killed_among_a_sweeps_renames_is_finished_by_the_next(tmp_path, monkeypatch):
    """Killed after the summary's rename, it left the sweep's runs listed as runs of their own, counted by --keep
    one by one."""
    from hetflow.engine.store import runs as runsmod

    path = tmp_path / "sw.yaml"
    path.write_text(BODY.replace("NAME", "sw").replace("params: {k: 1}", "params: {k: 1}\nmatrix: {k: [1, 2, 3]}"))
    runs = tmp_path / "runs"
    code, out, err = cli("run", str(path), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    run(tmp_path, "b", 1)
    real, calls = os.rename, []

    def killed_after_two(src, dst):
        calls.append(src)
        if len(calls) == 3:
            raise KeyboardInterrupt  # the process ends here, as a SIGKILL would end it
        return real(src, dst)

    monkeypatch.setattr(runsmod.os, "rename", killed_after_two)
    with pytest.raises(KeyboardInterrupt):
        runsmod.collect_garbage(str(runs), keep=0)
    monkeypatch.setattr(runsmod.os, "rename", real)
    code, out, err = cli("runs", "gc", "--keep", "1", "--runs-dir", str(runs), "--json")
    assert code == 0, err
    left = sorted(p.name for p in runs.iterdir() if not p.name.startswith("."))
    assert [n for n in left if "-sw-" in n] == [], left  # no point of the sweep is left as a run of its own


def test_a_killed_writes_temporary_file_goes_with_gc_once_old_and_with_a_resume_at_once(tmp_path):
    """SIGKILL between the final record's file and its rename left ``.tmp-XXXXrecord.json``, a whole record saying
    ``succeeded`` beside the one in force saying ``died``; neither a resume nor gc removed it."""
    (tmp_path / "gate.py").write_text(
        "import os\nfrom hetflow import op\n\n\n@op('t.gate')\ndef gate(xp, x):\n"
        "    if os.path.exists(os.path.join(os.path.dirname(__file__), 'closed')):\n"
        "        raise RuntimeError('the gate is closed')\n    return x\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: m\nplugins: [gate.py]\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  a: {op: full, args: {shape: [2], value: 1}}\n  z: {op: t.gate, inputs: [a]}\n"
                        "outputs: {z: z}\n")
    runs = tmp_path / "runs"
    (tmp_path / "closed").write_text("")
    code, out, err = cli("run", str(manifest), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 1, err
    failed = runs / json.loads(out)["run_id"]
    old, young = failed / ".tmp-0123456789abrecord.json", failed / ".tmp-ba9876543210record.json"
    old.write_text('{"status": "succeeded"}\n')
    young.write_text('{"status": "succeeded"}\n')
    hour_ago = time.time() - 3700
    os.utime(old, (hour_ago, hour_ago))
    code, out, err = cli("runs", "--runs-dir", str(runs), "gc", "--keep", "5")
    assert code == 0, err
    assert not old.exists() and young.exists()  # a live writer's may be younger than an hour
    (tmp_path / "closed").unlink()
    code, out, err = cli("run", str(manifest), "--runs-dir", str(runs), "--resume", failed.name, "--quiet")
    assert code == 0, err
    assert not [p.name for p in failed.iterdir() if p.name.startswith(".")]
    assert json.loads((failed / "record.json").read_text())["status"] == "succeeded"


def test_an_entry_a_killed_gc_left_moved_aside_goes_with_a_later_gc(tmp_path, monkeypatch):
    """A gc killed between moving an entry aside and removing it leaves the entry's files under a temporary
    name: the next gc removes them once they have been aside a minute, not an hour later, and never sooner."""
    from hetflow.engine.store import cache as cachemod

    path, runs, cache, entries = _chain(tmp_path)
    folder = Path(cache._folder(entries[0]))
    aside = folder.parent / ".tmp-removed-0123456789ab"
    folder.rename(aside)  # where a removal puts an entry before it asks when it was last read
    code, out, err = cli("runs", "gc", "--keep", "1", "--runs-dir", str(runs), "--json")
    assert code == 0 and aside.is_dir(), err  # a removal under way may still put it back
    monkeypatch.setattr(cachemod, "_ASIDE_S", 0.0)  # as a minute later
    code, out, err = cli("runs", "gc", "--keep", "1", "--runs-dir", str(runs), "--json")
    assert code == 0 and not aside.exists(), err
    assert sorted(cache.keys()) == entries[1:]
