"""``hetflow report -o`` never writes its page over a file a run keeps or read: a record, an output, a sweep's
summary, the manifest or a loaded file (exit 2, the file as it was); its own earlier page it replaces."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: rpo
params: {k: 2.0}
matrix: {k: [1.0, 3.0]}
executors: {h: {vendor: cpu}}
stages:
  d: {op: load, args: {path: data.npy}}
  y: {op: mul, inputs: [d], args: {value: "${k}"}}
outputs: {y: y}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    root = tmp_path_factory.mktemp("rpo")
    np.save(root / "data.npy", np.arange(4, dtype=np.float32))
    (root / "m.yaml").write_text(MANIFEST)
    runs = root / "runs"
    code, out, err = _cli("run", str(root / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    result = json.loads(out)
    return root, runs, result["sweep_id"], [p["run_id"] for p in result["points"]]


@pytest.mark.parametrize("target, victim, said", [
    ("point", lambda root, runs, sweep, pts: runs / pts[0] / "record.json", "a file of the run {p0} (record.json)"),
    ("point", lambda root, runs, sweep, pts: runs / pts[0] / "y.npy", "a file of the run {p0} (y.npy)"),
    ("point", lambda root, runs, sweep, pts: runs / pts[1] / "record.json", "a file of the run {p1} (record.json)"),
    ("point", lambda root, runs, sweep, pts: runs / sweep / "sweep.json", "a file of the sweep {sweep} (sweep.json)"),
    ("sweep", lambda root, runs, sweep, pts: runs / sweep / "manifest.yaml",
     "a file of the sweep {sweep} (manifest.yaml)"),
    ("point", lambda root, runs, sweep, pts: root / "m.yaml", "the manifest it ran"),
    ("point", lambda root, runs, sweep, pts: root / "data.npy", "a file it loaded"),
])
def test_report_refuses_to_write_over_a_file_the_run_keeps_or_read(swept, target, victim, said):
    root, runs, sweep, points = swept
    path = victim(root, runs, sweep, points)
    before = path.read_bytes()
    name = points[0] if target == "point" else sweep
    code, out, err = _cli("report", name, "--runs-dir", str(runs), "-o", str(path))
    assert code == 2, err
    assert said.format(p0=points[0], p1=points[1], sweep=sweep) in err
    assert f"-o {path} is " in err and "which the report would replace" in err
    assert "Traceback" not in err and out == ""
    assert path.read_bytes() == before


def test_report_refuses_to_make_a_record_in_a_sweeps_folder(swept):
    root, runs, sweep, points = swept
    path = runs / sweep / "record.json"
    code, out, err = _cli("report", points[0], "--runs-dir", str(runs), "-o", str(path))
    assert code == 2 and not path.exists()
    assert f"-o {path} would put a record.json in the folder of the sweep {sweep}" in err
    code, out, err = _cli("report", sweep, "--runs-dir", str(runs), "-o", str(runs / sweep / "report.html"))
    assert code == 0, err


def test_report_replaces_its_own_page_and_any_other_file(swept, tmp_path):
    root, runs, sweep, points = swept
    for path in (runs / points[0] / "report.html", tmp_path / "old.html"):
        path.write_text("stale")
        code, out, err = _cli("report", points[0], "--runs-dir", str(runs), "-o", str(path))
        assert code == 0, err
        assert path.read_text().startswith("<!DOCTYPE html>")
    code, _, err = _cli("verify", points[0], "--runs-dir", str(runs))
    assert code == 0, err
