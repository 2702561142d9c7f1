"""A run folder copied from another machine, where neither its manifest nor the file it loaded is: verify says so
of the run's record, the one file that is here, not at line 1 column 1 of a manifest that is not here."""

from __future__ import annotations

import io
import json
import shutil

import numpy as np

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: cp
executors: {h: {vendor: cpu}}
stages:
  d: {op: load, args: {path: data.npy}}
  y: {op: relu, inputs: [d]}
outputs: {y: y}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_run_whose_manifest_and_data_are_not_on_this_machine_is_refused_naming_its_record(tmp_path):
    there = tmp_path / "there"
    there.mkdir()
    np.save(there / "data.npy", np.arange(4, dtype=np.float32))
    (there / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(there / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    run_id = out.split()[-1]
    shutil.rmtree(there)
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs))
    assert code == 2 and out == ""
    record = runs / run_id / "record.json"
    assert err == (f"hetflow: error: {record}: error: stage 'd': {there / 'data.npy'}: no such file (the run's "
                   f"manifest, {there / 'm.yaml'}, is not on this machine either: a run is rerun where the files it "
                   "read are)\n")
    code, out, _ = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 2 and json.loads(out)["error"] == "bad-input"
    assert [p.name for p in runs.iterdir() if not p.name.startswith(".")] == [run_id]  # no rerun was started


def test_where_the_manifest_is_still_there_its_line_is_named(tmp_path):
    np.save(tmp_path / "data.npy", np.arange(4, dtype=np.float32))
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    (tmp_path / "data.npy").unlink()
    code, _, err = _cli("verify", out.split()[-1], "--runs-dir", str(runs))
    assert code == 2
    assert err == f"{tmp_path / 'm.yaml'}:5:30: error: stage 'd': {tmp_path / 'data.npy'}: no such file\n"
