"""verify reruns the manifest a run's record keeps; where the manifest file the run came from was edited since
(or removed), it says so, so that "all outputs match" is not read as "the file still reproduces"."""

from __future__ import annotations

import io
import json
import os

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: me
params: {k: 2.0, n: 2}
matrix: {n: [3, 4]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}}
  y: {op: mul, inputs: [x], args: {value: "${k}"}}
outputs: {y: y}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def ran(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(path), "--runs-dir", str(runs), "--quiet", "-p", "k=3.0", "--json")
    assert code == 0, err
    return path, runs, {p["name"]: p["run_id"] for p in json.loads(out)["points"]}


def _verify(runs, run_id):
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 0, err  # the run's own manifest still reproduces its outputs
    return json.loads(out)["changed"], err


def test_an_untouched_or_only_touched_manifest_is_not_said_to_have_changed(ran):
    path, runs, ids = ran
    assert _verify(runs, ids["me[n=4]"])[0] == []
    path.write_text(MANIFEST.replace("version: 1", "# a comment\nversion: 1"))  # written since, the same manifest
    os.utime(path)
    assert _verify(runs, ids["me[n=4]"])[0] == []


@pytest.mark.parametrize("edit, what", [
    (lambda text: text.replace("value: \"${k}\"", "value: 5.0"), "it resolves to another manifest now"),
    (lambda text: text.replace("stages:", "stages: {"), "it no longer compiles: "),
])
def test_an_edited_manifest_file_is_said_to_be_no_longer_the_one_verified(ran, edit, what):
    path, runs, ids = ran
    path.write_text(edit(MANIFEST))
    os.utime(path)
    changed, err = _verify(runs, ids["me[n=3]"])
    said = f"the manifest file {path} has changed since the run ({what}"
    assert len(changed) == 1 and changed[0].startswith(said), changed
    assert changed[0].endswith(f"verify reran the manifest the run's record keeps: run {path} anew for the change")
    assert f"hetflow: {said}" in err


def test_a_manifest_file_removed_since_the_run_is_said_to_be_gone(ran):
    path, runs, ids = ran
    path.unlink()
    changed, _ = _verify(runs, ids["me[n=3]"])
    assert changed == [f"the manifest file {path} the run came from is no longer there; verify reran the manifest "
                       "its record keeps"]
