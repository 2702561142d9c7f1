"""Sweeps use the cores (issue 30): concurrent runs' BLAS pools are capped, read back from inside a running op."""

import json
import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest
import threadpoolctl

import hetflow
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.threads import USER_THREAD_VARS, usable_cores, width
from hetflow.executors import probe

REPO = Path(__file__).resolve().parent.parent

# The op asks the libraries themselves, from the thread that runs it, after a BLAS call of its own: what a
# real op's BLAS uses, not what hetflow believes it set.
OPS = '''\
import threadpoolctl
from hetflow import op


@op("t.blas_threads")
def blas_threads(xp, x):
    x @ x
    n = min(lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas")
    return xp.full(x.shape, n, dtype=x.dtype)
'''

SWEEP = """\
version: 1
name: pools
plugins: [ops.py]
params: {seed: 1}
matrix: {seed: [1, 2, 3, 4]}
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [64, 64], seed: "${seed}"}}
  n: {op: t.blas_threads, inputs: [x]}
outputs: {n: n}
"""


def blas_now() -> int:
    return min(lib["num_threads"] for lib in threadpoolctl.threadpool_info() if lib["user_api"] == "blas")


@pytest.fixture
def sweep_file(tmp_path):
    (tmp_path / "ops.py").write_text(OPS)
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP)
    return path


@pytest.fixture(autouse=True)
def no_user_limits(monkeypatch):
    for var in USER_THREAD_VARS:
        monkeypatch.delenv(var, raising=False)


def seen(sweep) -> list[int]:
    """The BLAS threads each point's op saw, and check its record says the same."""
    out = []
    for run in sweep.runs:
        assert run is not None and run.status == "succeeded"
        n = int(run.outputs["n"].flat[0])
        assert run.record["threads"]["blas"] == n and run.record["threads"]["set_by"] == "hetflow"
        assert run.record["threads"]["cores"] == usable_cores()
        out.append(n)
    return out


def test_a_parallel_sweep_caps_each_points_pool_and_gives_it_back(sweep_file, tmp_path):
    before = blas_now()
    cores = usable_cores()
    s = hetflow.sweep(sweep_file, runs_dir=tmp_path / "runs", parallel=2, cache=False)
    assert s.status == "succeeded"
    assert seen(s) == [max(1, cores // 2)] * 4
    assert all(r.record["threads"]["concurrent"] == 2 for r in s.runs)
    assert blas_now() == before  # the pools are the process's own again

    # one point at a time: no contention, the pool as it was
    s = hetflow.sweep(sweep_file, runs_dir=tmp_path / "runs1", parallel=1, cache=False)
    assert seen(s) == [before] * 4


def test_an_in_process_run_then_a_parallel_sweep(sweep_file, tmp_path):
    # the first attempt's bug: after an in-process run, a limit set for a sweep's points never reached the ops.
    # threadpoolctl lets only the first thread that limited OpenBLAS limit it again while that thread lives, and
    # silently ignores the others: here a thread of the user's own (a notebook's, a server's) holds that role
    run = hetflow.run(REPO / "pipelines" / "decoder.yaml", runs_dir=tmp_path / "runs", cache=False)
    assert run.ok and run.record["threads"]["set_by"] == "hetflow"
    holding, release = threading.Event(), threading.Event()

    def users_thread() -> None:
        with threadpoolctl.threadpool_limits(limits=blas_now(), user_api="blas"):
            holding.set()
            release.wait(60)

    other = threading.Thread(target=users_thread)
    other.start()
    swept = {}
    try:
        assert holding.wait(10)
        # and the sweep called from a thread of its own, as a server would: neither thread had limited OpenBLAS
        caller = threading.Thread(target=lambda: swept.update(s=hetflow.sweep(
            sweep_file, runs_dir=tmp_path / "runs", parallel=2, cache=False)))
        caller.start()
        caller.join()
    finally:
        release.set()
        other.join()
    assert seen(swept["s"]) == [max(1, usable_cores() // 2)] * 4


@pytest.mark.skipif(usable_cores() < 2, reason="one core: hetflow's limit and the user's are both 1")
def test_a_users_variable_is_theirs(sweep_file, tmp_path):
    # a fresh process: a BLAS library reads its variable when it loads. Every core, where hetflow would give
    # each of the two points half (OpenBLAS caps a larger value at the cores)
    mine = str(usable_cores())
    env = {**{k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}, "OPENBLAS_NUM_THREADS": mine}
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(sweep_file), "--parallel", "2",
                           "--no-cache", "--quiet", "--runs-dir", str(runs)], env=env, capture_output=True, text=True,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(p.read_text()) for p in runs.glob("*/record.json")]
    assert len(records) == 4
    for record in records:
        assert record["threads"]["set_by"] == "user" and record["threads"]["user"] == {"OPENBLAS_NUM_THREADS": mine}
        assert record["threads"]["blas"] == int(mine)
    assert {int(hetflow.open_run(p.parent).outputs["n"].flat[0]) for p in runs.glob("*/record.json")} == {int(mine)}


def test_width_is_the_partitions_that_may_run_at_once(tmp_path):
    fan = textwrap.dedent("""\
        version: 1
        name: fan
        executors: {a: {vendor: cpu}, b: {vendor: cpu}, c: {vendor: cpu}}
        stages:
          x: {op: arange, args: {stop: 4}, executor: a}
          p: {op: relu, inputs: [x], executor: b}
          q: {op: relu, inputs: [x], executor: c}
          y: {op: add, inputs: [p, q], executor: a}
        outputs: {y: y}
        """)
    path = tmp_path / "fan.yaml"
    path.write_text(fan)
    plan = make_plan(compile_manifest(load(str(path))), probe)
    assert len(plan.partitions) >= 3
    assert width(plan, 8) == 2 and width(plan, 1) == 1


@pytest.mark.skipif(usable_cores() < 2, reason="one core: hetflow's limit and Dask's are both 1")
def test_a_local_clusters_workers_take_their_share_of_the_cores(sweep_file, tmp_path):
    # one worker of one thread: its BLAS may use every core, where Dask's nanny leaves every worker at 1
    s = hetflow.sweep(sweep_file, runs_dir=tmp_path / "runs", workers=1, threads_per_worker=1, parallel=2,
                      cache=False)
    cores = usable_cores()
    assert seen(s) == [cores] * 4
    for run in s.runs:
        pools = run.record["threads"]
        assert pools["partitions_at_once"] == 1 and pools["set_by"] == "hetflow"
        assert [(w["blas"], w["cores"], w["set_by"]) for w in pools["workers"].values()] == [(cores, cores, "hetflow")]


PRIMING = """\
import json, numpy, threadpoolctl
from hetflow.engine.run import threads

def blas():
    return [lib for lib in threadpoolctl.ThreadpoolController().lib_controllers
            if lib.internal_api == "openblas" and lib.threading_layer != "openmp"]

libs = blas()
if not libs:
    print("none")
    raise SystemExit
for lib in libs:
    threads._set_shared(lib, 1)
pools = threads.Pools(cores=2, environ={})
with pools.claim(2):
    inside = [lib.get_num_threads() for lib in blas()]
after = [lib.get_num_threads() for lib in blas()]
threads._prime_openblas(blas(), 2)
again = [lib.get_num_threads() for lib in blas()]
print(json.dumps({"primed": threads._PRIMED, "inside": inside, "after": after, "again": again}))
"""


def test_openblas_is_primed_once_at_several_threads_and_keeps_the_limits_it_had():
    """The GEMM run on several threads before the first limit (``threads._prime_openblas``) gives each pool back
    the limit it had: one thread that a user or Dask's nanny set stays one thread, inside the claim and after it."""
    env = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    done = subprocess.run([sys.executable, "-c", PRIMING], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    if done.stdout.strip() == "none":
        pytest.skip("numpy's BLAS here is not OpenBLAS on pthreads")
    seen = json.loads(done.stdout)
    assert seen["primed"] == [True, True]  # once by the claim, once by the call of its own
    assert seen["inside"] and set(seen["inside"]) == {1}
    assert seen["after"] and set(seen["after"]) == {1}
    assert seen["again"] and set(seen["again"]) == {1}


@pytest.mark.skipif(usable_cores() < 2, reason="one core: a point of a --parallel sweep and a run alone both get 1")
def test_verify_reruns_a_point_of_a_parallel_sweep_at_the_threads_it_had(sweep_file, tmp_path):
    """A point of a --parallel 2 sweep ran its BLAS on cores // 2 threads; verify reran it alone, on every core,
    and a float sum in another order was a MISMATCH with "no cause visible in the records"."""
    import io

    from hetflow.engine.cli import main
    from hetflow.engine.store.compare import diff_runs, mismatch_causes

    runs, before = tmp_path / "runs", blas_now()
    s = hetflow.sweep(sweep_file, runs_dir=runs, parallel=2, cache=False)
    point = s.runs[0]
    assert seen(s)[0] == usable_cores() // 2
    out, err = io.StringIO(), io.StringIO()
    assert main(["verify", point.run_id, "--runs-dir", str(runs), "--json"], out=out, err=err) == 0, out.getvalue()
    said = json.loads(out.getvalue())
    assert said["match"] is True, said
    rerun = hetflow.open_run(said["rerun_id"], runs_dir=runs)
    assert rerun.record["threads"]["blas"] == point.record["threads"]["blas"] == usable_cores() // 2
    assert blas_now() == before  # verify gave the pools back

    alone = hetflow.run(sweep_file, runs_dir=runs, point="seed=1", cache=False)
    assert int(alone.outputs["n"].flat[0]) == usable_cores()  # a run alone: the pool as it is, every core
    d = diff_runs(str(runs), point.run_id, alone.run_id)
    assert d["threads"] == [("blas", usable_cores() // 2, usable_cores())], d["threads"]
    causes = mismatch_causes(point.record, alone.record, "n")
    assert causes == [f"thread pools differ: blas {usable_cores() // 2} -> {usable_cores()} threads (a float sum's "
                      "order follows its threads)"], causes


def test_a_point_of_a_parallel_sweep_resumed_alone_goes_on_at_its_threads_and_takes_what_it_finished(tmp_path):
    """A --parallel 2 sweep stopped midway and resumed without --parallel ran its points alone on every core: the
    partitions they had finished, stored at one BLAS thread of two cores, were computed again at two (and the
    fault campaign counted them as finished partitions run twice)."""
    if usable_cores() < 2:
        pytest.skip("one core: a --parallel 2 point has the threads a run alone has")
    (tmp_path / "ops.py").write_text(OPS)
    path = tmp_path / "two.yaml"
    path.write_text(SWEEP.replace("[1, 2, 3, 4]", "[1, 2]").replace("{host: {vendor: cpu}}",
                                                                      "{a: {vendor: cpu}, b: {vendor: cpu}}")
                    .replace('seed: "${seed}"}}', 'seed: "${seed}"}, executor: a}')
                    .replace("inputs: [x]}", "inputs: [x], executor: a}\n  m: {op: t.blas_threads, inputs: [n], "
                                             "executor: b}").replace("{n: n}", "{n: n, m: m}"))
    runs, before = tmp_path / "runs", blas_now()

    def stop(event: dict) -> None:
        if event.get("kind") == "partition" and event.get("event") == "finished":
            raise RuntimeError("stopped after the first partition")

    with pytest.raises(RuntimeError, match="stopped after the first partition"):
        hetflow.sweep(path, runs_dir=runs, parallel=2, on_event=stop)
    firsts = {r.run_id: r.record for r in (hetflow.open_run(p.parent.name, runs_dir=runs)
                                           for p in runs.glob("*/record.json"))}
    assert firsts and all(r["threads"]["blas"] == usable_cores() // 2 for r in firsts.values()), firsts
    resumed = hetflow.sweep(path, runs_dir=runs, resume="latest")
    assert resumed.status == "succeeded"
    for run in resumed.runs:
        if run.run_id not in firsts:
            continue  # a point its sweep had not begun runs anew, alone
        assert run.record["cache"]["other_threads"] == {}, run.record["cache"]
        assert run.record["cache"]["hits"] == ["p0"], run.record["cache"]
        assert run.record["threads"]["blas"] == usable_cores() // 2
        assert int(run.outputs["n"].flat[0]) == int(run.outputs["m"].flat[0]) == usable_cores() // 2
    assert blas_now() == before


def test_pins_held_from_two_threads_end_in_any_order():
    """Two resumed points of a --parallel sweep pin the pools from their own threads: the first to end put back
    the limit the pools had before it, while the other's still held, and the last left them pinned for good."""
    from hetflow.engine.run.threads import Pools

    pools, before = Pools(cores=4, environ={}), blas_now()
    first, second = pools.pinned(1), pools.pinned(3)
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert pools.limit() == 3
    second.__exit__(None, None, None)
    assert pools.limit() == 4 and blas_now() == before


def test_a_killed_run_resumed_goes_on_at_the_threads_its_stored_entries_name(tmp_path):
    """A run killed by SIGKILL never wrote its threads in its record: resumed at other threads (its first process
    had OMP_NUM_THREADS=1, the shell that resumed it none) it computed every partition it had finished again."""
    import signal
    import time

    if usable_cores() < 2:
        pytest.skip("one core: one BLAS thread is what a run alone has")
    (tmp_path / "ops.py").write_text(OPS + textwrap.dedent('''
        import time


        @op("t.wait")
        def wait(xp, x):
            time.sleep(0.5)
            return x
        '''))
    stages = ["  x: {op: random.normal, args: {shape: [64, 64], seed: 1}, executor: a}"]
    for i in range(6):
        stages.append(f"  n{i}: {{op: t.blas_threads, inputs: [{'x' if i == 0 else f'w{i - 1}'}], "
                      f"executor: {'ab'[i % 2]}}}")
        stages.append(f"  w{i}: {{op: t.wait, inputs: [n{i}], executor: {'ab'[i % 2]}}}")
    path = tmp_path / "chain.yaml"
    path.write_text("version: 1\nname: chain\nplugins: [ops.py]\nexecutors: {a: {vendor: cpu}, b: {vendor: cpu}}\n"
                    "stages:\n" + "\n".join(stages) + "\noutputs: {y: w5}\n")
    runs = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k not in USER_THREAD_VARS}
    proc = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--runs-dir", str(runs),
                             "--quiet"], env={**env, "OMP_NUM_THREADS": "1"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list(runs.glob(".cache/*/*/entry.json"))) < 3 and proc.poll() is None:
            assert time.monotonic() < deadline, "the run stored no three entries in 120 s"
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    stored = len(list(runs.glob(".cache/*/*/entry.json")))
    first = hetflow.open_run("latest", runs_dir=runs)
    assert first.status == "died" and "threads" not in first.record
    again = hetflow.run(path, runs_dir=runs, resume="latest")
    cache = again.record["cache"]
    assert cache["other_threads"] == {} and len(cache["hits"]) >= min(stored, 3), cache
    assert again.record["threads"]["blas"] == 1 and int(again.outputs["y"].flat[0]) == 1
