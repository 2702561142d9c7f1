"""Where `plan -o`, `report -o` and `schema -o` write: through a symbolic link (the link stays), into a file that
cannot be replaced (a FIFO, a device) as it is, `-` to standard output, and never into a folder that is not there."""

import io
import json
import os
import threading

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: o
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: 1}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def ran(tmp_path):
    path = tmp_path / "o.yaml"
    path.write_text(MANIFEST)
    code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json")
    assert code == 0, err
    return path, tmp_path / "runs", json.loads(out)["run_id"]


def _commands(path, runs, run_id, target):
    return [("plan", str(path), "--format", "json", "-o", str(target)),
            ("report", "--runs-dir", str(runs), run_id, "-o", str(target)),
            ("schema", "-o", str(target))]


def test_a_symbolic_link_is_written_through_and_stays_a_link(ran, tmp_path):
    path, runs, run_id = ran
    (tmp_path / "shared").mkdir()
    for argv in _commands(path, runs, run_id, tmp_path / "link"):
        real = tmp_path / "shared" / "target"
        real.write_text("old")
        link = tmp_path / "link"
        if link.is_symlink():
            link.unlink()
        link.symlink_to(real)
        code, out, err = cli(*argv)
        assert code == 0, (argv, err)
        assert link.is_symlink() and os.readlink(link) == str(real), argv
        assert real.read_text() != "old" and len(real.read_text()) > 100, argv


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are a POSIX file")
def test_a_fifo_is_written_into_not_replaced(ran, tmp_path):
    path, runs, run_id = ran
    for argv in _commands(path, runs, run_id, tmp_path / "pipe"):
        fifo = tmp_path / "pipe"
        if not fifo.exists():
            os.mkfifo(fifo)
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
        reader.start()
        code, out, err = cli(*argv)
        reader.join(30)
        assert code == 0, (argv, err)
        assert fifo.exists() and not fifo.is_file() and len(got[0]) > 100, argv


def test_a_dash_is_standard_output_and_a_missing_folder_is_bad_input(ran, tmp_path):
    path, runs, run_id = ran
    code, out, err = cli("report", "--runs-dir", str(runs), run_id, "-o", "-")
    assert code == 0 and out.startswith("<!DOCTYPE html>") and not (tmp_path / "-").exists(), err
    code, out, err = cli("plan", str(path), "--format", "json", "-o", "-")
    assert code == 0 and json.loads(out)["name"] == "o" and err == "", err
    for argv in _commands(path, runs, run_id, tmp_path / "missing" / "x"):
        code, out, err = cli(*argv)
        assert code == 2, (argv, err)
        assert f"-o {tmp_path / 'missing' / 'x'}: cannot write: No such file or directory" in err, (argv, err)
    assert not (tmp_path / "missing").exists()
