"""The MO and RH runners no one awaits are stopped, never left in LLVM when the process ends.

Seen: a script that ran ``execute(program, backend="native")`` and read
only the main execution's output, and ``hetflow run`` of a pipeline whose
guest exited with a code it does not accept, ended while a runner was
still translating the program for its own mode; the process's exit
destroyed LLVM's global context under the code generator: a segmentation
fault (exit status 139) or an LLVM assertion (134) in 3 of 10 such runs,
1 in 24-48 scripts, instead of the status the program chose, and a
linker run cut off left its temporary file in the cache.

The runs here load the main execution's translation from a cache the test
fills first, so the main execution ends in milliseconds while the runners
still have seconds of translating ahead of them: the moment the fault
needs, every time.
"""

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from _guests import GUESTS

pytestmark = pytest.mark.skipif(find_spec("llvmlite") is None, reason="llvmlite is not installed (the native backend)")

REPO = Path(__file__).resolve().parents[2]
SHA256 = GUESTS / "sha256.elf"
#: the MO and RH runners' threads
RUNNER_THREADS = ("hetflow-MO", "hetflow-RH")

# fills the cache with the main execution's translation alone (no runner: their modes stay untranslated)
_MAIN_ONLY = """
import sys
from hetflow.executors.emulator import execute, load_elf
out = execute(load_elf(sys.argv[1]), backend="native", runners=False)
assert out.exit_code == 0
"""

# the script's own exit handler is registered before hetflow's, so it runs after it (last registered, first run)
_DROPS_ITS_RUNNERS = """
import atexit, sys, threading

def after_hetflow():
    live = sorted(t.name for t in threading.enumerate() if t.name in ("hetflow-MO", "hetflow-RH") and t.is_alive())
    print("live at exit:", live, flush=True)

atexit.register(after_hetflow)
from hetflow.executors.emulator import execute, load_elf
out = execute(load_elf(sys.argv[1]), backend="native")
print("exit code", out.exit_code, "cached", out.extra["translation"]["cached"], flush=True)
"""


def _env(cache: Path) -> dict:
    return {**os.environ, "HETFLOW_NATIVE_CACHE": str(cache)}


def _main_translation_cached(cache: Path) -> None:
    done = subprocess.run([sys.executable, "-c", _MAIN_ONLY, str(SHA256)], env=_env(cache), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert len(list(cache.glob("*.so"))) == 1


def test_a_script_that_never_awaits_its_runners_ends_with_them_stopped_and_its_own_status(tmp_path):
    cache = tmp_path / "native"
    _main_translation_cached(cache)
    done = subprocess.run([sys.executable, "-c", _DROPS_ITS_RUNNERS, str(SHA256)], env=_env(cache),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["exit code 0 cached True", "live at exit: []"], done.stdout + done.stderr
    assert done.stderr == ""
    # the runners stopped between parts, before linking: no shared object of theirs, no linker's temporary file
    assert len(list(cache.glob("*.so"))) == 1
    assert not list(cache.glob("*.tmp"))


def test_stopped_runners_say_so_when_awaited(tmp_path):
    cache = tmp_path / "native"
    _main_translation_cached(cache)
    script = """
import sys
from hetflow.executors.emulator import RunnerFailed, execute, load_elf
out = execute(load_elf(sys.argv[1]), backend="native")
out.backend.stop()
for name, wait in (("MO", out.backend.await_mem_plans), ("RH", out.backend.await_rom_histogram)):
    try:
        wait()
        print(name, "finished")
    except RunnerFailed as e:
        print(name, "failed:", e.message)
print(out.backend)
"""
    done = subprocess.run([sys.executable, "-c", script, str(SHA256)], env=_env(cache), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [line.split(":")[0] for line in lines[:2]] == ["MO failed", "RH failed"], done.stdout
    assert all("stopped before its end" in line for line in lines[:2]), done.stdout
    assert lines[2] == "BackendArtifacts.native(mo=None, rh=None)"


_REFUSED_EXIT = """\
version: 1
name: refused_exit
emulators:
  guest:
    backend: native
    program: {program}
    chunk_steps: 1024
    accept_exit: [5]
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: guest}}
  mem: {{phase: mem-plans, inputs: [run]}}
  rom: {{phase: rom-histogram, inputs: [run]}}
outputs:
  mem_plans: mem.count
  rom_pcs: rom.pcs
"""


def test_a_pipeline_whose_guest_exit_is_not_accepted_stops_its_runners_and_exits_1(tmp_path):
    cache = tmp_path / "native"
    _main_translation_cached(cache)
    manifest = tmp_path / "p.yaml"
    manifest.write_text(_REFUSED_EXIT.format(program=SHA256))
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest),
                           "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json"],
                          env=_env(cache), capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    assert json.loads(done.stdout)["status"] == "failed"
    assert "the guest exited with code 0" in done.stderr
    assert "Traceback" not in done.stderr and "Assertion" not in done.stderr
    assert not list(cache.glob("*.tmp"))


def test_a_failed_pipeline_in_a_process_that_goes_on_leaves_no_runner_replaying_its_guest(tmp_path):
    """In a process that outlives the run (a notebook, ``schedule serve``), the runners of a phase that failed
    went on translating and replaying the whole guest for no one."""
    cache = tmp_path / "native"
    _main_translation_cached(cache)
    manifest = tmp_path / "p.yaml"
    manifest.write_text(_REFUSED_EXIT.format(program=SHA256))
    script = """
import sys, threading
import hetflow
run = hetflow.run(sys.argv[1], runs_dir=sys.argv[2])
print(run.status, flush=True)
runners = [t for t in threading.enumerate() if t.name in sys.argv[3:]]
for t in runners:
    t.join(300)
print("still going:", [t.name for t in runners if t.is_alive()])
"""
    done = subprocess.run([sys.executable, "-c", script, str(manifest), str(tmp_path / "runs"), *RUNNER_THREADS],
                          env=_env(cache),
                          capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["failed", "still going: []"], done.stdout
    # the main execution's translation alone: the runners stopped before translating theirs through
    assert len(list(cache.glob("*.so"))) == 1
