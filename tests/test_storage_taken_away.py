"""A runs directory taken away while a command uses it: its write permission, a folder removed, a file or folder
put where hetflow keeps its own. Each is the environment's fault (exit 5, one line saying which file and why),
never an internal error, and what the records say stays true.

Permissions are the kernel's own: as root, the child runs without the capabilities that override them
(``setpriv``), as any user would.
"""

import glob
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetflow.engine.errors import is_storage_error

WAIT_OP = "import time\n\nfrom hetflow import op\n\n\n@op('t.wait')\ndef wait(xp, x, *, seconds: float):\n" \
          "    time.sleep(seconds)\n    return x\n"

MANIFEST = """\
version: 1
name: slow
plugins: [ops.py]
params: {seconds: 1.0, k: 0}
MATRIXexecutors: {host: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [4], value: "${k}"}}
  y: {op: t.wait, inputs: [x], args: {seconds: "${seconds}"}}
outputs: {y: y}
"""

PLAIN = [] if os.geteuid() != 0 else ["setpriv", "--bounding-set=-dac_override,-dac_read_search,-fowner"]
needs_permissions = pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None,
                                       reason="as root, permissions apply only without CAP_DAC_OVERRIDE (setpriv)")


def _manifest(folder: Path, matrix: str = "") -> Path:
    (folder / "ops.py").write_text(WAIT_OP)
    path = folder / "m.yaml"
    path.write_text(MANIFEST.replace("MATRIX", matrix))
    return path


def _start(manifest: Path, runs: Path, *extra: str, plain: bool = False) -> subprocess.Popen:
    return subprocess.Popen([*(PLAIN if plain else []), sys.executable, "-m", "hetflow.engine.cli", "run",
                             str(manifest), "--runs-dir", str(runs), "--no-cache", "--quiet", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _appears(pattern: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = glob.glob(pattern)
        if found:
            return found[0]
        time.sleep(0.005)
    raise AssertionError(f"nothing matched {pattern}")


def _one_error(stderr: str) -> str:
    assert "internal error" not in stderr and "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if line.startswith("hetflow: error:")]
    assert len(said) == 1, stderr
    return said[0]


def test_permission_taken_away_is_a_storage_error():
    assert is_storage_error(PermissionError(13, "Permission denied"))


@needs_permissions
def test_a_run_folder_made_read_only_mid_run_is_the_environments_and_its_record_does_not_lie(tmp_path):
    runs = tmp_path / "runs"
    proc = _start(_manifest(tmp_path), runs, plain=True)
    record = _appears(str(runs / "*-slow-*" / "record.json"))
    os.chmod(os.path.dirname(record), 0o555)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        os.chmod(os.path.dirname(record), 0o755)
    assert proc.returncode == 5, err
    said = _one_error(err)
    assert "Permission denied" in said and "reads died once this process has ended" in said, said
    assert json.loads(Path(record).read_text())["status"] == "running"  # which `hetflow runs` reads as died
    listed = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "runs", "--runs-dir", str(runs), "--json"],
                            capture_output=True, text=True, timeout=60)
    assert [r["status"] for r in json.loads(listed.stdout)] == ["died"]


@needs_permissions
def test_run_json_names_the_run_whose_record_could_not_be_written_at_all(tmp_path):
    """The error object named no run: its folder, left with its running record, could not be found from it."""
    runs = tmp_path / "runs"
    proc = _start(_manifest(tmp_path), runs, "--json", plain=True)
    record = _appears(str(runs / "*-slow-*" / "record.json"))
    os.chmod(os.path.dirname(record), 0o555)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        os.chmod(os.path.dirname(record), 0o755)
    assert proc.returncode == 5, err
    said = json.loads(out)
    assert said["exit_code"] == 5 and "reads died" in said["message"], said
    assert said["run_id"] == os.path.basename(os.path.dirname(record)), said


@needs_permissions
def test_a_runs_directory_made_read_only_mid_sweep_fails_its_points_and_says_so(tmp_path):
    runs = tmp_path / "runs"
    proc = _start(_manifest(tmp_path, "matrix: {k: [1, 2, 3, 4]}\n"), runs, "--parallel", "1", plain=True)
    _appears(str(runs / "*-slow-*" / "record.json"))
    os.chmod(runs, 0o555)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        os.chmod(runs, 0o755)
    assert proc.returncode == 5, err
    assert "internal error" not in err and "Traceback" not in err, err
    summary = json.loads(Path(_appears(str(runs / "*-sweep" / "sweep.json"))).read_text())
    assert summary["status"] == "failed" and out.strip().splitlines()[-1] == summary["sweep_id"], (out, summary)
    failed = [p for p in summary["points"] if p["status"] == "failed"]
    assert failed and all("Permission denied" in p["error"] and p["exit_code"] == 5 for p in failed), failed


def test_a_sweep_folder_removed_mid_sweep_is_the_environments(tmp_path):
    runs = tmp_path / "runs"
    proc = _start(_manifest(tmp_path, "matrix: {k: [1, 2, 3]}\n"), runs, "--parallel", "1", "-p", "seconds=0.3")
    summary = _appears(str(runs / "*-sweep" / "sweep.json"))
    folder = os.path.dirname(summary)
    # the sweep may write a file into it while rmtree empties it ("Directory not empty"): removed again, as a
    # person whose rm -rf said so would
    for _ in range(50):
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.exists(folder):
            break
        time.sleep(0.01)
    assert not os.path.exists(folder)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, err
    assert _one_error(err).endswith("was removed while it ran; its summary could not be written"), err


@pytest.mark.parametrize("put", ["a file for .locks", "a folder for a lock file"])
def test_what_takes_the_place_of_the_runs_directorys_locks_is_the_environments(tmp_path, put):
    runs = tmp_path / "runs"
    manifest = _manifest(tmp_path)
    runs.mkdir()
    if put == "a file for .locks":
        (runs / ".locks").write_text("")
        said = "is not a folder; move it away"
    else:
        # the lock file of these params, left by a run killed while it held it, then a folder in its place
        holder = _start(manifest, runs, "-p", "seconds=30")
        lock = Path(_appears(str(runs / ".locks" / "*.lock")))
        _appears(str(runs / "*-slow-*" / "record.json"))
        holder.kill()
        holder.communicate(timeout=60)
        lock.unlink()
        lock.mkdir()
        said = "is a folder, where its lock file goes; move it away"
    proc = _start(manifest, runs, "-p", "seconds=30")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 5, err
    assert _one_error(err).endswith(said), err


@needs_permissions
def test_a_cache_entry_gc_may_not_look_into_is_said_not_passed_over(tmp_path):
    """gc reported every entry removed and exit 0, and the entry it could not look into stayed, unsaid."""
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(_manifest(tmp_path)), "--runs-dir",
                           str(runs), "--quiet", "-p", "seconds=0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    entry = sorted((runs / ".cache").glob("*/*"))[0]
    entry.chmod(0)
    try:
        gc = subprocess.run([*PLAIN, sys.executable, "-m", "hetflow.engine.cli", "runs", "gc", "--keep", "0",
                             "--runs-dir", str(runs), "--json"], capture_output=True, text=True, timeout=120)
    finally:
        entry.chmod(0o755)
    assert gc.returncode == 5, gc.stderr
    said = json.loads(gc.stdout)
    assert [r["path"] for r in said["not_removed"]] == [f"cache entry sha256:{entry.name}"], said
    assert entry.exists()
