"""What the read-side commands print as JSON is JSON: a NaN or an infinity in a record (a param of ``.nan``, an
output that overflowed) reaches ``--json`` as the string the record spells it with, never as the bare ``NaN`` or
``Infinity`` that Python's json writes and jq, JavaScript and every strict parser refuse."""

import io
import json

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: nonfinite
params: {scale: 1.0, lr: .nan, floor: -.inf}
matrix: {scale: [1.0, .inf]}
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [1]}, executor: host}
  y: {op: div, inputs: [x], args: {value: 0.0}}
  z: {op: mul, inputs: [x], args: {value: "${scale}"}}
outputs: {y: y, z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def strict(text: str):
    """``text`` parsed as JSON proper: NaN, Infinity and -Infinity are refused, as jq and JSON.parse refuse them."""
    def refuse(word):
        raise ValueError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("nonfinite")
    manifest = root / "m.yaml"
    manifest.write_text(MANIFEST)
    runs = str(root / "runs")
    code, out, err = cli("run", str(manifest), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    done = strict(out)
    return runs, done["sweep_id"], [p["run_id"] for p in done["points"]]


def test_runs_show_json_of_a_run_writes_nonfinite_values_as_their_words(sweep):
    runs, _, (first, second) = sweep
    code, out, err = cli("runs", "show", second, "--runs-dir", runs, "--json")
    assert code == 0, err
    shown = strict(out)
    assert shown["params"]["lr"] == "NaN" and shown["params"]["floor"] == "-Infinity"
    assert shown["params"]["scale"] == "Infinity"
    assert shown["matrix_point"]["values"] == {"scale": "Infinity"}
    # the record itself still holds the floats: only what is printed is spelled out
    with open(f"{runs}/{second}/record.json") as f:
        assert json.load(f)["params"]["scale"] == float("inf")


def test_runs_show_json_of_a_sweep_writes_nonfinite_values_as_their_words(sweep):
    runs, sweep_id, _ = sweep
    code, out, err = cli("runs", "show", sweep_id, "--runs-dir", runs, "--json")
    assert code == 0, err
    shown = strict(out)
    assert [p["values"] for p in shown["points"]] == [{"scale": 1.0}, {"scale": "Infinity"}]


def test_runs_table_json_writes_nonfinite_params_and_outputs_as_their_words(sweep):
    runs, sweep_id, _ = sweep
    code, out, err = cli("runs", "table", sweep_id, "--runs-dir", runs, "--format", "json")
    assert code == 0, err
    table = strict(out)
    assert [r["outputs"] for r in table["rows"]] == [{"y": "Infinity", "z": 1}, {"y": "Infinity", "z": "Infinity"}]
    assert [r["params"]["scale"] for r in table["rows"]] == [1.0, "Infinity"]
    assert {r["params"]["lr"] for r in table["rows"]} == {"NaN"}


def test_runs_diff_json_writes_nonfinite_values_as_their_words(sweep):
    runs, _, (first, second) = sweep
    code, out, err = cli("runs", "diff", first, second, "--runs-dir", runs, "--json")
    assert code == 0, err
    d = strict(out)
    assert ["scale", 1.0, "Infinity"] in d["params"]
    z = next(r for r in d["outputs"] if r["output"] == "z")
    assert (z["a"]["value"], z["b"]["value"], z["same"]) == (1, "Infinity", False)
    assert z["max_abs_diff"] == "Infinity"
