"""A disk that refuses a run's files is the environment's fault, and the record stays true through it.

The refusal is the kernel's own: each ``hetflow run`` is a real process
under ``RLIMIT_FSIZE``, so every write past the limit fails with EFBIG, as
a full disk's fail with ENOSPC (Python ignores SIGXFSZ). Limits from a
few hundred bytes to past the record's size cut the run at each of its
files in turn: the lock, the running record, the cache's entries, the
outputs, the final record.
"""

import json
import os
import resource
import subprocess
import sys
from importlib.resources import files
from pathlib import Path

import pytest

from hetflow.engine.store.records import Batch

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_FSIZE as Linux applies it")

QUICKSTART = str(files("hetflow.examples") / "quickstart.yaml")


def _run(runs: Path, limit: int | None, *extra: str) -> subprocess.CompletedProcess:
    def limited() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", QUICKSTART, "--runs-dir", str(runs),
                           "--quiet", *extra], capture_output=True, text=True, preexec_fn=limited, env=env,
                          timeout=120)


def _folders(runs: Path) -> list[Path]:
    return [p for p in runs.iterdir() if p.is_dir() and not p.name.startswith(".")] if runs.exists() else []


def _judge(runs: Path, done: subprocess.CompletedProcess) -> str:
    """What the run left, checked against what it said; the outcome's name."""
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    folders = _folders(runs)
    assert len(folders) <= 1
    leftovers = [p for p in runs.rglob("*") if p.name.startswith(".tmp-")] if runs.exists() else []
    assert not leftovers, leftovers
    if done.returncode == 0:
        record = json.loads((folders[0] / "record.json").read_text())
        assert record["status"] == "succeeded"
        assert {o["file"] for o in record["outputs"].values()} <= {p.name for p in folders[0].iterdir()}
        return "succeeded, unstored" if record["cache"]["store_failed"] else "succeeded"
    assert done.returncode == 5, (done.returncode, done.stderr)
    said = [line for line in done.stderr.splitlines() if line.startswith("hetflow: error:")]
    assert len(said) == 1, done.stderr
    assert "File too large" in said[0]
    if not folders:
        lock = list((runs / ".locks").glob("*.lock")) if (runs / ".locks").exists() else []
        assert not lock, lock  # a lock that could not be written is given back with its file
        return "lock" if "cannot write" in said[0] and said[0].endswith(".lock: File too large") else "nothing"
    names = {p.name for p in folders[0].iterdir()}
    assert names <= {"record.json", "traceback.txt"}, names  # no output of a run that did not end is left
    record = json.loads((folders[0] / "record.json").read_text())
    if record["status"] == "failed":
        assert "File too large" in record["error"]["message"]
        assert "its record says failed" in said[0]
        return "failed"
    assert record["status"] == "running" and "reads died" in said[0]
    return "running"


def test_every_cut_of_a_runs_files_leaves_a_true_record_and_a_clear_error(tmp_path):
    whole = _run(tmp_path / "whole", None)
    assert whole.returncode == 0, whole.stderr
    size = max(p.stat().st_size for p in (tmp_path / "whole").glob("*/record.json"))
    entry = max(p.stat().st_size for p in (tmp_path / "whole" / ".cache").rglob("*.bin"))
    if entry <= size:
        pytest.skip(f"the record ({size} B) is as large as the cache's largest file ({entry} B) here")
    seen = {}
    for i, limit in enumerate([50, *range(2000, size + 3000, 1000)]):
        runs = tmp_path / f"r{i}"
        seen.setdefault(_judge(runs, _run(runs, limit)), limit)
    # each file in turn was the one refused: the lock, the running record, the record at the end (in full or
    # lean), the cache's entries alone
    assert {"lock", "nothing", "failed", "succeeded, unstored"} <= set(seen), seen


def test_a_cache_that_cannot_take_an_entry_costs_the_run_nothing_but_the_entry(tmp_path):
    whole = _run(tmp_path / "whole", None)
    size = max(p.stat().st_size for p in (tmp_path / "whole").glob("*/record.json"))
    entry = max(p.stat().st_size for p in (tmp_path / "whole" / ".cache").rglob("*.bin"))
    if entry <= size + 4096:
        pytest.skip(f"the record ({size} B) is not smaller than the cache's largest file ({entry} B) here")
    runs = tmp_path / "runs"
    done = _run(runs, size + 4096)
    assert done.returncode == 0, done.stderr
    assert "not stored in the cache" in done.stderr
    record = json.loads(next(runs.glob("*/record.json")).read_text())
    assert record["cache"]["store_failed"] and set(record["cache"]["store_failed"]).isdisjoint(record["cache"]["stored"])
    assert all("File too large" in why for why in record["cache"]["store_failed"].values())
    again = _run(runs, None)  # what was not stored runs again; what was, comes from the cache
    assert again.returncode == 0
    second = json.loads((runs / again.stdout.split()[-1] / "record.json").read_text())
    assert set(second["cache"]["hits"]) == set(record["cache"]["stored"])


def test_a_batch_that_fails_removes_the_fresh_files_it_wrote(tmp_path):
    batch = Batch()
    batch.add(str(tmp_path / "out.npy"), lambda f: f.write(b"half"), fresh=True)

    def refused(f):
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError) as raised:
        batch.add(str(tmp_path / "record.json"), refused)
    batch.abandon()
    assert raised.value.filename == str(tmp_path / "record.json")
    assert list(tmp_path.iterdir()) == []


def test_a_committed_batch_keeps_its_fresh_files(tmp_path):
    batch = Batch()
    batch.add(str(tmp_path / "out.npy"), lambda f: f.write(b"whole"), fresh=True)
    batch.add(str(tmp_path / "record.json"), lambda f: f.write(b"{}"))
    batch.commit()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npy", "record.json"]


SWEEP = """\
version: 1
name: swp
params: {n: 16}
matrix: {n: [8, 16, 32]}
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 8], seed: 3}, executor: host}
  y: {op: gelu, inputs: [x]}
outputs: {y: y}
"""


def test_a_sweep_whose_disk_refuses_its_files_ends_with_a_true_summary_or_a_clear_error(tmp_path):
    manifest = tmp_path / "sweep.yaml"
    manifest.write_text(SWEEP)
    seen = set()
    for limit in (600, 1200, 2000, 3000, 8000):
        runs = tmp_path / f"r{limit}"

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", str(runs),
                               "--quiet"], capture_output=True, text=True, preexec_fn=limited, timeout=120,
                              env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
        assert "Traceback" not in done.stderr and "internal error" not in done.stderr, done.stderr
        summaries = list(runs.glob("*-sweep*/sweep.json"))
        assert not [p for p in runs.rglob("*") if p.name.startswith(".tmp-")]
        said = done.stderr.splitlines()
        if done.returncode == 5 and any(line.startswith("hetflow: error:") for line in said):
            assert len(said) == 1 and "File too large" in said[0], done.stderr
            seen.add("summary refused" if "sweep.json" in said[0] else "other")
            assert all(p.parent.name.endswith("sweep") for p in summaries)
            assert [p for p in runs.glob("*-sweep*") if not (p / "sweep.json").exists()] == []  # no empty folder
            continue
        # the summary was written whole: a point whose disk refused its files is the environment's, as a run's is
        assert done.returncode in (0, 5), done.stderr
        summary = json.loads(summaries[0].read_text())
        assert summary["status"] == ("succeeded" if done.returncode == 0 else "failed")
        assert {p["status"] for p in summary["points"]} <= {"succeeded", "failed"}
        failed = [p for p in summary["points"] if p["status"] == "failed"]
        assert all("File too large" in p["error"] and p["exit_code"] == 5 for p in failed)
        assert said == [f"hetflow: point {p['name']} failed: {p['error']}" for p in failed]
        seen.add("points failed" if failed else "succeeded")
    assert {"summary refused", "points failed", "succeeded"} <= seen, seen


SCHEDULED = """\
version: 1
name: tick
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: [4, 4], seed: 3}, executor: host}
outputs: {x: x}
schedule:
  cron: "* * * * *"
"""


def test_a_slot_whose_claim_the_disk_refused_stays_open_for_the_next_decision(tmp_path):
    manifest = tmp_path / "tick.yaml"
    manifest.write_text(SCHEDULED)
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", str(manifest), "--runs-dir", str(runs)]
    refused = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200)))
    assert refused.returncode == 5, refused.stderr
    assert "cannot write" in refused.stderr and "File too large" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert list((runs / ".schedule").rglob("*.json")) == []  # no half-written claim holds the slot
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    claims = [json.loads(p.read_text()) for p in (runs / ".schedule").rglob("*.json")]
    assert [c["state"] for c in claims] == ["succeeded"]


def test_examples_copied_onto_a_full_disk_leave_nothing_half_copied(tmp_path):
    sizes = sorted({p.stat().st_size for p in (Path(QUICKSTART).parent).rglob("*") if p.is_file()})
    dest = tmp_path / "here"
    (dest / "examples").mkdir(parents=True)
    mine = dest / "examples" / "notes.txt"  # the user's own file, already there
    mine.write_text("mine")
    argv = [sys.executable, "-m", "hetflow.engine.cli", "examples", "copy", str(dest)]
    for limit in (64, sizes[len(sizes) // 2], sizes[-1] - 1):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
        assert done.returncode == 5, done.stderr
        said = done.stderr.strip()
        assert said.startswith(f"hetflow: error: cannot write {dest}/") and said.endswith(": File too large"), said
        assert not said.split("cannot write ")[1].split(":")[0].endswith(".tmp")
        assert sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*")) == ["examples", "examples/notes.txt"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)  # the disk has room again
    assert done.returncode == 0, done.stderr
    assert (dest / "examples" / "quickstart.yaml").read_text() == Path(QUICKSTART).read_text()
    assert mine.read_text() == "mine"


def test_an_onnx_import_onto_a_full_disk_names_the_file_and_leaves_what_was_there(tmp_path):
    onnx = pytest.importorskip("onnx", reason="onnx is not installed (pip install -e .[dev])")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    weight = numpy_helper.from_array(np.arange(128 * 64, dtype=np.float32).reshape(128, 64), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"]), helper.make_node("Relu", ["y"], ["z"])],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 128])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(tmp_path / "small.onnx"))
    before = tmp_path / "before"  # an earlier import's files, which a failed one must leave as they were
    argv = [sys.executable, "-m", "hetflow.engine.cli", "import", "onnx", str(tmp_path / "small.onnx")]
    assert subprocess.run([*argv, "-o", str(before)], capture_output=True, timeout=120).returncode == 0
    kept = {p.name: p.read_bytes() for p in before.iterdir()}
    for out in (tmp_path / "fresh", before):
        for limit, refused in ((64, "small.yaml"), (8 * 1024, "small.safetensors")):
            done = subprocess.run([*argv, "-o", str(out)], capture_output=True, text=True, timeout=120,
                                  preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
            assert done.returncode == 5, done.stderr
            assert done.stderr.strip() == f"hetflow: error: cannot write {out / refused}: File too large"
            if out == before:
                assert {p.name: p.read_bytes() for p in before.iterdir()} == kept
            else:
                assert not out.exists()  # the folder it made, removed with the temporary files


def test_a_report_or_schema_the_disk_refuses_is_the_environments_and_a_bad_path_is_bad_input(tmp_path):
    runs = tmp_path / "runs"
    assert _run(runs, None).returncode == 0
    run_dir = _folders(runs)[0]
    cli = [sys.executable, "-m", "hetflow.engine.cli"]
    for argv, file in ((["report", str(run_dir)], run_dir / "report.html"),
                       (["report", str(run_dir), "-o", str(tmp_path / "r.html")], tmp_path / "r.html"),
                       (["schema", "-o", str(tmp_path / "s.json")], tmp_path / "s.json"),
                       (["plan", QUICKSTART, "-o", str(tmp_path / "p.json")], tmp_path / "p.json"),
                       (["plan", QUICKSTART, "--format", "text", "-o", str(tmp_path / "p.txt")], tmp_path / "p.txt")):
        done = subprocess.run([*cli, *argv], capture_output=True, text=True, timeout=120,
                              preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000)))
        assert done.returncode == 5, done.stderr
        assert done.stderr.strip() == f"hetflow: error: cannot write {file}: File too large"
        assert not file.exists() and not [p for p in file.parent.iterdir() if p.name.startswith(".tmp-")]
    (tmp_path / "a-file").write_text("")
    done = subprocess.run([*cli, "schema", "-o", str(tmp_path / "a-file" / "s.json")], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stderr.startswith(f"hetflow: error: -o {tmp_path / 'a-file' / 's.json'}: "
                                                           "cannot write: "), done.stderr


def test_gc_frees_a_full_disk_of_runs_and_sweeps(tmp_path):
    """gc, what a user runs on a full disk, removed nothing there: it first wrote a note of each unit it removes,
    which the disk refused (exit 5, 'could not remove ...: File too large'); a unit's renames and deletes write
    nothing, so they go on without it."""
    runs = tmp_path / "runs"
    sweep = tmp_path / "swept.yaml"
    sweep.write_text("version: 1\nname: swept\nparams: {n: 2}\nmatrix: {n: [2, 3]}\nexecutors: {a: {vendor: cpu}}\n"
                     'stages:\n  x: {op: ones, args: {shape: ["${n}"]}}\noutputs: {x: x}\n')
    for argv in ([QUICKSTART], [str(sweep)]):
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", *argv, "--runs-dir", str(runs),
                               "--quiet"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    assert len(_folders(runs)) == 4  # a run, a sweep and its two points

    def full() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))

    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "runs", "gc", "--keep", "0", "--runs-dir",
                           str(runs), "--json"], capture_output=True, text=True, preexec_fn=full, timeout=120,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert said["not_removed"] == [] and len(said["removed_runs"]) == 3 and len(said["removed_sweeps"]) == 1, said
    assert _folders(runs) == [] and not [p for p in runs.iterdir() if p.name.startswith(".gc-")]
