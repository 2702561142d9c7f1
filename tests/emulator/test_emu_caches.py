"""No cache in the source folders (issue 33): what the emulator compiles goes
to the user's cache folder, never beside the modules.

Each test starts a fresh process with ``NUMBA_CACHE_DIR`` and
``HETFLOW_NATIVE_CACHE`` unset and ``XDG_CACHE_HOME`` pointing at an
empty folder, as a user's first run would be: numba reads its cache
setting when a kernel is decorated, and the native backend's translations
are found or written per process.  The process runs what compiles (the
main execution, the MO and RH runners, a chunk's witness table), and the
test compares every compiled or cached file under the repository's
package folders before and after: none may appear or change there, and
the run's own must be found in the temporary cache.
"""

import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from _guests import GUESTS

REPO = Path(__file__).resolve().parents[2]
#: the folders setup.py installs as the hetflow package, and the tests beside them
SOURCE_FOLDERS = ["hetflow", "engine", "executors", "schemas", "examples", "pipelines", "tests"]
#: numba's index and data, object code, shared objects and the native cache's descriptions
CACHE_SUFFIXES = (".nbi", ".nbc", ".o", ".so", ".meta")

_SCRIPT = """
import sys
from hetflow.executors.emulator import execute, load_elf, witness_table
program = load_elf(sys.argv[2])
out = execute(program, backend=sys.argv[1], input=b"cache", chunk_steps=4096)
assert out.exit_code == 0, out.exit_code
out.backend.await_mem_plans()
out.backend.await_rom_histogram()
witness_table(program, out.min_traces[0], input_size=5, backend=sys.argv[1])
print(out.steps)
"""


def _cached_files(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.suffix in CACHE_SUFFIXES and p.is_file()}


def _source_caches() -> dict[Path, int]:
    found = {}
    for name in SOURCE_FOLDERS:
        found.update(_cached_files(REPO / name))
    return found


def _run_cold(backend: str, tmp_path: Path) -> Path:
    """Run ``backend`` in a fresh process with an empty user cache; the cache folder."""
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "HETFLOW_NATIVE_CACHE")}
    cache = tmp_path / "xdg"
    cache.mkdir()
    env["XDG_CACHE_HOME"] = str(cache)
    before = _source_caches()
    # from a scratch folder: a checkout's ./hetflow must not shadow the installed package
    done = subprocess.run([sys.executable, "-c", _SCRIPT, backend, str(GUESTS / "fib.elf")], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=900)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 0
    # and the command line, which keeps the ELF's layout in the cache too
    cli = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", "--backend", backend,
                          str(GUESTS / "sort.elf")], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=900)
    assert cli.returncode == 0, cli.stderr
    after = _source_caches()
    changed = sorted(str(p.relative_to(REPO)) for p in after if before.get(p) != after[p])
    assert not changed, f"the {backend} backend wrote cache files into the source folders: {changed}"
    return cache / "hetflow"


@pytest.mark.skipif(find_spec("llvmlite") is None, reason="llvmlite is not installed (the native backend)")
def test_the_native_backend_caches_in_the_users_cache_only(tmp_path):
    root = _run_cold("native", tmp_path)
    native = _cached_files(root / "native")
    suffixes = {p.suffix for p in native}
    # the parts' object code, each translation's description, and the layout of the ELF the command ran
    assert {".o", ".meta"} <= suffixes, sorted(p.name for p in native)
    assert any(p.name.startswith("elf") and p.suffix == ".meta" for p in native), sorted(p.name for p in native)
    assert not (root / "numba").exists() or not _cached_files(root / "numba"), "the native backend ran numba"


# The fast backend's cold compile (15-60 s) is paid once in the suite, by
# test_emu_defaults.test_a_cold_fast_backend_says_it_compiles_and_caches_in_the_users_cache, which checks that
# numba's files land in the user's cache and none in the package's folder.


def _aged(path: Path, size: int, days_ago: float) -> Path:
    """A cache file of ``size`` bytes last used ``days_ago`` days ago."""
    import time

    path.write_bytes(b"\0" * size)
    when = time.time() - days_ago * 86400
    os.utime(path, (when, when))
    return path


def test_trim_removes_the_least_recently_used_files_down_to_three_quarters_of_the_cap(tmp_path):
    from hetflow.executors.emulator.cache import trim

    mib = 1 << 20
    # last used a day apart, the first longest ago; the order they were written in says nothing
    files = [_aged(tmp_path / f"t{i}.so", mib, 8 - i) for i in reversed(range(8))][::-1]
    stale = tmp_path / "t9.so12345.tmp"
    fresh = tmp_path / "t10.so67890.tmp"
    _aged(stale, 10, 2)
    fresh.write_bytes(b"x")
    assert trim(str(tmp_path), max_mb=8) == 1          # within the cap: only the stale temporary file goes
    assert not stale.exists() and fresh.exists() and all(p.exists() for p in files)
    (tmp_path / "new.so").write_bytes(b"\0" * mib)   # over the cap: down to 6 MiB, the least recently used first
    assert trim(str(tmp_path), max_mb=8) == 3
    assert [p.exists() for p in files] == [False, False, False] + [True] * 5
    assert (tmp_path / "new.so").exists() and fresh.exists()
    assert trim(str(tmp_path), max_mb=0) == 0 and len(list(tmp_path.iterdir())) == 7    # 0: no cap
    mine = _aged(tmp_path / "notes.txt", 8 << 20, 400)                    # not the cache's: never removed
    assert trim(str(tmp_path), max_mb=1) == 6 and mine.exists() and fresh.exists()


def test_trim_warns_of_a_cap_it_cannot_read_and_keeps_the_default(tmp_path, monkeypatch):
    from hetflow.executors.emulator.cache import trim

    monkeypatch.setenv("HETFLOW_NATIVE_CACHE_MAX_MB", "2G")
    _aged(tmp_path / "old.so", 1 << 20, 30)
    with pytest.warns(UserWarning, match=r"HETFLOW_NATIVE_CACHE_MAX_MB is '2G', not a whole number of MiB"):
        assert trim(str(tmp_path)) == 0
    assert (tmp_path / "old.so").exists()


@pytest.mark.skipif(find_spec("llvmlite") is None, reason="llvmlite is not installed (the native backend)")
def test_a_translation_written_past_the_cap_trims_the_native_cache_and_the_next_run_loads_it(tmp_path):
    """Every program and seed set adds a translation of a megabyte or more: the cache grew without end (2.3 GiB,
    17,746 files within two days of development)."""
    cache = tmp_path / "native"
    cache.mkdir()
    old = [_aged(cache / f"old{i}.so", 1 << 20, 10 + i) for i in range(4)]
    env = {**os.environ, "HETFLOW_NATIVE_CACHE": str(cache), "HETFLOW_NATIVE_CACHE_MAX_MB": "4"}
    script = ("import sys\nfrom hetflow.executors.emulator import execute, load_elf\n"
              "out = execute(load_elf(sys.argv[1]), backend='native', chunk_steps=1 << 20)\n"
              "print(out.exit_code, out.extra['translation']['cached'])\n")
    runs = [subprocess.run([sys.executable, "-c", script, str(GUESTS / "sha256.elf")], capture_output=True,
                           text=True, env=env, cwd=tmp_path, timeout=600) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert [r.stdout.split() for r in runs] == [["0", "False"], ["0", "True"]]
    kept = [p.exists() for p in old]           # old[3] was used longest ago: the oldest go first
    assert kept[2:] == [False, False] and kept == sorted(kept, reverse=True), kept
    assert sum(p.stat().st_size for p in cache.iterdir()) <= 3 << 20
