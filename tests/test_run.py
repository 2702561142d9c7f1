"""Running plans: bit-identical across placements, zero live activations, complete records."""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.errors import RunFailed
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan
from hetflow.engine.store.records import RECORD_FORMAT, load_output
from hetflow.engine.run.execute import create_executors, execute
from hetflow.executors import probe
from hetflow.executors.base import Dtype

PIPELINE = """
version: 1
name: split
params: {n: 16}
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:  {op: random.normal, args: {shape: ["${n}", 32], seed: 3}, executor: host}
  w:  {op: random.uniform, args: {shape: [32, 8], seed: 4, low: -1, high: 1}, executor: EXEC}
  h:  {op: matmul, inputs: [x, w]}
  g:  {op: gelu, inputs: [h]}
  s:  {op: softmax, inputs: [g], executor: host}
  m:  {op: mean, inputs: [s], args: {axis: 0}}
  t:  {op: transpose, inputs: [g], executor: EXEC}
  r:  {op: reshape, inputs: [t], args: {shape: [128]}}
  b:  {op: cast, inputs: [r], dtype: bf16}
  q:  {op: cast, inputs: [h], dtype: int4, executor: host}
outputs: {s: s, m: m, b: b, q: q}
"""


def compile_and_plan(path):
    m = compile_manifest(load(path))
    return m, plan(m, probe)


def test_one_executor_and_two_give_bit_identical_outputs(manifest_file, tmp_path):
    one, p1 = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "host"), "one.yaml"))
    two, p2 = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "accel"), "two.yaml"))
    assert len(p1.bridges) == 0 and len(p2.bridges) >= 2
    r1 = execute(one, p1, runs_dir=str(tmp_path / "runs"))
    r2 = execute(two, p2, runs_dir=str(tmp_path / "runs"))
    d1 = {k: v["digest"] for k, v in r1.record["outputs"].items()}
    d2 = {k: v["digest"] for k, v in r2.record["outputs"].items()}
    assert d1 == d2 and len(d1) == 4
    for name in d1:
        a, b = load_output(r1.run_dir, name), load_output(r2.run_dir, name)
        assert a.dtype == b.dtype and a.tobytes() == b.tobytes()


def test_outputs_keep_their_dtype_on_disk(manifest_file, tmp_path):
    m, p = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "accel")))
    r = execute(m, p, runs_dir=str(tmp_path))
    b = load_output(r.run_dir, "b")
    assert b.dtype == Dtype.bf16.numpy and b.shape == (128,)
    q = load_output(r.run_dir, "q")
    assert q.dtype == Dtype.int4.numpy and q.shape == (16, 8)
    assert r.record["outputs"]["q"]["bytes"] == 64  # 128 int4 values, two per byte
    raw = np.load(os.path.join(r.run_dir, "s.npy"))
    assert raw.dtype == np.float32 and np.allclose(raw.sum(axis=1), 1.0, atol=1e-5)


def test_zero_live_activations_after_success(manifest_file, tmp_path):
    m, p = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "accel")))
    executors = create_executors(p)
    r = execute(m, p, runs_dir=str(tmp_path), executors=executors)
    assert r.status == "succeeded"
    assert {name: ex.live_activations() for name, ex in executors.items()} == {"host": 0, "accel": 0}
    assert r.record["live_activations_after"] == {"host": 0, "accel": 0}


FAILING = """
version: 1
name: failing
executors:
  host: {vendor: cpu}
  accel: {vendor: cpu}
stages:
  x:    {op: ones, args: {shape: [4, 4]}, executor: host}
  y:    {op: relu, inputs: [x], executor: accel}
  w:    {op: load, args: {path: broken.npy}, executor: accel}
  z:    {op: add, inputs: [y, w]}
  keep: {op: relu, inputs: [x]}
outputs: {z: z, keep: keep}
"""


def test_failing_stage_releases_everything_and_is_recorded(manifest_file, tmp_path):
    path = manifest_file(FAILING)
    np.save(tmp_path / "broken.npy", np.ones((4, 4), np.float32))
    m, p = compile_and_plan(path)
    (tmp_path / "broken.npy").write_bytes(b"\x93NUMPY garbage")  # validate read it whole; it breaks before the run
    executors = create_executors(p)
    with pytest.raises(RunFailed) as info:
        execute(m, p, runs_dir=str(tmp_path / "runs"), executors=executors)
    assert {name: ex.live_activations() for name, ex in executors.items()} == {"host": 0, "accel": 0}
    record = json.loads(Path(info.value.record_path).read_text())
    assert record["status"] == "failed"
    assert record["error"]["node"] == "w"
    assert record["error"]["origin"].endswith("m.yaml:10:3")
    assert "load failed" in record["error"]["message"]
    assert record["nodes"]["w"]["status"] == "failed"
    assert record["nodes"]["z"]["status"] in ("cancelled", "not run")
    assert record["outputs"] == {}
    assert record["live_activations_after"] == {"host": 0, "accel": 0}
    assert not [f for f in os.listdir(os.path.dirname(info.value.record_path)) if f.endswith(".npy")]


def test_record_is_complete_valid_json(manifest_file, tmp_path):
    m, p = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "accel")))
    r = execute(m, p, runs_dir=str(tmp_path), overrides={})
    record = json.loads(Path(r.record_path).read_text())
    assert record["format"] == RECORD_FORMAT
    assert record["run_id"] == r.run_id == os.path.basename(r.run_dir)
    assert record["status"] == "succeeded"
    assert record["manifest"]["digest"] == m.digest
    assert record["manifest"]["resolved"]["stages"]["x"]["args"]["shape"] == [16, 32]
    assert record["params"] == {"n": 16}
    assert set(record["versions"]) >= {"hetflow", "python", "numpy", "dask", "distributed", "ml_dtypes", "cupy"}
    assert record["plan"] == json.loads(json.dumps(p.to_json()))
    assert all(n["status"] == "succeeded" and n["duration_s"] >= 0 for n in record["nodes"].values())
    kinds = sorted({t["kind"] for t in record["tasks"]})
    assert kinds == ["export", "import", "output", "partition"]
    assert len([t for t in record["tasks"] if t["kind"] == "partition"]) == len(p.partitions)
    assert len([t for t in record["tasks"] if t["kind"] == "export"]) == len(p.bridges)
    for name, out in record["outputs"].items():
        assert out["digest"].startswith("sha256:") and os.path.exists(os.path.join(r.run_dir, out["file"]))
    assert not [f for f in os.listdir(r.run_dir) if f.startswith(".tmp-")]


def test_same_manifest_twice_gives_the_same_digests(manifest_file, tmp_path):
    m, p = compile_and_plan(manifest_file(PIPELINE.replace("EXEC", "accel")))
    a = execute(m, p, runs_dir=str(tmp_path))
    b = execute(m, p, runs_dir=str(tmp_path))
    assert a.run_id != b.run_id
    assert {k: v["digest"] for k, v in a.record["outputs"].items()} == {k: v["digest"] for k, v in b.record["outputs"].items()}


def test_the_record_says_which_commit_the_manifest_came_from_and_whether_it_was_edited(tmp_path):
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    path = tmp_path / "p.yaml"
    path.write_text(PIPELINE.replace("EXEC", "accel"))
    (tmp_path / "other.txt").write_text("a")
    git("add", "p.yaml", "other.txt")
    git("commit", "-q", "-m", "first")

    def provenance():
        m, p = compile_and_plan(str(path))
        return execute(m, p, runs_dir=str(tmp_path / "runs"), use_cache=False).record["host"]["git"]

    (tmp_path / ".gitignore").write_text("runs/\n.gitignore\n")
    assert provenance() == {"commit": git("rev-parse", "HEAD"), "dirty": False, "manifest_dirty": False, "path": "p.yaml"}
    (tmp_path / "other.txt").write_text("b")
    assert provenance() | {"commit": None} == {"commit": None, "dirty": True, "manifest_dirty": False, "path": "p.yaml"}
    path.write_text(path.read_text() + "\n")
    assert provenance() | {"commit": None} == {"commit": None, "dirty": True, "manifest_dirty": True, "path": "p.yaml"}


def test_a_cpu_run_probes_only_the_vendors_its_executors_name_and_never_loads_wgpu(manifest_file, tmp_path):
    import subprocess
    import sys

    path = manifest_file(PIPELINE.replace("EXEC", "accel"))
    code = ("import json, sys; from hetflow.engine.run.execute import execute; from hetflow.engine.manifest.validate import "
            "compile_manifest, load; from hetflow.engine.plan.planner import plan; from hetflow.executors import probe; "
            f"m = compile_manifest(load({path!r})); r = execute(m, plan(m, probe), runs_dir={str(tmp_path)!r}); "
            "print(json.dumps({'wgpu': 'wgpu' in sys.modules, 'path': r.record_path}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["wgpu"] is False
    record = json.loads(Path(out["path"]).read_text())
    assert [o["vendor"] for o in record["inventory"]] == ["cpu"] and record["inventory"][0]["available"]
    assert record["host"]["pid"] != os.getpid() and record["host"]["hostname"]


WAIT_OP = "import time\n\nfrom hetflow import op\n\n\n@op('t.wait')\ndef wait(xp, x, *, seconds: float):\n    time.sleep(seconds)\n    return x\n"


def test_a_timed_out_call_is_counted_until_it_ends_and_the_cli_exits_without_waiting(tmp_path):
    import subprocess
    import sys
    import time

    from hetflow.engine.run import runtime

    (tmp_path / "wait_ops.py").write_text(WAIT_OP)
    text = ("version: 1\nname: waits\nplugins: [wait_ops.py]\nexecutors: {host: {vendor: cpu}}\nstages:\n"
            "  x: {op: ones, args: {shape: [4]}}\n  y: {op: t.wait, inputs: [x], args: {seconds: SECONDS}, timeout: 0.05}\n"
            "outputs: {y: y}\n")
    path = tmp_path / "waits.yaml"
    path.write_text(text.replace("SECONDS", "1.5"))
    m, p = compile_and_plan(str(path))
    before = runtime.abandoned_calls()
    with pytest.raises(RunFailed, match="timed out"):
        execute(m, p, runs_dir=str(tmp_path / "runs"))
    assert runtime.abandoned_calls() == before + 1
    deadline = time.monotonic() + 30
    while runtime.abandoned_calls() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert runtime.abandoned_calls() == before
    # the CLI's process ends with the run's exit code while the abandoned call sleeps on
    path.write_text(text.replace("SECONDS", "60"))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--runs-dir",
                           str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "timed out after 0.05 s" in done.stderr, done.stderr
    assert time.monotonic() - started < 50
