"""A run's fixed costs paid once, and bridges folded into their producer's task on the threaded scheduler."""

import gc
import json
import os
import subprocess
from pathlib import Path

import dask.threaded
import numpy as np
import pytest

from hetflow.engine.store import gitstate, records
from hetflow.engine.errors import RunFailed
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import create_executors, execute
from hetflow.engine.run.runtime import _SUBPLANS, LocalRuntime, subgraph_plans
from hetflow.executors import probe

# y is consumed by two partitions on b: one bridge (y@b) shared by both, folded into y's partition
SHARED = """
version: 1
name: shared
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
  c: {vendor: cpu}
stages:
  x:  {op: random.normal, args: {shape: [8, 4], seed: 1}, executor: a}
  y:  {op: relu, inputs: [x]}
  u:  {op: neg, inputs: [y], executor: b}
  k:  {op: exp, inputs: [u], executor: c}
  v:  {op: add, inputs: [y, k], executor: b}
  w:  {op: sum, inputs: [v], args: {axis: 0}, executor: a}
outputs: {w: w, u: u}
"""


# two partitions that may run at once: a run takes a pool of threads
FAN = SHARED.replace("  w:  {op: sum, inputs: [v], args: {axis: 0}, executor: a}\n",
                     "  w:  {op: sum, inputs: [v], args: {axis: 0}, executor: a}\n  z:  {op: neg, inputs: [x], executor: c}\n"
                     ).replace("outputs: {w: w, u: u}", "outputs: {w: w, u: u, z: z}")


def compiled(manifest_file, text):
    m = compile_manifest(load(manifest_file(text)))
    return m, make_plan(m, probe)


def test_folded_lowering_is_one_task_a_partition_and_computes_what_the_separate_tasks_do(manifest_file):
    m, p = compiled(manifest_file, SHARED)
    assert any(len({p.nodes[c].partition for c in b.consumers}) > 1 for b in p.bridges)  # a shared bridge
    folded = LocalRuntime(p, create_executors(p), fold_bridges=True)
    apart = LocalRuntime(p, create_executors(p))
    chained = {f"partition:{pid}" for run in folded.graph.chains.values() for pid in run}
    assert set(folded.graph.dsk) | chained == {f"partition:{q.id}" for q in p.partitions} | {"output:u", "output:w"}
    assert sorted(b for bs in folded.graph.folded.values() for b in bs) == sorted(b.id for b in p.bridges)
    assert folded.graph.reported_tasks() == len(apart.graph.dsk)
    assert folded.graph.refcounts == apart.graph.refcounts
    got = [dask.threaded.get(rt.graph.dsk, list(rt.graph.output_keys.values())) for rt in (folded, apart)]
    for one, other in zip(*got):
        assert one.to_array().tobytes() == other.to_array().tobytes()
    for rt in (folded, apart):
        assert rt.handles.live() == {}
        assert all(ex.live_activations() == 0 for ex in rt.executors.values())


def test_a_threaded_run_lists_every_folded_bridge_with_its_bytes_and_time(manifest_file, tmp_path):
    m, p = compiled(manifest_file, SHARED)
    seen = []
    r = execute(m, p, runs_dir=str(tmp_path), use_cache=False, on_event=seen.append)
    record = json.loads(Path(r.record_path).read_text())
    assert seen[0]["tasks"] == len(p.partitions) + 2 * len(p.bridges) + len(p.outputs)
    for kind in ("export", "import"):
        entries = {t["id"]: t for t in record["tasks"] if t["kind"] == kind}
        assert sorted(entries) == sorted(b.id for b in p.bridges)
        for bridge in p.bridges:
            t = entries[bridge.id]
            assert t["status"] == "succeeded" and t["duration_s"] >= 0 and t["bytes"] > 0
            assert t["executor"] == (bridge.source if kind == "export" else bridge.destination)
    # a bridge's export follows its producer's end, and its import precedes each consumer's start
    start = {(t["kind"], t["id"]): t["offset_s"] for t in record["tasks"]}
    for bridge in p.bridges:
        producer = p.nodes[bridge.tensor].partition
        assert start[("export", bridge.id)] >= start[("partition", producer)]
        for consumer in {p.nodes[c].partition for c in bridge.consumers}:
            assert start[("import", bridge.id)] <= start[("partition", consumer)]
    assert record["live_activations_after"] == {"a": 0, "b": 0, "c": 0}
    apart = LocalRuntime(p, create_executors(p))
    expected = dask.threaded.get(apart.graph.dsk, apart.graph.output_keys["w"])
    assert np.array_equal(np.load(os.path.join(r.run_dir, "w.npy")), expected.to_array())


def test_a_folded_import_that_fails_fails_the_consumer_and_releases_everything(manifest_file, tmp_path):
    m, p = compiled(manifest_file, """
        version: 1
        name: oom
        executors:
          host: {vendor: cpu}
          small: {vendor: cpu, memory_limit: 1KiB}
        stages:
          x: {op: random.normal, args: {shape: [64, 64], seed: 1}, executor: host}
          y: {op: relu, inputs: [x], executor: small}
        outputs: {y: y}
        """)
    with pytest.raises(RunFailed) as caught:
        execute(m, p, runs_dir=str(tmp_path), use_cache=False)
    record = json.loads(Path(caught.value.record_path).read_text())
    assert record["status"] == "failed"
    assert record["error"]["partition"] == p.nodes["y"].partition
    assert "import of 'x'" in record["error"]["message"] and "16384 bytes" in record["error"]["message"]
    failed = [t for t in record["tasks"] if t["status"] == "failed"]
    assert [(t["kind"], t["executor"]) for t in failed] == [("import", "small")]
    assert record["nodes"]["x"]["status"] == "succeeded" and record["nodes"]["y"]["status"] == "not run"
    assert record["live_activations_after"] == {"host": 0, "small": 0}


def test_a_plan_is_encoded_once_for_all_its_runs_and_forgotten_with_it(manifest_file, tmp_path):
    m, p = compiled(manifest_file, SHARED)
    first = subgraph_plans(p)
    assert subgraph_plans(p) is first and LocalRuntime(p, create_executors(p))._subplans is first
    assert sorted(first) == sorted(q.id for q in p.partitions)
    key = id(p)
    del p
    gc.collect()
    assert key not in _SUBPLANS


def test_runs_one_after_another_share_their_pool_threads(manifest_file, tmp_path):
    from hetflow.engine.run import execute as runmod

    m, p = compiled(manifest_file, FAN)
    size = 3  # a size no other test's runs leave idle pools of
    runmod._IDLE_POOLS.pop(size, None)
    execute(m, p, runs_dir=str(tmp_path), use_cache=False, num_workers=size)
    (pool,) = runmod._IDLE_POOLS[size]
    threads = set(pool._threads)
    for _ in range(2):
        r = execute(m, p, runs_dir=str(tmp_path), use_cache=False, num_workers=size)
        assert r.status == "succeeded" and runmod._IDLE_POOLS[size] == [pool], "the one pool, given back"
    assert threads and threads <= set(pool._threads) and all(t.is_alive() for t in threads)
    assert all(t["thread"].startswith("hetflow") for t in r.record["tasks"])


def _git(folder, *args):
    return subprocess.run(["git", "-C", str(folder), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


def test_the_git_state_of_a_dirty_tree_is_asked_once_until_what_changes_it_does(tmp_path, monkeypatch):
    _git(tmp_path, "init", "-q")
    manifest = tmp_path / "p.yaml"
    manifest.write_text("version: 1\n")
    (tmp_path / "other.txt").write_text("a")
    _git(tmp_path, "add", "p.yaml", "other.txt")
    _git(tmp_path, "commit", "-q", "-m", "first")
    first = _git(tmp_path, "rev-parse", "HEAD")
    no_git = tmp_path / "empty-bin"
    no_git.mkdir()
    path = os.environ["PATH"]

    # a clean tree is asked again until its files are watched (tests/test_gitstate.py): an edit of any file
    # may make it dirty without changing the index
    assert records.provenance(str(manifest))["git"] == {"commit": first, "dirty": False, "manifest_dirty": False,
                                                        "path": "p.yaml"}
    monkeypatch.setenv("PATH", str(no_git))
    assert records.provenance(str(manifest))["git"] is None
    monkeypatch.setenv("PATH", path)

    (tmp_path / "other.txt").write_text("b")
    dirty = {"commit": first, "dirty": True, "manifest_dirty": False, "path": "p.yaml"}
    assert records.provenance(str(manifest))["git"] == dirty
    monkeypatch.setenv("PATH", str(no_git))  # git cannot run now: the answer comes from the cache
    assert records.provenance(str(manifest))["git"] == dirty

    # an edit of the manifest changes its stat: asked again (and git is not there to answer)
    manifest.write_text("version: 1\n# edited\n")
    assert records.provenance(str(manifest))["git"] is None
    monkeypatch.setenv("PATH", path)
    assert records.provenance(str(manifest))["git"] == {**dirty, "manifest_dirty": True}

    # a commit moves the branch and rewrites the index: the cached answer is not used
    _git(tmp_path, "commit", "-q", "-a", "-m", "second")
    second = _git(tmp_path, "rev-parse", "HEAD")
    (tmp_path / "untracked.txt").write_text("new")
    monkeypatch.setenv("PATH", str(no_git))
    assert records.provenance(str(manifest))["git"] is None
    monkeypatch.setenv("PATH", path)
    assert records.provenance(str(manifest))["git"] == {"commit": second, "dirty": True, "manifest_dirty": False,
                                                        "path": "p.yaml"}


def test_asking_git_never_rewrites_the_index(tmp_path):
    """A scheduled run beside the user's own git: a status that refreshed the index would hold index.lock
    while it wrote, and a user's ``git commit`` at that moment would fail on it."""
    _git(tmp_path, "init", "-q")
    manifest = tmp_path / "p.yaml"
    manifest.write_text("version: 1\n")
    _git(tmp_path, "add", "p.yaml")
    _git(tmp_path, "commit", "-q", "-m", "first")
    index = tmp_path / ".git" / "index"
    before = index.read_bytes(), index.stat().st_mtime_ns
    # same bytes, new stat: a plain `git status` would refresh the index and write it back
    os.utime(manifest, ns=(before[1] + 2_000_000_000, before[1] + 2_000_000_000))
    assert records.provenance(str(manifest))["git"] == {
        "commit": _git(tmp_path, "rev-parse", "HEAD"), "dirty": False, "manifest_dirty": False, "path": "p.yaml"}
    assert (index.read_bytes(), index.stat().st_mtime_ns) == before
    _git(tmp_path, "status", "--porcelain")  # git itself does rewrite it: the check above can fail
    assert index.stat().st_mtime_ns != before[1]


def test_a_manifest_outside_any_repository_starts_no_git(tmp_path, monkeypatch):
    if any(os.path.exists(os.path.join(*Path(tmp_path).parts[:i], ".git")) for i in range(1, len(tmp_path.parts) + 1)):
        pytest.skip("the temporary folder is inside a git checkout here")
    manifest = tmp_path / "p.yaml"
    manifest.write_text("version: 1\n")
    assert gitstate.key(str(manifest)) == ()
    assert records.provenance(str(manifest))["git"] is None


def test_a_process_forked_after_a_run_runs_with_threads_of_its_own(manifest_file, tmp_path):
    import signal
    import time

    m, p = compiled(manifest_file, SHARED)
    execute(m, p, runs_dir=str(tmp_path), use_cache=False)  # leaves an idle pool and a record writer behind
    pid = os.fork()
    if pid == 0:  # the child: its parent's idle threads do not exist here
        code = 1
        try:
            code = 0 if execute(m, p, runs_dir=str(tmp_path), use_cache=False).status == "succeeded" else 1
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail("the forked process's run never ended: it waited for threads it does not have")


LOADS = """
version: 1
name: loads
executors:
  cpu: {vendor: cpu}
stages:
  x: {op: load, args: {path: DATA}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def test_a_warm_api_run_checks_again_what_changed_and_nothing_else(tmp_path, monkeypatch):
    import hetflow
    from hetflow.engine import api

    data = tmp_path / "x.npy"
    np.save(data, -np.ones((2, 3), np.float32))
    manifest = tmp_path / "m.yaml"
    manifest.write_text(LOADS.replace("DATA", str(data)))
    runs = tmp_path / "runs"
    compiles = []
    real = api._jobs
    monkeypatch.setattr(api, "_jobs", lambda *a: compiles.append(a) or real(*a))

    first = hetflow.run(manifest, runs_dir=runs, cache=False)
    again = hetflow.run(manifest, runs_dir=runs, cache=False)
    assert len(compiles) == 1 and first.status == again.status == "succeeded"
    # the same plan, its data made once (the records the caller gets are copies of it: read them unshared)
    assert again._record["plan"] is first._record["plan"]

    # new data of another shape: the manifest is checked and planned again for it
    np.save(data, -np.ones((4, 3), np.float32))
    reshaped = hetflow.run(manifest, runs_dir=runs, cache=False)
    assert len(compiles) == 2 and reshaped.outputs["y"].shape == (4, 3)

    # the manifest's text changed: the run computes what it says now
    manifest.write_text(LOADS.replace("DATA", str(data)).replace("op: relu", "op: neg"))
    changed = hetflow.run(manifest, runs_dir=runs, cache=False)
    assert len(compiles) == 3
    assert np.array_equal(changed.outputs["y"], np.ones((4, 3), np.float32))


def test_a_warm_api_run_checks_again_the_block_libraries_its_manifest_uses(tmp_path):
    import hetflow

    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "inner.yaml").write_text(
        "version: 1\nblocks:\n  twice:\n    inputs: [x]\n    stages:\n      y: {op: add, inputs: [x, x]}\n"
        "    outputs: {y: y}\n")
    outer = tmp_path / "lib" / "lib.yaml"
    outer.write_text("version: 1\nblocks:\n  scale:\n    inputs: [x]\n    stages:\n"
                     "      t: {use: inner.yaml#twice, inputs: {x: x}}\n      y: {op: neg, inputs: [t.y]}\n"
                     "    outputs: {y: y}\n")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: libuse\nexecutors: {host: {vendor: cpu}}\nstages:\n"
                        "  x: {op: ones, args: {shape: [3]}}\n  b: {use: lib/lib.yaml#scale, inputs: {x: x}}\n"
                        "outputs: {out: b.y}\n")
    runs = tmp_path / "runs"
    assert hetflow.run(manifest, runs_dir=runs, cache=False).outputs["out"].tolist() == [-2, -2, -2]
    outer.write_text(outer.read_text().replace("op: neg", "op: relu"))  # the library the manifest names
    assert hetflow.run(manifest, runs_dir=runs, cache=False).outputs["out"].tolist() == [2, 2, 2]
    inner = tmp_path / "lib" / "inner.yaml"  # a library that library uses, edited in place, the same size
    inner.write_text(inner.read_text().replace("op: add", "op: mul"))
    assert hetflow.run(manifest, runs_dir=runs, cache=False).outputs["out"].tolist() == [1, 1, 1]
    inner.unlink()
    with pytest.raises(hetflow.ManifestError, match="inner.yaml"):
        hetflow.run(manifest, runs_dir=runs, cache=False)


ALTERNATING = "version: 1\nname: alt\nexecutors:\n  a: {vendor: cpu}\n  b: {vendor: cpu}\nstages:\n" + \
    "  x0: {op: ones, args: {shape: [4]}, executor: a}\n" + \
    "".join(f"  x{i}: {{op: relu, inputs: [x{i - 1}], executor: {'ab'[i % 2]}}}\n" for i in range(1, 12)) + \
    "  side: {op: neg, inputs: [x5], executor: a}\n" + "outputs: {y: x11, side: side}\n"


def test_partitions_that_follow_one_another_alone_run_as_one_task_each_reported_as_its_own(manifest_file, tmp_path):
    m, p = compiled(manifest_file, ALTERNATING)
    assert len(p.partitions) == 13
    rt = LocalRuntime(p, create_executors(p), fold_bridges=True)
    # x5's partition feeds two (x6 and side): a run ends there; x6..x11 is the second run; side stands alone
    part = {n: p.nodes[n].partition for n in p.nodes}
    assert sorted(rt.graph.chains.values()) == sorted([tuple(part[f"x{i}"] for i in range(6)),
                                                       tuple(part[f"x{i}"] for i in range(6, 12))])
    assert sorted(rt.graph.dsk) == sorted([f"partition:{part['x5']}", f"partition:{part['x11']}",
                                           f"partition:{part['side']}", "output:y", "output:side"])
    assert rt.graph.reported_tasks() == len(LocalRuntime(p, create_executors(p)).graph.dsk)

    seen = []
    r = execute(m, p, runs_dir=str(tmp_path), use_cache=False, on_event=seen.append)
    assert seen[0]["tasks"] == len(p.partitions) + 2 * len(p.bridges) + len(p.outputs)
    record = json.loads(Path(r.record_path).read_text())
    order = [t["id"] for t in sorted(record["tasks"], key=lambda t: t["offset_s"]) if t["kind"] == "partition"]
    chain = [part[f"x{i}"] for i in range(12)]
    assert [pid for pid in order if pid in chain] == chain  # each partition its own entry, in the chain's order
    assert sum(t["kind"] == "export" for t in record["tasks"]) == len(p.bridges)
    assert np.array_equal(np.load(os.path.join(r.run_dir, "y.npy")), np.ones(4, np.float32))
    assert np.array_equal(np.load(os.path.join(r.run_dir, "side.npy")), -np.ones(4, np.float32))
    assert record["live_activations_after"] == {"a": 0, "b": 0}


def test_a_chain_runs_its_tasks_in_the_runs_own_thread_without_a_pool(manifest_file, tmp_path):
    from hetflow.engine.run import execute as runmod

    chain = ALTERNATING.replace("  side: {op: neg, inputs: [x5], executor: a}\n", "").replace(", side: side", "")
    m, p = compiled(manifest_file, chain)
    size = 5  # a size no other test's runs leave idle pools of
    runmod._IDLE_POOLS.pop(size, None)
    r = execute(m, p, runs_dir=str(tmp_path), use_cache=False, num_workers=size)
    assert r.status == "succeeded" and r.record["threads"]["partitions_at_once"] == 1
    assert size not in runmod._IDLE_POOLS, "no pool was taken"
    assert len({t["thread"] for t in r.record["tasks"]}) == 1
    assert len([t for t in r.record["tasks"] if t["kind"] == "partition"]) == len(p.partitions)


def test_a_graph_run_in_order_gives_what_dask_gives_in_dasks_order_and_drops_what_is_done_with(manifest_file):
    import dask.core
    from dask.order import order

    from hetflow.engine.run.lowering import TaskGraph, run_in_order

    m, p = compiled(manifest_file, SHARED)
    ours, theirs = (LocalRuntime(p, create_executors(p), fold_bridges=True) for _ in range(2))
    got = run_in_order(ours.graph)
    want = dask.core.get(theirs.graph.dsk, theirs.graph.keys)
    assert len(got) == len(want) == len(ours.graph.keys)
    for key, one, other in zip(ours.graph.keys, got, want):
        if key.startswith("output:"):
            assert one.to_array().tobytes() == other.to_array().tobytes()
    for rt in (ours, theirs):
        assert rt.handles.live() == {}

    # on a graph of plain functions: the calls in dask.order's order, each result gone after its last use
    calls, alive = [], {}

    class Value:
        def __init__(self, key):
            self.key = key
            alive[key] = True

        def __del__(self):
            alive[self.key] = False

    live_at = {}

    def task(name, *inputs):
        calls.append(name)
        live_at[name] = {k for k, v in alive.items() if v}
        return Value(name)

    dsk = {"t:a": (task, "a"), "t:b": (task, "b", "t:a"), "t:c": (task, "c", "t:a"), "t:d": (task, "d", "t:b", "t:c"),
           "t:e": (task, "e", "t:d"), "t:f": (task, "f", "t:b")}
    graph = TaskGraph(dsk, ["t:e", "t:f"], {}, {}, {})
    results = run_in_order(graph)
    in_order = [k[2:] for k in sorted(dsk, key=order(dsk).__getitem__)]
    assert calls == in_order
    assert [r.key for r in results] == ["e", "f"]
    # each result lives from its task to its last consumer's (or to the end, where asked for), no longer
    consumers = {k[2:]: [c[2:] for c, t in dsk.items() if k in t[2:]] for k in dsk}
    for i, name in enumerate(in_order):
        done = in_order[:i]
        assert live_at[name] == {k for k in done if k in ("e", "f") or any(c not in done for c in consumers[k])}
    assert len(graph.steps) == len(dsk)
    calls.clear()
    run_in_order(graph)  # the steps made once are used again
    assert calls == in_order


def test_one_status_process_answers_what_the_two_rounds_did(tmp_path):
    # the one-process answer (the top known from the .git above) against rev-parse and two statuses, over the
    # states a manifest's tree goes through: clean, an edit, a rename, an untracked folder, a manifest in one
    top = tmp_path / "repo"
    (top / "sub").mkdir(parents=True)
    _git(top, "init", "-q")
    (top / "sub" / "p.yaml").write_text("version: 1\n")
    (top / "a.txt").write_text("a")
    (top / "naïve name.txt").write_text("n")
    _git(top, "add", ".")
    _git(top, "commit", "-q", "-m", "first")
    manifests = [top / "sub" / "p.yaml", top / "new" / "q.yaml"]

    def same():
        for m in manifests:
            if m.exists():
                two_rounds = gitstate._ask_git(str(m))
                assert gitstate._ask_git(str(m), str(top)) == two_rounds
                assert two_rounds is not None
                yield two_rounds

    assert [s["dirty"] for s in same()] == [False]
    _git(top, "mv", "a.txt", "b.txt")
    assert [(s["dirty"], s["manifest_dirty"]) for s in same()] == [(True, False)]
    (top / "sub" / "p.yaml").write_text("version: 1\n# edited\n")
    assert [(s["dirty"], s["manifest_dirty"]) for s in same()] == [(True, True)]
    _git(top, "commit", "-q", "-a", "-m", "second")
    (top / "new").mkdir()
    (top / "new" / "q.yaml").write_text("version: 1\n")
    (top / "naïve name.txt").write_text("changed")
    assert [(s["dirty"], s["manifest_dirty"], s["path"]) for s in same()] == [
        (True, False, os.path.join("sub", "p.yaml")), (True, True, os.path.join("new", "q.yaml"))]


def _cycle_in_the_oldest_generation() -> "weakref.ref":
    import gc
    import weakref

    class Cycle:
        pass

    c = Cycle()
    c.me = c
    gc.collect()  # alive through a full collection: it is in the oldest generation now
    return weakref.ref(c)


def test_a_process_that_runs_small_pipelines_again_and_again_collects_their_garbage(manifest_file, tmp_path):
    """A notebook or a service: nothing calls gc.collect(). Runs froze the heap, which set the young count back
    to zero each time, and the process never collected again: 19 KiB a quickstart run."""
    import weakref

    import hetflow

    path = manifest_file(SHARED)

    class Cycle:
        pass

    died_young = []
    for _ in range(150):
        c = Cycle()
        c.me = c
        died_young.append(weakref.ref(c))
        del c
        assert hetflow.run(path, runs_dir=str(tmp_path / "runs"), cache=False).status == "succeeded"
    assert [r for r in died_young[:100] if r() is not None] == []


def test_a_process_that_runs_large_pipelines_again_and_again_collects_what_died_in_the_oldest_generation(
        manifest_file, tmp_path, monkeypatch):
    import hetflow
    from hetflow.engine import heap
    from hetflow.engine.heap import FREEZE_FROM

    # as in a process of its own: no full collection yet whose cost the runs since must reach 20 times over (in a
    # test process, an earlier test's heap made the last one as long as this test's runs together)
    for key, value in (("count", 0), ("seconds", 0.0), ("full_s", 0.0)):
        monkeypatch.setitem(heap._BIG_RUNS, key, value)
    stages = ["  s0: {op: random.normal, args: {shape: [4], seed: 1}}"]
    stages += [f"  s{i}: {{op: neg, inputs: [s{i - 1}]}}" for i in range(1, FREEZE_FROM)]
    path = manifest_file("version: 1\nname: long\nexecutors:\n  a: {vendor: cpu}\nstages:\n" + "\n".join(stages)
                         + f"\noutputs: {{y: s{FREEZE_FROM - 1}}}\n")
    old = _cycle_in_the_oldest_generation()
    for _ in range(3):  # the first run freezes the heap; the second starts with a full collection
        assert hetflow.run(path, runs_dir=str(tmp_path / "runs"), cache=False).status == "succeeded"
    assert old() is None
