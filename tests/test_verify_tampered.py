"""A run's files changed by hand, and what ``verify`` and the cache then say: never "match" for a record that
lost its outputs or digests, never an internal error, the folder the run was named by, and never a cache entry
moved from another partition's folder taken as this one's."""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetflow.engine import cli

MANIFEST = """\
version: 1
name: tamper
params: {n: 6, k: 2.0}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}, executor: a}
  y: {op: mul, inputs: [x], args: {value: "${k}"}, executor: b}
  s: {op: sum, inputs: [y], executor: b}
outputs: {y: y, s: s}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def ran(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    run_id = out.strip().splitlines()[-1]
    return path, runs, run_id


def _edit(runs: Path, run_id: str, change) -> None:
    record_file = runs / run_id / "record.json"
    record = json.loads(record_file.read_text())
    change(record)
    record_file.write_text(json.dumps(record))


def _verify(runs: Path, run_id: str) -> tuple[int, dict, str]:
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert "internal error" not in err and "Traceback" not in err, err
    return code, json.loads(out), err


@pytest.mark.parametrize("change, said", [
    (lambda r: r.update(outputs={}), "output s: the record lists no such output, though its manifest names it"),
    (lambda r: r["outputs"].pop("s"), "output s: the record lists no such output, though its manifest names it"),
    (lambda r: r["outputs"]["s"].update(digest=None), "output s: the record gives no digest for it"),
    (lambda r: r["outputs"]["s"].pop("digest"), "output s: the record gives no digest for it"),
    (lambda r: r["outputs"]["s"].update(digest=12345), "output s: the record gives no digest for it"),
    (lambda r: r["outputs"]["s"].pop("file"), "output s: its record gives no valid file for it"),
])
def test_a_record_that_lost_an_output_or_its_digest_does_not_verify(ran, change, said):
    # verify compared only the outputs the record listed, and skipped the file check of one without a digest:
    # a record emptied of its outputs verified as "all outputs match"; a digest of 12345 was an internal error
    path, runs, run_id = ran
    _edit(runs, run_id, change)
    code, report, err = _verify(runs, run_id)
    assert code == 1 and report["match"] is False, (report, err)
    assert said in err, err
    assert {row["output"] for row in report["outputs"]} == {"y", "s"}
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs))
    assert code == 1 and "internal error" not in err and "verify" in out, err


def test_a_renamed_run_folder_is_verified_where_it_is(ran):
    path, runs, run_id = ran
    os.rename(runs / run_id, runs / "kept")
    code, report, err = _verify(runs, "kept")
    assert code == 0 and report["match"] is True, err
    assert f"{runs / 'kept'} holds the record of run {run_id}; its files are verified where they are" in err


def test_a_run_killed_while_it_ran_is_said_to_have_died(tmp_path):
    entered = tmp_path / "entered"
    (tmp_path / "slow.py").write_text("import pathlib, time\nfrom hetflow import op\n\n\n@op('t.slow')\n"
                                      f"def slow(xp, x):\n    pathlib.Path({str(entered)!r}).touch()\n"
                                      "    time.sleep(60)\n    return x\n")
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: slow\nplugins: [slow.py]\nexecutors: {a: {vendor: cpu}}\nstages:\n"
                    "  x: {op: arange, args: {stop: 3}}\n  y: {op: t.slow, inputs: [x]}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--runs-dir", str(runs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        # killed inside its stage, its record saying running: not at a moment a loaded machine makes random
        while not (entered.exists() and list(runs.glob("*/record.json"))) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert entered.exists(), "the run never reached its stage"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    code, out, err = _cli("verify", "latest", "--runs-dir", str(runs))
    assert code == 2 and "did not succeed (status died)" in err, err


def test_a_cache_entry_moved_from_another_partitions_folder_is_not_taken_as_its_own(tmp_path):
    # a folder of the cache holding another key's entry was restored as this key's: the run recorded the other
    # run's values (or another shape) as its own, said nothing, and a later verify blamed the executor
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    ids = []
    for k in ("2.0", "3.0"):
        code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet", "-p", f"k={k}")
        assert code == 0, err
        ids.append(out.strip().splitlines()[-1])
    keys = [json.loads((runs / i / "record.json").read_text())["cache"]["keys"] for i in ids]
    moved = next(p for p in keys[0] if keys[0][p]["key"] != keys[1][p]["key"])

    def folder(key: str) -> Path:
        hexkey = key.split(":")[-1]
        return runs / ".cache" / hexkey[:2] / hexkey

    shutil.rmtree(folder(keys[0][moved]["key"]))
    shutil.copytree(folder(keys[1][moved]["key"]), folder(keys[0][moved]["key"]))
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "-p", "k=2.0")
    assert code == 0, err
    third = out.strip().splitlines()[-1]
    record = json.loads((runs / third / "record.json").read_text())
    first = json.loads((runs / ids[0] / "record.json").read_text())
    assert {n: o["digest"] for n, o in record["outputs"].items()} == {n: o["digest"] for n, o in first["outputs"].items()}
    assert moved not in record["cache"]["hits"]
    assert "another partition's entry, moved or copied here" in record["cache"]["damaged"][moved]
    assert "cache entry was damaged" in err or "cache entries were damaged" in err


def test_the_table_shows_a_damaged_scalar_as_damaged_and_reads_a_renamed_folder_where_it_is(ran):
    # the scalar's column vanished (one run) or showed '-' as for a run without it; a renamed folder's outputs
    # were read from the folder its record's id named
    path, runs, run_id = ran
    import numpy as np

    np.save(runs / run_id / "s.npy", np.array(99, np.float32))
    code, out, err = _cli("runs", "--runs-dir", str(runs), "table", run_id)
    assert code == 0 and out.splitlines()[1].split()[-1] == "damaged", out
    code, out, err = _cli("runs", "--runs-dir", str(runs), "table", "--format", "json", run_id)
    row = json.loads(out)["rows"][0]
    assert "s" in json.loads(out)["outputs"] and "not the array its record's digest names" in row["damaged"]["s"]
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet", "-p", "k=3")
    other = out.strip().splitlines()[-1]
    os.rename(runs / other, runs / "kept")
    code, out, err = _cli("runs", "--runs-dir", str(runs), "table", "kept")
    assert code == 0 and out.splitlines()[1].split()[-1] == "45", out
    code, out, err = _cli("runs", "--runs-dir", str(runs), "diff", run_id, "kept")
    assert code == 0, err
    b_side = [line.strip() for line in out.splitlines() if line.strip().startswith("b: ")]
    assert b_side[-1].startswith("b: 45  sha256:"), out  # the renamed run's own file, read where it is


@pytest.mark.parametrize("text", ["{}", '{"status": "succeeded"}', '{"run_id": 5, "status": "succeeded"}'])
def test_a_record_that_is_no_runs_record_is_listed_unreadable_and_kept_by_keep(ran, text):
    path, runs, run_id = ran
    (runs / run_id / "record.json").write_text(text)
    code, out, err = _cli("runs", "--runs-dir", str(runs))
    assert code == 0 and "unreadable" in out, out
    code, out, err = _cli("runs", "--runs-dir", str(runs), "gc", "--keep", "0", "--dry-run")
    assert code == 0 and f"kept run folder {run_id}" in out and "its record cannot be read" in out, out
    code, out, err = _cli("runs", "--runs-dir", str(runs), "table", run_id)
    assert code in (0, 2) and "internal error" not in err, err


@pytest.mark.parametrize("how", ["entry.json a folder", "the entry's folder a file"])
def test_a_cache_entry_whose_files_are_the_wrong_kind_is_replaced(ran, how):
    # every later run failed to store it ("Directory not empty"), plan called it absent, and gc never removed it
    path, runs, run_id = ran
    keys = json.loads((runs / run_id / "record.json").read_text())["cache"]["keys"]
    pid, info = next(iter(keys.items()))
    hexkey = info["key"].split(":")[-1]
    folder = runs / ".cache" / hexkey[:2] / hexkey
    if how == "entry.json a folder":
        (folder / "entry.json").unlink()
        (folder / "entry.json").mkdir()
    else:
        shutil.rmtree(folder)
        folder.write_text("x")
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs))
    assert code == 0, err
    assert f"{pid}: its entry.json is a folder, or its folder a file" in err and "not stored" not in err, err
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet")
    record = json.loads((runs / out.strip().splitlines()[-1] / "record.json").read_text())
    assert pid in record["cache"]["hits"] and not record["cache"].get("damaged")
    assert not [p for p in (runs / ".cache").rglob(".tmp-*")]


def test_verify_refuses_an_input_for_no_input_stage_and_a_runs_folder_that_is_a_file(ran, tmp_path):
    path, runs, run_id = ran
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--input", "zz=x.npy")
    assert code == 2 and "--input names stage 'zz', which is no input stage of run" in err, err
    (tmp_path / "afile").write_text("")
    code, out, err = _cli("verify", "latest", "--runs-dir", str(tmp_path / "afile"))
    assert (code, err) == (2, f"hetflow: error: --runs-dir {str(tmp_path / 'afile')!r} is a file, not a folder\n")


def test_a_rerun_that_fails_says_why_in_verifys_json(tmp_path, monkeypatch):
    (tmp_path / "flaky.py").write_text("import os\nfrom hetflow import op\n\n\n@op('t.flaky')\n"
                                       "def flaky(xp, x):\n    if os.environ.get('FLAKY_FAIL'):\n"
                                       "        raise RuntimeError('it failed this time')\n    return x\n")
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: flaky\nplugins: [flaky.py]\nexecutors: {a: {vendor: cpu}}\nstages:\n"
                    "  x: {op: arange, args: {stop: 3}}\n  y: {op: t.flaky, inputs: [x]}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    monkeypatch.setenv("FLAKY_FAIL", "1")
    code, report, err = _verify(runs, out.strip().splitlines()[-1])
    assert code == 1 and report["match"] is False
    assert report["error"].startswith("the rerun failed: ") and "it failed this time" in report["error"], report


def test_digests_that_differ_past_what_the_table_shows_are_shown_whole(ran):
    path, runs, run_id = ran
    _edit(runs, run_id, lambda r: r["outputs"]["s"].update(digest=r["outputs"]["s"]["digest"][:-1] + (
        "0" if r["outputs"]["s"]["digest"][-1] != "0" else "1")))
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs))
    assert code == 1
    line = next(line for line in out.splitlines() if line.startswith("s "))
    recorded, rerun = line.split()[1:3]
    assert len(recorded) == len(rerun) == 71 and recorded != rerun, out
