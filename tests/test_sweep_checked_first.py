"""A sweep checks every point as validate does before anything runs or is written."""

import io

import pytest

import hetflow
from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: swchk
params: {n: 4}
matrix: {n: [4, 200000]}
executors: {h: {vendor: cpu, memory: 64 KiB}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def test_a_point_validate_refuses_stops_the_sweep_before_it_starts(tmp_path):
    """The docs say run checks every point of a sweep the same way validate does, before it starts; a point whose
    partition outgrew its executor's declared memory was found only when its turn came, after the others ran."""
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(path)], out=out, err=err) == 2
    said = err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    code = main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet"], out=out, err=err)
    assert code == 2 and not (tmp_path / "runs").exists(), err.getvalue()
    assert err.getvalue() == said  # the same problems, in the same words, at the same places
    with pytest.raises(hetflow.ManifestError):
        hetflow.sweep(path, runs_dir=tmp_path / "api-runs")
    assert not (tmp_path / "api-runs").exists()


def test_plan_of_a_matrix_checks_every_point_as_validate_does(tmp_path):
    """plan without --point checks every point, as the command line's reference says, and plans the first: it
    planned the first and said nothing of a point validate refuses."""
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    out, err = io.StringIO(), io.StringIO()
    assert main(["validate", str(path)], out=out, err=err) == 2
    said = err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", str(path)], out=out, err=err) == 2 and out.getvalue() == ""
    assert err.getvalue() == said
    out, err = io.StringIO(), io.StringIO()
    assert main(["plan", str(path), "--point", "n=4"], out=out, err=err) == 0, err.getvalue()
