"""verify says which library versions and thread pools of its rerun are not the run's, whether or not the outputs
match: a run made before a package upgrade verifies, and the user is told the versions it verified under."""

from __future__ import annotations

import io
import json

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: env
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 8}}
  s: {op: sum, inputs: [x]}
outputs: {s: s}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def ran(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet")
    assert code == 0, err
    return runs, out.strip().splitlines()[-1]


def _edit(runs, run_id, change) -> None:
    path = runs / run_id / "record.json"
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))


def test_a_run_verified_under_the_same_versions_says_nothing_of_them(ran):
    runs, run_id = ran
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert json.loads(out)["changed"] == [] and "not the run's" not in err


def test_versions_upgraded_since_the_run_are_named_though_the_outputs_match(ran):
    runs, run_id = ran
    now = json.loads((runs / run_id / "record.json").read_text())["versions"]
    _edit(runs, run_id, lambda r: r["versions"].update(numpy="1.26.0", dask=None))
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 0, err
    said = (f"the rerun's library versions are not the run's: dask absent then, {now['dask']} now, "
            f"numpy 1.26.0 then, {now['numpy']} now")
    assert json.loads(out)["changed"] == [said]
    assert f"hetflow: {said}\n" in err


def test_thread_pools_the_environment_set_otherwise_are_named(ran, monkeypatch):
    runs, run_id = ran
    _edit(runs, run_id, lambda r: r["threads"].update(blas=1))
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")  # the user's own setting holds over the recorded threads
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert "the rerun's thread pools are not the run's: blas 1 then, 2 now" in json.loads(out)["changed"]
