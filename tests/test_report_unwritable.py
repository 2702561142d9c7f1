"""``hetflow report`` where its page cannot be written: the run's own folder that may not be written here is the
runs directory's (exit 5, as for every command), an ``-o FILE`` the user may not write is a slip in the command
line (exit 2), a disk that refuses the bytes is the environment's (exit 5); never a traceback, and nothing is
left half written: no temporary file, an earlier page as it was."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: rpu
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [4, 4], seed: 3}, executor: h}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""

# as root, a folder's permissions hold only without CAP_DAC_OVERRIDE
PLAIN = [] if os.geteuid() != 0 else ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
needs_permissions = pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                                       reason="as root, permissions apply only without CAP_DAC_OVERRIDE (setpriv)")


@pytest.fixture
def ran(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out=out,
                err=err) == 0, err.getvalue()
    return runs, json.loads(out.getvalue())["run_id"]


def _report(runs: Path, run_id: str, *extra: str, plain: bool = False, limit: int | None = None):
    def limited():
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([*(PLAIN if plain else []), sys.executable, "-m", "hetflow.engine.cli", "report", run_id,
                           "--runs-dir", str(runs), "--graph", "builtin", *extra], capture_output=True, text=True,
                          timeout=120, preexec_fn=limited, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})


def _one_error(stderr: str) -> str:
    assert "Traceback" not in stderr and "internal error" not in stderr, stderr
    assert len(stderr.splitlines()) == 1, stderr
    return stderr.strip()


@needs_permissions
def test_a_run_folder_that_may_not_be_written_is_the_runs_directorys_and_the_page_can_go_elsewhere(ran, tmp_path):
    runs, run_id = ran
    folder = runs / run_id
    before = sorted(os.listdir(folder))
    os.chmod(folder, 0o555)
    try:
        done = _report(runs, run_id, plain=True)
    finally:
        os.chmod(folder, 0o755)
    assert done.returncode == 5, done.stderr
    said = _one_error(done.stderr)
    assert str(folder / "report.html") in said and "-o FILE" in said, said
    assert sorted(os.listdir(folder)) == before
    elsewhere = tmp_path / "page.html"
    done = _report(runs, run_id, "-o", str(elsewhere), plain=True)
    assert done.returncode == 0, done.stderr
    assert elsewhere.read_text().lstrip().lower().startswith("<!doctype html")


@needs_permissions
def test_an_output_file_the_user_may_not_write_is_bad_input(ran, tmp_path):
    runs, run_id = ran
    shut = tmp_path / "shut"
    shut.mkdir()
    os.chmod(shut, 0o555)
    try:
        done = _report(runs, run_id, "-o", str(shut / "page.html"), plain=True)
    finally:
        os.chmod(shut, 0o755)
    assert done.returncode == 2, done.stderr
    assert _one_error(done.stderr) == f"hetflow: error: -o {shut / 'page.html'}: cannot write: Permission denied"
    assert os.listdir(shut) == []


def test_a_disk_that_refuses_the_page_keeps_the_earlier_one_whole(ran, tmp_path):
    runs, run_id = ran
    (tmp_path / "pages").mkdir()
    page = tmp_path / "pages" / "page.html"
    page.write_text("the earlier page")
    done = _report(runs, run_id, "-o", str(page), limit=2000)
    assert done.returncode == 5, done.stderr
    assert "File too large" in _one_error(done.stderr)
    assert page.read_text() == "the earlier page" and os.listdir(tmp_path / "pages") == ["page.html"]


def test_an_empty_output_path_is_bad_input_and_nothing_is_written(ran):
    runs, run_id = ran
    out, err = io.StringIO(), io.StringIO()
    assert main(["report", run_id, "--runs-dir", str(runs), "-o", ""], out=out, err=err) == 2
    assert err.getvalue() == "hetflow: error: -o: an empty path names no file; give the page's file, or - for " \
                             "standard output\n"
    assert "report.html" not in os.listdir(runs / run_id)
