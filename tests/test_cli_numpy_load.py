"""The CLI's pipeline commands load numpy first; ``validate`` and ``plan``, which compute nothing, with
OpenBLAS's pool at one thread (issue 30's start-up). Each case is a fresh interpreter: the pool is sized as
numpy loads, once per process."""

import json
import os
import subprocess
import sys

import pytest

from hetflow.engine.run.threads import USER_THREAD_VARS

# what the process saw: numpy's BLAS pool as threadpoolctl reads it from the library, and the variable after
PROBE = """
import json, os, sys
from hetflow.engine.cli.main import _load_numpy
_load_numpy(computes=sys.argv[1] == "computes")
import threadpoolctl
pools = [lib for lib in threadpoolctl.threadpool_info() if lib["internal_api"] == "openblas"]
print(json.dumps({"pool": pools[0]["num_threads"] if pools else None,
                  "left": os.environ.get("OPENBLAS_NUM_THREADS"), "numpy": "numpy" in sys.modules}))
"""

PLAIN = """
import json, numpy, threadpoolctl
pools = [lib for lib in threadpoolctl.threadpool_info() if lib["internal_api"] == "openblas"]
print(json.dumps(pools[0]["num_threads"] if pools else None))
"""


def _env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    env.update(extra)
    return env


def _probe(mode: str, env: dict) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, mode], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def _plain(env: dict) -> int | None:
    done = subprocess.run([sys.executable, "-c", PLAIN], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def default_pool() -> int:
    pool = _plain(_env())
    if pool is None:
        pytest.skip("numpy here is not built on OpenBLAS: no pool to size as it loads")
    return pool


def test_a_command_that_only_checks_loads_numpy_with_one_blas_thread_and_leaves_no_variable(default_pool):
    seen = _probe("checks", _env())
    assert seen == {"pool": 1, "left": None, "numpy": True}


def test_a_command_that_computes_keeps_the_default_pool(default_pool):
    seen = _probe("computes", _env())
    assert seen == {"pool": default_pool, "left": None, "numpy": True}


@pytest.mark.parametrize("var", USER_THREAD_VARS)
def test_a_users_own_pool_size_is_left_as_it_is(default_pool, var):
    env = _env(**{var: "2"})
    seen = _probe("checks", env)
    assert seen["pool"] == _plain(env)
    assert seen["left"] == env.get("OPENBLAS_NUM_THREADS")


def test_plan_through_the_console_entry_still_plans(tmp_path):
    from importlib.resources import files

    quickstart = str(files("hetflow.examples") / "quickstart.yaml")
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "plan", quickstart, "--format", "json"],
                          env=_env(), cwd=tmp_path, capture_output=True, text=True, check=True)
    assert [p["id"] for p in json.loads(done.stdout)["partitions"]] == ["p0", "p1", "p2"]
