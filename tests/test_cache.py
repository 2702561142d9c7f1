"""The content-addressed cache: hits, invalidation downstream of a change, atomic entries."""

import hashlib
import json
import os

import numpy as np
import pytest

from hetflow.engine.store import cache as cachemod
from hetflow.engine.store import records
from hetflow.engine.store.cache import Cache, partition_keys
from hetflow.engine.manifest.validate import compile_manifest, load, parse_overrides
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe
from hetflow.executors.base import Dtype, PortableActivation

CHAIN = """
version: 1
name: chain
params: {seed_a: 1, seed_b: 2, scale: 3}
executors: {a: {vendor: cpu}, b: {vendor: cpu}, c: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [8, 8], seed: "${seed_a}"}, executor: a}
  w: {op: random.normal, args: {shape: [8, 8], seed: "${seed_b}"}, executor: b}
  h: {op: matmul, inputs: [x, w], executor: b}
  k: {op: random.uniform, args: {shape: [1], seed: 0, low: "${scale}", high: "${scale}"}, executor: c}
  z: {op: mul, inputs: [h, k], executor: c}
  r: {op: relu, inputs: [z], executor: a}
outputs: {r: r, h: h}
"""


def run(path, tmp_path, **over):
    m = compile_manifest(load(path), parse_overrides([f"{k}={v}" for k, v in over.items()]))
    p = plan(m, probe)
    return execute(m, p, runs_dir=str(tmp_path / "runs"))


def executed(result):
    return sorted(t["id"] for t in result.record["tasks"] if t["kind"] == "partition" and t["status"] == "succeeded" and not t.get("cached"))


def test_second_run_takes_every_partition_from_the_cache(manifest_file, tmp_path):
    path = manifest_file(CHAIN)
    first = run(path, tmp_path)
    second = run(path, tmp_path)
    assert executed(first) == ["p0", "p1", "p2", "p3"] and first.record["cache"]["hits"] == []
    assert executed(second) == [] and second.record["cache"]["hits"] == ["p0", "p1", "p2", "p3"]
    assert {k: v["digest"] for k, v in first.record["outputs"].items()} == {k: v["digest"] for k, v in second.record["outputs"].items()}
    assert second.record["live_activations_after"] == {"a": 0, "b": 0, "c": 0}


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: every run has one BLAS thread")
def test_an_entry_computed_with_other_blas_threads_is_computed_again_where_a_product_depends_on_them(manifest_file,
                                                                                                     tmp_path):
    """A --parallel sweep's points, one BLAS thread each, stored a product's entries; a run alone, two threads, took
    them, and verify, at its record's two threads, found its outputs differ with no cause in the records."""
    from hetflow.engine.run import threads

    path = manifest_file(CHAIN)
    with threads.POOLS.pinned(1):
        one = run(path, tmp_path)
    assert one.record["threads"]["blas"] == 1
    # a run alone on two cores, as it is wherever nothing else holds a claim on this process's pools
    n = 2
    with threads.POOLS.pinned(n):
        alone = run(path, tmp_path)
    assert alone.record["threads"]["blas"] == n
    # the product (p1, on b) and what reads it computed again; the random draws and the constant taken
    keys = alone.record["cache"]["keys"]
    follow = sorted(pid for pid, k in keys.items() if k["blas"])
    assert follow == sorted(alone.record["cache"]["other_threads"]) == executed(alone), (follow, executed(alone))
    assert alone.record["cache"]["other_threads"][follow[0]] == (f"its entry was computed with 1 BLAS threads, this "
                                                                 f"run's have {n}")
    assert sorted(alone.record["cache"]["hits"]) == sorted(set(keys) - set(follow))
    # stored in their place: the next run alone takes every partition
    with threads.POOLS.pinned(n):
        again = run(path, tmp_path)
    assert executed(again) == [] and not again.record["cache"]["other_threads"]


def test_a_param_change_reruns_exactly_the_partitions_downstream(manifest_file, tmp_path):
    path = manifest_file(CHAIN)
    base = run(path, tmp_path)
    parts = {p["id"]: p["nodes"] for p in base.record["plan"]["partitions"]}
    assert parts == {"p0": ["x"], "p1": ["w", "h"], "p2": ["k", "z"], "p3": ["r"]}
    changed = run(path, tmp_path, scale=2)      # k, then z, then r
    assert executed(changed) == ["p2", "p3"]
    assert changed.record["outputs"]["h"]["digest"] == base.record["outputs"]["h"]["digest"]
    assert changed.record["outputs"]["r"]["digest"] != base.record["outputs"]["r"]["digest"]
    again = run(path, tmp_path, seed_a=5)       # x, then h in p1, z and r
    assert executed(again) == ["p0", "p1", "p2", "p3"]


def test_no_cache_recomputes_and_stores_nothing(manifest_file, tmp_path):
    path = manifest_file(CHAIN)
    m = compile_manifest(load(path))
    p = plan(m, probe)
    r = execute(m, p, runs_dir=str(tmp_path / "runs"), use_cache=False)
    assert executed(r) == ["p0", "p1", "p2", "p3"] and r.record["cache"]["stored"] == []
    assert list(Cache(str(tmp_path / "runs" / ".cache")).keys()) == []


def test_keys_chain_through_inputs_and_say_why_uncacheable(manifest_file, tmp_path):
    path = manifest_file(CHAIN.replace('seed: "${seed_b}"', "seed: null"))
    keys = partition_keys(plan(compile_manifest(load(path)), probe))
    assert keys["p0"].cacheable and not keys["p1"].cacheable
    assert keys["p1"].reason == "stage 'w' is nondeterministic (seed: null)"
    assert keys["p2"].reason == "input 'h' comes from uncacheable partition p1"
    assert keys["p3"].inputs == {"z": None}
    base = partition_keys(plan(compile_manifest(load(manifest_file(CHAIN, "c.yaml"))), probe))
    assert base["p2"].inputs == {"h": base["p1"].key}
    other_version = partition_keys(plan(compile_manifest(load(manifest_file(CHAIN, "c.yaml"))), probe), version="0.0.0")
    assert other_version["p0"].key != base["p0"].key and other_version["p0"].definition == base["p0"].definition


def test_load_keys_on_file_content_not_path(manifest_file, tmp_path):
    np.save(tmp_path / "data.npy", np.arange(4, dtype=np.float32))
    text = "version: 1\nname: l\nexecutors: {a: {vendor: cpu}}\nstages:\n  d: {op: load, args: {path: data.npy}}\noutputs: {d: d}\n"
    path = manifest_file(text)
    k1 = partition_keys(plan(compile_manifest(load(path)), probe))["p0"].key
    np.save(tmp_path / "data.npy", np.arange(5, dtype=np.float32))
    k2 = partition_keys(plan(compile_manifest(load(path)), probe))["p0"].key
    assert k1 != k2
    compiled = compile_manifest(load(path))
    os.remove(tmp_path / "data.npy")
    missing = partition_keys(plan(compiled, probe))["p0"]
    assert not missing.cacheable and "cannot be read" in missing.reason


@pytest.mark.parametrize("how", ["renamed over", "written in place"])
def test_a_data_file_replaced_with_its_size_and_mtime_kept_is_read_anew_in_the_same_process(manifest_file, tmp_path,
                                                                                           how):
    """``cp -p``, ``rsync -a`` or ``tar x`` of another array of the same shape: same size, the old mtime. A process
    that ran the manifest before (a notebook, a service) must neither serve the old outputs from the cache nor
    record the old file's digest beside the new outputs."""
    import hetflow

    data = tmp_path / "data.npy"
    np.save(data, np.arange(4, dtype=np.float32))
    old = os.stat(data)
    path = manifest_file("version: 1\nname: l\nexecutors: {a: {vendor: cpu}}\nstages:\n"
                         "  d: {op: load, args: {path: data.npy}}\n  y: {op: mul, inputs: [d, d]}\noutputs: {y: y}\n")
    first = hetflow.run(path, runs_dir=tmp_path / "runs")
    assert first.outputs["y"].tolist() == [0, 1, 4, 9]
    if how == "renamed over":
        np.save(tmp_path / "new.npy", np.full(4, 10, dtype=np.float32))
        os.utime(tmp_path / "new.npy", ns=(old.st_atime_ns, old.st_mtime_ns))
        os.replace(tmp_path / "new.npy", data)
    else:
        with open(data, "r+b") as f:
            f.seek(-16, os.SEEK_END)
            f.write(np.full(4, 10, dtype=np.float32).tobytes())
        os.utime(data, ns=(old.st_atime_ns, old.st_mtime_ns))
    now = os.stat(data)
    assert (now.st_size, now.st_mtime_ns) == (old.st_size, old.st_mtime_ns)
    for cache in (True, False):
        again = hetflow.run(path, runs_dir=tmp_path / "runs", cache=cache)
        assert again.outputs["y"].tolist() == [100] * 4
        now_digest = "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()
        assert again.record["data"]["d"]["digest"] == now_digest != first.record["data"]["d"]["digest"]


@pytest.mark.parametrize("where", ["threads", "local cluster"])
def test_a_data_file_replaced_after_the_run_started_fails_its_load_and_stores_nothing(manifest_file, tmp_path, where):
    """The file is replaced after the run digested it for its record and cache keys, before its ``load`` read it:
    the stage fails saying so, instead of outputs of the new bytes under the old digest and key. The next run
    reads the new file."""
    import hetflow

    data = tmp_path / "data.npy"
    np.save(data, np.arange(4, dtype=np.float32))
    path = manifest_file("version: 1\nname: l\nexecutors: {a: {vendor: cpu}}\nstages:\n"
                         "  d: {op: load, args: {path: data.npy}}\n  y: {op: mul, inputs: [d, d]}\noutputs: {y: y}\n")

    def replace_on_start(event: dict) -> None:
        if event.get("kind") == "run" and event.get("event") == "started":
            np.save(tmp_path / "new.npy", np.full(4, 10, dtype=np.float32))
            os.replace(tmp_path / "new.npy", data)

    cluster = {"workers": 1, "dashboard": False} if where == "local cluster" else {}
    failed = hetflow.run(path, runs_dir=tmp_path / "runs", on_event=replace_on_start, **cluster)
    assert failed.status == "failed"
    (failure,) = failed.failures
    assert failure.stage == "d" and f"{data} changed while the run ran: it now holds other bytes" in failure.message
    assert not list((tmp_path / "runs" / ".cache").glob("**/*.json")), "nothing stored under the old file's key"
    again = hetflow.run(path, runs_dir=tmp_path / "runs", **cluster)
    assert again.status == "succeeded" and again.outputs["y"].tolist() == [100] * 4
    assert again.record["data"]["d"]["digest"] == "sha256:" + hashlib.sha256(data.read_bytes()).hexdigest()


def test_damaged_entry_is_a_miss(manifest_file, tmp_path):
    path = manifest_file(CHAIN)
    first = run(path, tmp_path)
    cache = Cache(str(tmp_path / "runs" / ".cache"))
    key = first.record["cache"]["keys"]["p0"]["key"]
    folder = cache._folder(key)
    with open(os.path.join(folder, "0.bin"), "r+b") as f:
        f.write(b"\xff\xff")
    assert cache.load(key) is None
    second = run(path, tmp_path)
    assert "p0" in executed(second)
    assert second.record["outputs"]["r"]["digest"] == first.record["outputs"]["r"]["digest"]
    # the damaged entry is said and replaced by the outputs computed in its place: the next run hits it
    why = second.record["cache"]["damaged"]["p0"]
    assert why.startswith("its file 0.bin (") and "does not hold the bytes its entry names" in why
    assert "p0" in second.record["cache"]["stored"]
    event = next(e for e in second.record["tasks"] if e["kind"] == "partition" and e["id"] == "p0")
    assert event["cache_damaged"] == why
    assert Cache(str(tmp_path / "runs" / ".cache")).load(key) is not None
    assert not [n for n in os.listdir(os.path.dirname(folder)) if n.startswith(".tmp-")]
    third = run(path, tmp_path)
    assert "p0" not in executed(third) and third.record["cache"]["damaged"] == {}


@pytest.mark.parametrize("damage", ["entry-json", "missing-file", "not-an-entry", "short-file", "shape", "dtype",
                                    "an-output-less"])
def test_an_entry_damaged_otherwise_is_replaced_too_and_the_cli_warns(manifest_file, tmp_path, damage, capsys):
    """An entry whose entry.json gives an output another shape or dtype (its checksums hold: they cover the bytes)
    was served as it said: a [2, 32] where the plan makes [8, 8], float bytes read as int32; one that names fewer
    outputs than its partition makes was passed over on every run, never replaced nor said."""
    from hetflow.engine.cli.main import main

    path = manifest_file(CHAIN)
    first = run(path, tmp_path)
    key = first.record["cache"]["keys"]["p0"]["key"]
    folder = Cache(str(tmp_path / "runs" / ".cache"))._folder(key)
    if damage == "entry-json":
        with open(os.path.join(folder, "entry.json"), "r+b") as f:
            f.truncate(20)
    elif damage == "missing-file":
        os.remove(os.path.join(folder, "0.bin"))
    elif damage == "short-file":
        with open(os.path.join(folder, "0.bin"), "r+b") as f:
            f.truncate(10)
    elif damage in ("shape", "dtype", "an-output-less"):
        with open(os.path.join(folder, "entry.json")) as f:
            entry = json.load(f)
        (tensor,) = entry["outputs"]
        if damage == "shape":
            entry["outputs"][tensor]["shape"] = [2, 32]
        elif damage == "dtype":
            entry["outputs"][tensor]["dtype"] = "int32"
        else:
            del entry["outputs"][tensor]
        with open(os.path.join(folder, "entry.json"), "w") as f:
            json.dump(entry, f)
    else:
        with open(os.path.join(folder, "entry.json"), "w") as f:
            json.dump({"outputs": [1, 2]}, f)
    capsys.readouterr()
    # the plan before the run does not call the entry complete: it says the partition will run, and why
    assert main(["plan", str(path), "--runs-dir", str(tmp_path / "runs"), "--format", "json"]) == 0
    said = json.loads(capsys.readouterr().out)["cache"]
    assert said["p0"]["status"] == "will run" and f"entry {key[:19]} is damaged: it" in said["p0"]["reason"]
    assert {said[p]["status"] for p in ("p1", "p2", "p3")} == {"cached"}
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")]) == 0
    err = capsys.readouterr().err
    assert "warning: 1 cache entry was damaged, so its partition ran again and replaced it: p0: it" in err, err
    if damage == "short-file":  # --json says it too, in its object and on stderr
        with open(os.path.join(folder, "0.bin"), "r+b") as f:
            f.truncate(10)
        assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json"]) == 0
        said = capsys.readouterr()
        assert list(json.loads(said.out)["cache_damaged"]) == ["p0"] and "warning: 1 cache entry was damaged" in said.err
    stored = Cache(str(tmp_path / "runs" / ".cache")).load(key)
    assert {t: (a.shape.dims, a.dtype) for t, a in stored.items()} == {"x": ((8, 8), Dtype.fp32)}
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "warning" not in capsys.readouterr().err


def _fail_on_call(monkeypatch, module, name, n):
    real = getattr(module, name)
    calls = {"n": 0}

    def wrapper(*a, **k):
        calls["n"] += 1
        if calls["n"] == n:
            raise OSError(f"simulated crash in {name}")
        return real(*a, **k)

    monkeypatch.setattr(module, name, wrapper)
    return calls


@pytest.mark.parametrize("step", ["write-1", "write-2", "write-3", "rename"])
def test_a_crash_at_any_point_of_a_cache_write_leaves_no_entry(tmp_path, monkeypatch, step):
    cache = Cache(str(tmp_path / "cache"))
    outputs = {"a": PortableActivation.from_array(np.ones(3, np.float32), Dtype.fp32),
               "b": PortableActivation.from_array(np.zeros(2, np.float32), Dtype.bf16)}
    name, _, n = step.partition("-")
    _fail_on_call(monkeypatch, cachemod.os, name, int(n or 1))
    with pytest.raises(OSError, match="simulated crash"):
        cache.store("sha256:" + "ab" * 32, {}, outputs)
    monkeypatch.undo()
    assert not cache.has("sha256:" + "ab" * 32) and cache.load("sha256:" + "ab" * 32) is None
    assert list(cache.keys()) == []
    assert cache.store("sha256:" + "ab" * 32, {}, outputs)
    assert cache.load("sha256:" + "ab" * 32)["b"].bytes == outputs["b"].bytes


@pytest.mark.parametrize("step", ["fsync", "replace"])
def test_a_crash_while_writing_a_record_keeps_the_previous_one(tmp_path, monkeypatch, step):
    path = str(tmp_path / "record.json")
    records.write_json_atomic(path, {"status": "running"})
    _fail_on_call(monkeypatch, records.os, step, 1)
    with pytest.raises(OSError, match="simulated crash"):
        records.write_json_atomic(path, {"status": "succeeded", "big": list(range(10000))})
    monkeypatch.undo()
    assert json.loads(open(path).read()) == {"status": "running"}
    assert os.listdir(tmp_path) == ["record.json"]


def test_an_entry_a_removal_left_half_way_is_replaced_by_the_next_store_and_cleared_by_gc(manifest_file, tmp_path):
    from hetflow.engine.store.runs import collect_garbage

    path = manifest_file(CHAIN)
    first = run(path, tmp_path)
    runs_dir = os.path.dirname(first.run_dir)
    store = Cache(os.path.join(runs_dir, ".cache"))
    keys = sorted(store.keys())
    for key in keys[:2]:  # what a removal stopped between its entry.json and the rest leaves
        os.unlink(os.path.join(store._folder(key), "entry.json"))
    second = run(path, tmp_path)
    # the two partitions ran again and their entries were stored whole, in place of the debris
    assert not second.record["cache"].get("store_failed"), second.record["cache"]
    assert sorted(store.keys()) == keys
    os.unlink(os.path.join(store._folder(keys[0]), "entry.json"))
    collect_garbage(runs_dir, keep=5)
    assert not os.path.exists(store._folder(keys[0])) and sorted(store.keys()) == keys[1:]


def test_the_key_holds_the_versions_of_the_libraries_that_compute_and_the_plan_names_the_one_that_changed(
        manifest_file, tmp_path):
    """Only hetflow's version was in the key: a run under another numpy (or ml_dtypes, which rounds bf16 and fp8)
    took every partition from entries that numpy had computed, and its record named its own numpy."""
    import ml_dtypes

    path = manifest_file(CHAIN, "c.yaml")
    m = compile_manifest(load(path))
    keys = partition_keys(plan(m, probe))
    version = keys["p0"].version
    assert version.startswith(f"hetflow {cachemod.hetflow_version()}; numpy {np.__version__}; "
                              f"ml_dtypes {ml_dtypes.__version__}")
    # this checkout's executors' code too: an editable install's version says nothing of it
    assert "; source sha256:" in version
    assert cachemod.computing_versions("vulkan").startswith(version.split("; source")[0] + "; wgpu ")
    runs = str(tmp_path / "runs")
    first = execute(m, plan(m, probe), runs_dir=runs)
    older = version.replace(f"numpy {np.__version__}", "numpy 1.26.4")
    assert partition_keys(plan(m, probe), version=older)["p0"].key != keys["p0"].key
    for k in first.record["cache"]["keys"].values():
        k["version"] = older
    reasons = cachemod.explain(keys, Cache(os.path.join(runs, ".cache")), first.record)
    assert reasons["p0"]["status"] == "cached"
    Cache(os.path.join(runs, ".cache")).remove(keys["p0"].key)
    reasons = cachemod.explain(keys, Cache(os.path.join(runs, ".cache")), first.record)
    assert reasons["p0"] == {"status": "will run", "reason": f"versions changed: numpy 1.26.4 -> {np.__version__}"}


def test_an_entry_this_user_cannot_read_is_said_so_computed_here_and_left_as_it_is(manifest_file, tmp_path, monkeypatch,
                                                                                    capsys):
    """Another user's entry in a shared cache (a umask of 077): the plan called it cached, and the run computed its
    partition again without a word, then failed to store it ("Directory not empty")."""
    import builtins

    from hetflow.engine.cli.main import main

    path = manifest_file(CHAIN)
    first = run(path, tmp_path)
    key = first.record["cache"]["keys"]["p0"]["key"]
    folder = Cache(str(tmp_path / "runs" / ".cache"))._folder(key)
    real = builtins.open

    def refused(file, *a, **k):
        if str(file).startswith(folder):
            raise PermissionError(13, "Permission denied", str(file))
        return real(file, *a, **k)

    monkeypatch.setattr(cachemod, "open", refused, raising=False)
    capsys.readouterr()
    assert main(["plan", str(path), "--runs-dir", str(tmp_path / "runs"), "--format", "json"]) == 0
    said = json.loads(capsys.readouterr().out)["cache"]["p0"]
    assert said == {"status": "will run", "reason": f"entry {key[:19]}: its files cannot be read by this user "
                                                     "(Permission denied); the run computes the partition again and "
                                                     "leaves the entry as it is"}
    assert main(["run", str(path), "--runs-dir", str(tmp_path / "runs"), "--json"]) == 0
    out, err = capsys.readouterr()
    done = json.loads(out)
    assert done["cache_unreadable"] == {"p0": "its files cannot be read by this user (Permission denied)"}
    assert done["cache_store_failed"] == {} and "p0" not in done["cache_hits"]
    assert "warning: 1 cache entry could not be read by this user, so their partitions ran again: p0" in err


def test_an_entry_a_gc_removes_while_it_is_read_is_absent_not_damaged(tmp_path, monkeypatch):
    """A run that read an entry's entry.json as a runs gc removed it said "damaged: its file 1.bin is missing"."""
    cache = Cache(str(tmp_path / "cache"))
    key = "sha256:" + "cd" * 32
    outputs = {"a": PortableActivation.from_array(np.ones(3, np.float32), Dtype.fp32),
               "b": PortableActivation.from_array(np.zeros(2, np.float32), Dtype.fp32)}
    assert cache.store(key, {}, outputs)
    real = cachemod.json.load

    def read_then_removed(f):
        entry = real(f)
        assert cache.remove(key) is None  # the gc's removal, between the reader's entry.json and its files
        return entry

    monkeypatch.setattr(cachemod.json, "load", read_then_removed)
    assert cache.load(key) is None
    monkeypatch.undo()
    assert cache.damaged == {} and not cache.has(key)
    # where the entry is still there and a file of it is not, it is damaged, as before
    assert cache.store(key, {}, outputs)
    os.unlink(os.path.join(cache._folder(key), "1.bin"))
    assert Cache(cache.root).load(key) is None
    fresh = Cache(cache.root)
    fresh.load(key)
    assert fresh.damaged == {key: "its file 1.bin is missing"}


def test_the_entries_a_process_ending_at_once_was_writing_are_removed_not_left_half_written(tmp_path, monkeypatch):
    """A run cancelled by SIGTERM, SIGHUP or Ctrl-C ended its process while a partition's entry was being written:
    its temporary folder stayed, half written, until a runs gc an hour later."""
    import threading

    cache = Cache(str(tmp_path / "cache"))
    key = "sha256:" + "ef" * 32
    outputs = {"a": PortableActivation.from_array(np.ones(1 << 16, np.float32), Dtype.fp32),
               "b": PortableActivation.from_array(np.zeros(2, np.float32), Dtype.fp32)}
    real, first_written, go = cachemod._write_file, threading.Event(), threading.Event()

    def slow_write(path, data):
        real(path, data)
        first_written.set()
        go.wait(10)

    monkeypatch.setattr(cachemod, "_write_file", slow_write)
    failed = []

    def store():
        try:
            cache.store(key, {}, outputs)
        except OSError as e:
            failed.append(e)

    writer = threading.Thread(target=store)
    writer.start()
    assert first_written.wait(10)
    shard = os.path.dirname(cache._folder(key))
    assert [n for n in os.listdir(shard) if n.startswith(".tmp-")]  # half written
    cachemod.abandon_writes()
    assert os.listdir(shard) == []
    go.set()
    writer.join(10)
    assert failed and not cache.has(key) and os.listdir(shard) == []  # the writer found its folder gone and stopped
