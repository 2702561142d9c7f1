"""``runs table --format csv`` is opened in spreadsheets: a text cell that starts as a formula does (= + - @, a tab
or carriage return) is written with a ``'`` before it, so that the spreadsheet shows it instead of running it,
while numbers, negative ones too, stay numbers."""

import csv
import io
import json

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: cells
params: {label: plain, shift: 1.0}
matrix: {label: ["=1+2", "@SUM(A1)", "+cmd", "-rf", "\\tx", plain], shift: [-1.5]}
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [1]}, executor: host}
  z: {op: mul, inputs: [x], args: {value: "${shift}"}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_csv_text_cells_that_start_as_formulas_are_quoted_and_numbers_are_not(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(manifest), "--runs-dir", runs, "--quiet")
    assert code == 0, err
    code, text, err = cli("runs", "table", out.splitlines()[-1], "--runs-dir", runs, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["label"] for r in rows] == ["'=1+2", "'@SUM(A1)", "'+cmd", "'-rf", "'\tx", "plain"]
    assert {r["shift"] for r in rows} == {"-1.5"} and {r["z"] for r in rows} == {"-1.5"}
    # the other formats show the values as they are
    code, text, err = cli("runs", "table", out.splitlines()[-1], "--runs-dir", runs, "--format", "json")
    assert [r["params"]["label"] for r in json.loads(text)["rows"]] == ["=1+2", "@SUM(A1)", "+cmd", "-rf", "\tx",
                                                                        "plain"]


PRECISE = """\
version: 1
name: digits
params: {lr: 0.1}
matrix: {lr: [0.123456789, 1.0e-10, 123456789.0, 0.1]}
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [1]}, dtype: fp64, executor: host}
  y: {op: mul, inputs: [x], args: {value: "${lr}"}, dtype: fp64}
outputs: {y: y}
"""


def test_csv_numbers_are_the_records_values_to_their_last_digit(tmp_path):
    manifest = tmp_path / "m.yaml"
    manifest.write_text(PRECISE)
    runs = str(tmp_path / "runs")
    code, out, err = cli("run", str(manifest), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    code, text, err = cli("runs", "table", json.loads(out)["sweep_id"], "--runs-dir", runs, "--format", "csv")
    assert code == 0, err
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [float(r["lr"]) for r in rows] == [0.123456789, 1.0e-10, 123456789.0, 0.1]
    for r in rows:
        with open(r["record"]) as f:
            record = json.load(f)
        assert float(r["lr"]) == record["params"]["lr"]
        assert float(r["y"]) == record["params"]["lr"]  # 1.0 times lr, in fp64: the output is lr exactly
