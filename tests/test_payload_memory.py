"""What a process making many runs keeps of their sub-plans: bounded by bytes, whatever the runs' inputs."""

import gc
import os

import numpy as np

import hetflow
from hetflow.executors import payload

MANIFEST = """\
version: 1
name: inputs
executors: {a: {vendor: cpu}}
stages:
  x: {op: input, args: {shape: [1000, 2000], dtype: fp32}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def test_runs_given_new_arrays_in_a_loop_do_not_keep_them(tmp_path):
    """Each partition's payload carries the arrays given as inputs, and decoded payloads were kept by count (16,384
    of them): a process that ran a manifest on a new 8 MB array each time grew by about 24 MB a run."""
    path = tmp_path / "inputs.yaml"
    path.write_text(MANIFEST)
    sizes = []
    for i in range(16):
        done = hetflow.run(path, inputs={"x": np.full((1000, 2000), i, np.float32)}, runs_dir=tmp_path / "runs",
                           cache=False)
        assert done.status == "succeeded" and float(done.outputs["y"][0, 0]) == i
        del done
        gc.collect()
        sizes.append(_resident_mb())
    assert payload._DECODED_SIZE <= payload._KEPT_BYTES
    assert all(len(kept) <= payload._KEPT_BYTES // 16 for kept in payload._DECODED), "an array's payload was kept"
    # twelve more runs after the fourth: about 300 MB more when each kept its array
    assert sizes[-1] - sizes[3] < 120, sizes


def _resident_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

def test_small_payloads_are_decoded_once_and_shared():
    plan = type("P", (), {})()
    plan.payload = b'{"nodes": [], "stamp": "' + str(id(plan)).encode() + b'"}'
    first = payload.decode_plan(plan)
    assert payload.decode_plan(plan) is first and plan.payload in payload._DECODED
