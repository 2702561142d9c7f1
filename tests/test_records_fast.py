"""A run's record as written and as returned: the fast paths that large runs take give the data the slow ones did.

The API's :class:`Run` takes the record the run just wrote instead of
parsing it back; record values and sub-graph payloads are written by
orjson except where its text would differ (non-finite floats); an
earlier record is read for the few keys a plan's cache reasons need; a
run of fp32 tensors does not load ml_dtypes.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import hetflow
from hetflow.engine.store.records import dumps_record, encode_value, write_json_atomic
from hetflow.engine.store.runs import latest_record, read_fields
from hetflow.executors.base import Vendor
from hetflow.executors.payload import decode_plan, encode_plan

# y = x * inf holds 0 * inf: NaN, as meant
pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in multiply")

BRIDGED = """\
version: 1
name: bridged
params: {n: 6, k: .inf}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}, executor: a}
  y: {op: mul, inputs: [x], args: {value: "${k}"}, executor: b}
  z: {op: relu, inputs: [x], executor: b}
outputs: {y: y, z: z}
"""

FAILS = """\
version: 1
name: fails
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2048, 2048], seed: 1}, executor: a, timeout: 0.001}
  y: {op: relu, inputs: [x], executor: b}
outputs: {y: y}
"""


def _on_disk(run: hetflow.Run) -> dict:
    with open(run.record_path, encoding="utf-8") as f:
        return json.load(f)


def _same(a, b) -> bool:
    """Equal as JSON data, NaN equal to NaN, and of the same JSON types (no tuple where the file has a list)."""
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_the_returned_record_is_the_written_one(manifest_file, tmp_path):
    runs = tmp_path / "runs"
    r = hetflow.run(manifest_file(BRIDGED), runs_dir=runs)
    assert r.status == "succeeded"
    assert _same(r.record, _on_disk(r))
    assert r.record["params"]["k"] == math.inf
    assert [e["event"] for e in r.record["events"] if e["kind"] == "run"] == ["started"]  # as written: the end came after
    y = r.outputs["y"]
    assert math.isnan(y[0]) and np.all(y[1:] == np.inf)
    # the standard library's spelling of a non-finite float, where orjson would write null
    assert '"k":Infinity' in open(r.record_path, encoding="utf-8").read()
    again = hetflow.run(manifest_file(BRIDGED), runs_dir=runs)
    assert again.record["cache"]["hits"] and _same(again.record, _on_disk(again))


def test_a_failed_run_returns_the_written_record(manifest_file, tmp_path):
    r = hetflow.run(manifest_file(FAILS), runs_dir=tmp_path / "runs")
    assert r.status == "failed" and r.record["error"]["node"] == "x"
    assert _same(r.record, _on_disk(r))
    assert r.failures == hetflow.open_run(r.path).failures


def test_record_values_read_back_as_the_standard_library_wrote_them():
    values = [{"a": [1, 2.5e-7, 1e16], "b": "é", "c": {"d": None}}, {"timeout": float("-inf"), "n": [None, 1]},
              {"nan": float("nan")}, {1: "int key"}, [2 ** 70, (1, 2)], {"nested": {"deep": [{"x": math.inf}]}}]
    for value in values:
        standard = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        assert _same(json.loads(encode_value(value)), json.loads(standard)), value
    text = dumps_record({"plan": {"p": [1]}, "n": None}, {"plan": encode_value({"p": [1]})})
    assert text == '{\n  "plan": {"p":[1]},\n  "n": null\n}\n'


def test_payloads_keep_non_finite_arguments():
    nodes = [{"id": "y", "op": "mul", "args": {"value": float("nan")}, "dtype": "fp32", "inputs": ("x",)},
             {"id": "z", "op": "add", "args": {"value": -math.inf}, "dtype": "fp32", "inputs": ["y"]}]
    decoded = decode_plan(encode_plan(Vendor.cpu, ["x"], nodes, ["z"]))
    assert math.isnan(decoded["nodes"][0]["args"]["value"]) and decoded["nodes"][1]["args"]["value"] == -math.inf
    plain = decode_plan(encode_plan(Vendor.cpu, ["x"], [{"id": "y", "op": "relu", "args": {}, "dtype": "fp32",
                                                            "inputs": ("x",)}], ["y"]))
    assert plain == {"inputs": ["x"], "nodes": [{"args": {}, "dtype": "fp32", "id": "y", "inputs": ["x"], "op": "relu"}],
                     "outputs": ["y"]}


def test_read_fields_takes_a_record_line_by_line_and_anything_else_whole(tmp_path):
    path = str(tmp_path / "record.json")
    record = {"status": "succeeded", "manifest": {"name": "m"}, "plan": {"nodes": {"x": {"n": 1.5}}},
              "cache": {"keys": {"p0": {"key": "k0"}}}, "ratio": float("nan"), "last": [1]}
    write_json_atomic(path, record)
    got = read_fields(path, ["cache", "ratio", "last", "missing"])
    assert set(got) == {"cache", "ratio", "last"} and got["cache"] == record["cache"] and math.isnan(got["ratio"])
    assert got["last"] == [1]
    for layout in ({"indent": 2}, {"indent": None}, {"indent": 4}):
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f, **layout)
            f.write("\n")
        got = read_fields(path, ["cache", "status", "missing"])
        assert got == {"cache": record["cache"], "status": "succeeded"}, layout
    with open(path, "w", encoding="utf-8") as f:
        f.write('{\n  "cache": {"torn":\n')
    assert read_fields(path, ["cache"]) is None


def test_latest_record_reads_only_the_keys_asked_for(manifest_file, tmp_path):
    runs = tmp_path / "runs"
    path = manifest_file(BRIDGED)
    first = hetflow.run(path, runs_dir=runs)
    second = hetflow.run(path, runs_dir=runs, cache=False)
    whole = latest_record(str(runs), "bridged")
    assert whole["run_id"] == second.run_id and _same(whole, second.record)
    assert latest_record(str(runs), "bridged", keys=("cache",)) == {"cache": second.record["cache"]}
    assert latest_record(str(runs), "other", keys=("cache",)) is None
    assert first.record["cache"]["stored"] and hetflow.plan(path, runs_dir=runs).cache


def test_a_run_of_fp32_tensors_does_not_load_ml_dtypes(manifest_file, tmp_path):
    path = manifest_file(BRIDGED.replace("k: .inf", "k: 2.0"))
    code = ("import sys, hetflow; r = hetflow.run(sys.argv[1], runs_dir=sys.argv[2]); "
            "print(r.status, 'ml_dtypes' in sys.modules, r.record['warm_up'][0]['seconds'] < 0.05)")
    done = subprocess.run([sys.executable, "-c", code, path, str(tmp_path / "runs")], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.split() == ["succeeded", "False", "True"], done.stderr
    assert os.listdir(tmp_path / "runs")
