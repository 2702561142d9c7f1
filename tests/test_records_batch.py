"""A run's durable writes: the batch that writes its outputs and records, and the running record's writer.

Each file is written as it is added and made durable before any file of
the batch is renamed into place, in the order added; a ``running``
record not renamed yet when the final record is durable is superseded,
never renamed over it; ``.npy`` outputs are the bytes ``np.save`` writes.
"""

import io
import os
import threading

import ml_dtypes
import numpy as np
import pytest

import hetflow
from hetflow.engine.store import records
from hetflow.engine.store.locks import RunLock
from hetflow.engine.store.records import Batch, npy_writer, write_together

QUICK = """\
version: 1
name: quick
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [16, 8], seed: 1}, executor: a}
  y: {op: relu, inputs: [x], executor: b}
  z: {op: cast, inputs: [y], dtype: bf16, executor: b}
outputs: {y: y, z: z}
"""


def _temps(folder) -> list[str]:
    return sorted(n for n in os.listdir(folder) if n.startswith(".tmp-"))


@pytest.mark.parametrize("array", [
    np.arange(12, dtype=np.float32).reshape(3, 4),
    np.arange(12, dtype=np.float32).reshape(3, 4).T,  # Fortran order: np.save keeps it
    np.arange(24, dtype=np.int8).reshape(2, 3, 4)[:, ::2],  # neither order: written as C
    np.zeros((0, 5), dtype=np.int64),
    np.array(2.5),
    np.ones((3, 2), dtype=bool),
    np.arange(4, dtype=">i4"),
    np.zeros((1,) * 30, dtype=np.float16),
], ids=["c", "fortran", "strided", "empty", "0-d", "bool", "big-endian", "rank-30"])
def test_an_output_file_holds_the_bytes_np_save_writes(array):
    mine, theirs = io.BytesIO(), io.BytesIO()
    npy_writer(array)(mine)
    np.save(theirs, array, allow_pickle=False)
    assert mine.getvalue() == theirs.getvalue()
    again = np.load(io.BytesIO(mine.getvalue()))
    assert again.dtype == array.dtype and again.shape == array.shape and np.array_equal(again, array)


def test_a_bf16_output_is_written_as_raw_bytes_of_its_width():
    array = np.arange(6, dtype=np.float32).reshape(2, 3).astype(ml_dtypes.bfloat16)
    mine, theirs = io.BytesIO(), io.BytesIO()
    npy_writer(array)(mine)
    np.save(theirs, array.view("V2"), allow_pickle=False)
    assert mine.getvalue() == theirs.getvalue()


def test_a_batch_shows_nothing_at_its_paths_until_commit_then_renames_in_order(tmp_path, monkeypatch):
    out, rec = tmp_path / "y.npy", tmp_path / "record.json"
    rec.write_text("running\n")
    batch = Batch()
    batch.add(str(out), npy_writer(np.arange(3)), fresh=True)
    batch.add(str(rec), lambda f: f.write(b"final\n"))
    assert rec.read_text() == "running\n" and len(_temps(tmp_path)) == 1  # the record's new text is not in place
    synced, renamed = [], []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(records.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd))[1])
    monkeypatch.setattr(records.os, "replace", lambda a, b: (renamed.append((len(synced), b)), real_replace(a, b))[1])
    batch.commit()
    assert len(synced) == 2 and renamed == [(2, str(rec))]  # every file durable before the one rename
    assert rec.read_text() == "final\n" and np.load(out).tolist() == [0, 1, 2] and _temps(tmp_path) == []


def test_a_file_synced_at_once_is_durable_before_the_batch_renames_and_a_failed_sync_renames_nothing(
        tmp_path, monkeypatch):
    out, rec = tmp_path / "y.npy", tmp_path / "record.json"
    rec.write_text("running\n")
    began, release, order = threading.Event(), threading.Event(), []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        if threading.current_thread().name.startswith("hetflow-fsync"):
            began.set()
            release.wait(10)  # the disk is slow: the output's fsync is still under way
        order.append(("fsync", os.fstat(fd).st_size))
        real_fsync(fd)

    monkeypatch.setattr(records.os, "fsync", fsync)
    monkeypatch.setattr(records.os, "replace", lambda a, b: (order.append(("rename", b)), real_replace(a, b))[1])
    batch = Batch()
    batch.add(str(out), npy_writer(np.arange(3)), fresh=True, sync_now=True)
    assert began.wait(10), "the output's fsync began while the caller went on"
    batch.add(str(rec), lambda f: f.write(b"final\n"))
    committing = threading.Thread(target=batch.commit)
    committing.start()
    committing.join(0.3)
    assert committing.is_alive() and rec.read_text() == "running\n"  # the record waits for its output
    release.set()
    committing.join(10)
    assert order[-1] == ("rename", str(rec)) and len(order) == 3
    assert rec.read_text() == "final\n" and np.load(out).tolist() == [0, 1, 2] and _temps(tmp_path) == []

    def failing(fd):
        try:
            if threading.current_thread().name.startswith("hetflow-fsync"):
                raise OSError(5, "Input/output error")
            real_fsync(fd)
        finally:
            order.append(("fsync", fd))

    monkeypatch.setattr(records.os, "fsync", failing)
    again = Batch()
    again.add(str(tmp_path / "z.npy"), npy_writer(np.arange(2)), fresh=True, sync_now=True)
    again.add(str(rec), lambda f: f.write(b"later\n"))
    with pytest.raises(OSError, match="Input/output"):
        again.commit()
    assert rec.read_text() == "final\n" and not (tmp_path / "z.npy").exists() and _temps(tmp_path) == []


def test_a_batch_abandoned_while_a_file_syncs_leaves_that_descriptor_to_the_sync(tmp_path, monkeypatch):
    release, synced = threading.Event(), []
    real_fsync = os.fsync

    def fsync(fd):
        release.wait(10)
        synced.append(os.fstat(fd).st_size)  # still this file's descriptor: the batch did not close it
        real_fsync(fd)

    monkeypatch.setattr(records.os, "fsync", fsync)
    batch = Batch()
    batch.add(str(tmp_path / "y.npy"), lambda f: f.write(b"12345"), fresh=True, sync_now=True)
    batch.abandon()
    assert not (tmp_path / "y.npy").exists()
    other = os.open(tmp_path / "other", os.O_WRONLY | os.O_CREAT)  # the lowest free number, were it closed
    try:
        release.set()
        records._syncers().submit(lambda: None).result(10)
        for _ in range(100):
            if synced:
                break
            threading.Event().wait(0.01)
        assert synced == [5]
    finally:
        os.close(other)


def test_a_failed_write_renames_nothing_and_leaves_no_temporary_file(tmp_path):
    rec = tmp_path / "record.json"
    rec.write_text("running\n")

    def broken(f):
        f.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_together([(str(tmp_path / "a.json"), lambda f: f.write(b"a")), (str(rec), broken)])
    assert rec.read_text() == "running\n" and _temps(tmp_path) == [] and not (tmp_path / "a.json").exists()

    def refuse():
        raise RuntimeError("the running record failed")

    batch = Batch()
    batch.add(str(rec), lambda f: f.write(b"final\n"))
    with pytest.raises(RuntimeError):
        batch.commit(before_replace=refuse)
    assert rec.read_text() == "running\n" and _temps(tmp_path) == []


def test_a_failed_write_leaves_no_buffered_bytes_for_the_next_file_that_takes_its_descriptor(tmp_path):
    """The batch closes a failed file's descriptor itself; the writer over it kept the bytes it had not written
    yet and flushed them when it was collected, into whatever file held that descriptor number by then (on
    Python 3.13 a traceback said so; before, nothing did)."""
    import gc

    def broken(f):
        f.write(b"stray bytes of a failed record")
        raise OSError("disk full")

    batch = Batch()
    try:
        batch.add(str(tmp_path / "record.json"), broken)
    except OSError as e:
        kept = e  # a caller that keeps the error (a run's failure) keeps its traceback's frames with it
    batch.abandon()
    other = tmp_path / "other.json"
    fd = os.open(other, os.O_WRONLY | os.O_CREAT)  # the lowest free descriptor: the one the batch just closed
    try:
        os.write(fd, b"{}")
        del kept
        gc.collect()
    finally:
        os.close(fd)
    assert other.read_bytes() == b"{}"


def test_a_superseded_batch_renames_nothing_even_where_its_commit_is_under_way(tmp_path):
    rec = tmp_path / "record.json"
    running = Batch()
    running.add(str(rec), lambda f: f.write(b"running\n"))
    go, failed = threading.Event(), []

    def commit():  # the running record's writer, held in its fsync's place until told
        try:
            running.commit(before_replace=lambda: go.wait(10))
        except BaseException as e:  # noqa: BLE001 - reported below
            failed.append(e)

    writer = threading.Thread(target=commit)
    writer.start()
    assert running.supersede() is True
    assert _temps(tmp_path) == []  # removed at once, though its writer has not ended
    final = Batch()
    final.add(str(rec), lambda f: f.write(b"final\n"))
    final.commit()
    go.set()
    writer.join(10)
    assert not failed and rec.read_text() == "final\n" and _temps(tmp_path) == []


def test_a_batch_superseded_before_its_commit_makes_nothing_durable(tmp_path, monkeypatch):
    rec = tmp_path / "record.json"
    running = Batch()
    running.add(str(rec), lambda f: f.write(b"running\n"))
    assert running.supersede() is True
    synced = []
    monkeypatch.setattr(records.os, "fsync", synced.append)
    running.commit()
    assert synced == [] and not rec.exists() and _temps(tmp_path) == []


def test_a_batch_whose_renames_are_done_is_not_superseded(tmp_path):
    rec = tmp_path / "record.json"
    running = Batch()
    running.add(str(rec), lambda f: f.write(b"running\n"))
    running.commit()
    assert running.supersede() is False and rec.read_text() == "running\n"


def test_a_run_leaves_its_outputs_and_final_record_and_no_temporary_file(manifest_file, tmp_path):
    runs = tmp_path / "runs"
    path = manifest_file(QUICK)
    done = [hetflow.run(path, runs_dir=runs, cache=False) for _ in range(3)]
    for r in done:
        assert r.status == "succeeded"
        on_disk = hetflow.open_run(r.path)
        assert on_disk.record["status"] == "succeeded" and on_disk.record["host"] == r.record["host"]
        assert np.array_equal(on_disk.outputs["y"], r.outputs["y"])
        assert on_disk.outputs["z"].dtype == ml_dtypes.bfloat16
        # a superseded running record's file is gone when the run returns, though its writer may not have ended
        assert sorted(os.listdir(r.path)) == ["record.json", "y.npy", "z.npy"]


def test_a_lock_makes_its_folder_when_the_runs_directory_has_none(tmp_path):
    where = tmp_path / "runs" / ".locks" / "m.lock"
    with RunLock(str(where)):
        assert where.exists()
    assert not where.exists() and where.parent.is_dir()


def test_a_run_directory_is_made_under_a_runs_directory_not_there_yet(tmp_path):
    run_id, folder = records.new_run_dir(str(tmp_path / "a" / "runs"), "m", "sha256:abc")
    assert os.path.isdir(folder) and os.path.basename(folder) == run_id and "-m-abc-" in run_id


def test_a_run_in_a_folder_whose_name_is_not_utf8_writes_a_true_record(manifest_file, tmp_path):
    """A folder named in Latin-1 reaches Python as a lone surrogate, which UTF-8 cannot encode: the run did its work,
    failed to write its record (exit 3), and the record it left said running, read as died."""
    import json as jsonlib

    from hetflow.engine.cli.main import main

    folder = tmp_path / os.fsdecode(b"lat\xe9n")
    folder.mkdir()
    manifest = folder / "m.yaml"
    manifest.write_text(QUICK)
    runs = folder / "runs"
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(manifest), "--runs-dir", str(runs), "--quiet"], out=out, err=err) == 0, err.getvalue()
    [run] = [d for d in os.listdir(runs) if not d.startswith(".")]
    raw = (runs / run / "record.json").read_bytes()
    record = jsonlib.loads(raw.decode("utf-8"))  # UTF-8 throughout: the name's byte is the JSON escape \udce9
    assert record["status"] == "succeeded" and os.fsencode(record["manifest"]["file"]) == os.fsencode(str(manifest))
    assert b"\\udce9" in raw
    out, err = io.StringIO(), io.StringIO()
    assert main(["verify", "latest", "--runs-dir", str(runs)], out=out, err=err) == 0, err.getvalue()
