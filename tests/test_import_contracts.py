"""The layers DESIGN.md states hold as import-linter contracts (``[tool.importlinter]`` in pyproject.toml).

``lint-imports`` finds subpackages by walking the root package's folder,
and this repository keeps ``engine/`` and ``executors/`` beside
``hetflow/``, mapped onto ``hetflow.engine`` and ``hetflow.executors`` at
install time. So each test lays the sources out as a wheel installs them,
in a temporary folder, and runs the checker there: the contracts checked
are the repository's own, on its own files.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("importlinter", reason="import-linter is a dev dependency: pip install -e '.[dev]'")

ROOT = Path(__file__).resolve().parents[1]
CONTRACTS = ("executors never import the engine", "the engine's rooms: each imports only the rooms below it",
             "nothing imports the CLI", "no import cycle among the modules of a folder")


def _installed_layout(into: Path) -> Path:
    """The package's Python sources at the paths a wheel gives them (``hetflow/engine/...``)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "hetflow", into / "hetflow", ignore=ignore)
    for folder in ("engine", "executors"):
        shutil.copytree(ROOT / folder, into / "hetflow" / folder, ignore=ignore)
    return into


def _lint(where: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(where)}
    return subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; "
                           "sys.exit(lint_imports_command())", "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=300)


def test_the_repositorys_imports_keep_every_contract(tmp_path):
    result = _lint(_installed_layout(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    for name in CONTRACTS:
        assert f"{name} KEPT" in result.stdout, result.stdout


ENGINE, LAYERS, CLI, CYCLES = CONTRACTS


@pytest.mark.parametrize("importer, line, broken", [
    # the engine's rooms import the executors, so through them a room would reach a later one
    ("executors/cpu.py", "from hetflow.engine.store import records", {ENGINE, LAYERS}),
    # a room importing a later one: its layer is broken, and the rooms now import each other
    ("engine/manifest/loader.py", "from hetflow.engine.plan import planner", {LAYERS, CYCLES}),
    ("engine/api.py", "from hetflow.engine.cli import main", {LAYERS, CLI, CYCLES}),
    ("engine/run/threads.py", "from hetflow.engine.run import execute", {CYCLES}),
])
def test_a_forbidden_import_breaks_its_contract(tmp_path, importer, line, broken):
    where = _installed_layout(tmp_path)
    path = where / "hetflow" / importer
    # inside a function, as the engine's lazy imports are: the checker counts those too
    path.write_text(path.read_text() + f"\n\ndef _added():\n    {line}\n")
    result = _lint(where)
    assert result.returncode != 0, result.stdout
    for name in CONTRACTS:
        assert f"{name} {'BROKEN' if name in broken else 'KEPT'}" in result.stdout, result.stdout
