import os
import textwrap
from pathlib import Path

import pytest

from hetflow.executors.emulator.cache import cache_root

REPO = Path(__file__).resolve().parent.parent

try:  # Hypothesis keeps its example database and caches in ./.hypothesis unless told: the user's cache folder
    from hypothesis import configuration as _hypothesis

    _hypothesis.set_hypothesis_home_dir(os.path.join(cache_root(), "hypothesis"))
except ImportError:
    pass


@pytest.fixture
def manifest_file(tmp_path):
    """Write dedented YAML to a file and return its path (as str)."""

    def write(text: str, name: str = "m.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: without it installed the suite still runs, in one process
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: a worker per core, at most four. Each worker sets up the module fixtures of the modules whose
    tests it is sent (a built wheel, a Dask cluster, compiled guests), so more workers pay them over and over."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))


@pytest.fixture
def registry():
    """The op registry put back as it was: a test's plugins define ops, and later tests' manifests name the same."""
    from hetflow.executors import ops

    before = dict(ops.REGISTRY)
    yield
    ops.REGISTRY.clear()
    ops.REGISTRY.update(before)
