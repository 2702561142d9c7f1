"""``report`` of a run whose folder this user may not read (another user's, in a shared runs directory) says so, as
``runs show``, ``runs table`` and ``verify`` do and as ``hetflow runs`` lists it (forbidden), instead of saying there
is no such run (exit 2 either way; nothing written)."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: rfb
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: 3}, executor: h}
outputs: {x: x}
"""

# as root, a folder's permissions hold only without CAP_DAC_OVERRIDE
PLAIN = [] if os.geteuid() != 0 else ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="as root, permissions apply only without CAP_DAC_OVERRIDE (setpriv)")
def test_report_of_a_folder_this_user_may_not_read_says_so(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out=out,
                err=err) == 0, err.getvalue()
    run_id = json.loads(out.getvalue())["run_id"]
    folder = runs / run_id
    os.chmod(folder, 0o000)
    try:
        said = {}
        for command in (["report", run_id, "-o", str(tmp_path / "page.html")], ["runs", "show", run_id],
                        ["runs", "--json"]):
            done = subprocess.run([*PLAIN, sys.executable, "-m", "hetflow.engine.cli", *command, "--runs-dir",
                                   str(runs)], capture_output=True, text=True, timeout=120)
            said[command[0] + (" " + command[1] if command[0] == "runs" else "")] = done
    finally:
        os.chmod(folder, 0o755)
    listed = said["runs --json"]
    assert listed.returncode == 0, listed.stderr
    assert {r["id"]: r["status"] for r in json.loads(listed.stdout)} == {run_id: "forbidden"}
    for name in ("report", "runs show"):
        done = said[name]
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert f"{folder}: the" in done.stderr and "folder cannot be read by this user" in done.stderr, done.stderr
    assert not (tmp_path / "page.html").exists()


SWEEP = MANIFEST.replace("name: rfb\n", "name: rfs\nparams: {k: 1}\nmatrix: {k: [1, 2]}\n").replace(
    "seed: 3", 'seed: "${k}"')


@pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                    reason="as root, permissions apply only without CAP_DAC_OVERRIDE (setpriv)")
def test_a_sweeps_point_whose_run_folder_this_user_may_not_read_reads_forbidden_not_missing(tmp_path):
    (tmp_path / "m.yaml").write_text(SWEEP)
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out=out,
                err=err) == 0, err.getvalue()
    sweep = json.loads(out.getvalue())
    shut = runs / sweep["points"][0]["run_id"]
    page = tmp_path / "page.html"
    os.chmod(shut, 0o000)
    try:
        said = {}
        for command in (["runs", "show", sweep["sweep_id"], "--json"], ["runs", "table", sweep["sweep_id"], "--json"],
                        ["report", sweep["sweep_id"], "-o", str(page)], ["runs", "--json"]):
            said[command[1]] = subprocess.run([*PLAIN, sys.executable, "-m", "hetflow.engine.cli", *command,
                                               "--runs-dir", str(runs)], capture_output=True, text=True, timeout=120)
    finally:
        os.chmod(shut, 0o755)
    for done in said.values():
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    # as hetflow runs lists the folder: there, but not for this user to read; never missing, which says it is gone
    assert {r["id"]: r["status"] for r in json.loads(said["--json"].stdout)}[shut.name] == "forbidden"
    assert [p["status"] for p in json.loads(said["show"].stdout)["points"]] == ["forbidden", "succeeded"]
    assert [r["status"] for r in json.loads(said["table"].stdout)["rows"]] == ["forbidden", "succeeded"]
    row = page.read_text().split(f'data-point="{sweep["points"][0]["name"]}"', 1)[1].split("</tr>", 1)[0]
    assert "forbidden" in row and "missing" not in row and "succeeded" not in row, row
