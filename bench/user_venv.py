"""A fresh virtual environment holding hetflow as a user installs it: the built wheel, its dependencies, Unicorn.

Whole-process benchmarks (``bench_startup``, the native backend's
whole-process row of ``bench_emulator``) time both sides under its
interpreter, so that both pay the same Python start-up and neither pays
for what this machine's own interpreter adds at start (a site-packages
``.pth`` that imports certifi, the editable install's import finder).

:func:`user_python` builds the wheel of this checkout with ``pip wheel
--no-deps``, creates a venv under the user's cache folder (``~/.cache/hetflow/bench``)
named after the digest of the wheel's contents (its ``RECORD``, which
lists every file's hash; the zip's own bytes change with file times), and
installs the wheel with its dependencies and Unicorn from the package
index or pip's cache.  A rerun with unchanged sources finds the venv and
only rebuilds the wheel.  Where the venv cannot be made it returns the
running interpreter with a note that says so.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from hetflow.executors.emulator.cache import cache_root

__all__ = ["user_python"]

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# the user's cache folder, as the emulator's compiled code: never the source tree
CACHE = Path(cache_root()) / "bench"


def _wheel_digest(wheel: Path) -> str:
    with zipfile.ZipFile(wheel) as z:
        record = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
        return hashlib.sha256(z.read(record)).hexdigest()[:16]


def _build_wheel(tmp: Path) -> Path:
    """The wheel of the working tree's files that git tracks or would track, built in a copy of them (a
    build in place would pick up ``build/``'s leftovers of deleted modules)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            check=True, capture_output=True).stdout.decode().split("\0")
    src = tmp / "src"
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                    str(tmp), str(src)], check=True, capture_output=True, text=True)
    return next(tmp.glob("hetflow-*.whl"))


def _unicorn_requirement() -> str:
    try:
        from importlib.metadata import version

        return f"unicorn=={version('unicorn')}"
    except Exception:  # noqa: BLE001 - no Unicorn here: the venv gets the index's newest
        return "unicorn"


def user_python(*, unicorn: bool = True) -> tuple[Path, str]:
    """The interpreter of a venv with this checkout's wheel installed, and a note saying what it is.

    Returns ``(python, note)``; the console script is ``python.parent / "hetflow"``.
    Falls back to ``sys.executable`` (the note says why) when the wheel
    cannot be built or the venv cannot be installed.
    """
    fallback = Path(sys.executable)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            wheel = _build_wheel(Path(tmp))
            venv = CACHE / f"venv-{_wheel_digest(wheel)}"
            python = venv / "bin" / "python"
            if not (venv / "ready").exists():
                for old in CACHE.glob("venv-*"):
                    shutil.rmtree(old, ignore_errors=True)     # an earlier build's: only the newest is kept
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, text=True)
                subprocess.run([str(python), "-m", "pip", "install", "-q", str(wheel),
                                *([_unicorn_requirement()] if unicorn else [])],
                               check=True, capture_output=True, text=True)
                (venv / "ready").write_text(wheel.name + "\n")
    except (OSError, subprocess.CalledProcessError, StopIteration) as e:
        why = (getattr(e, "stderr", "") or str(e)).strip().splitlines()[-1:] or [type(e).__name__]
        return fallback, f"under {fallback} (no fresh venv with the wheel: {why[0]})"
    return python, f"under a fresh venv holding the wheel ({venv.name}, {sys.version.split()[0]}), both sides"
