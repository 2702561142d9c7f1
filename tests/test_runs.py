"""Comparing runs: runs diff, runs table on a sweep, filters, id prefixes and latest, scalar values; gc."""

import csv
import io
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine.cli import main
from hetflow.engine.store.records import load_output

SWEEP = """\
version: 1
name: sw
plugins: [meet.py]
params: {n: 4, scale: 1.0, seed: 1}
matrix: {scale: [1.0, 2.0], seed: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 8], seed: "${seed}"}}
  y: {op: mul, inputs: [x], args: {value: "${scale}"}}
  s: {op: sum, inputs: [y]}
  met: {op: t.meet, inputs: [s], cache: false}
outputs: {y: y, s: s}
"""

# Two points of a --parallel 2 sweep pass this op only together, so the sweep succeeds only if they run at
# the same time: a proof by construction, not by comparing clocks.
MEET = """\
import threading

from hetflow import op

_PAIR = threading.Barrier(2, timeout=60)


@op("t.meet")
def meet(xp, x):
    _PAIR.wait()
    return x
"""

OTHER = """\
version: 1
name: other
params: {k: 3}
executors: {h: {vendor: cpu}}
stages:
  z: {op: ones, args: {shape: ["${k}"]}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A four-point sweep run two points at a time, and one run of another manifest."""
    folder = tmp_path_factory.mktemp("runs")
    (folder / "sw.yaml").write_text(SWEEP)
    (folder / "meet.py").write_text(MEET)
    (folder / "other.yaml").write_text(OTHER)
    runs = str(folder / "runs")
    code, out, err = cli("run", str(folder / "sw.yaml"), "--runs-dir", runs, "--quiet", "--json", "--parallel", "2")
    assert code == 0, err
    sweep = json.loads(out)
    code, out, err = cli("run", str(folder / "other.yaml"), "--runs-dir", runs, "--quiet", "--json")
    assert code == 0, err
    return folder, runs, sweep, json.loads(out)["run_id"]


def record(runs: str, run_id: str) -> dict:
    return json.loads(Path(runs, run_id, "record.json").read_text())


def test_two_points_of_a_sweep_run_at_the_same_time(swept):
    _, runs, sweep, _ = swept
    # --parallel 2: each point's t.meet stage waited for another point's (MEET), each under the lock of its own
    # params; one after another, the first would have failed when the barrier timed out
    records = [record(runs, p["run_id"]) for p in sweep["points"]]
    assert len(records) == 4 and all(r["status"] == "succeeded" for r in records)
    assert all(any(t["kind"] == "partition" and t["status"] == "succeeded" for t in r["tasks"]) for r in records)
    summary = json.loads(Path(runs, sweep["sweep_id"], "sweep.json").read_text())
    assert summary["parallel"] == 2 and summary["status"] == "succeeded"


def test_runs_table_of_a_sweep_has_one_row_per_point_with_params_and_scalar_values(swept):
    _, runs, sweep, _ = swept
    code, out, _ = cli("runs", "--runs-dir", runs, "table", sweep["sweep_id"], "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["params"] == ["scale", "seed"] and data["outputs"] == ["s"]
    assert [r["point"] for r in data["rows"]] == [p["name"] for p in sweep["points"]]
    for row, point in zip(data["rows"], sweep["points"]):
        s = load_output(os.path.join(runs, point["run_id"]), "s")
        assert row["outputs"]["s"] == pytest.approx(float(s)) and row["digests"] == point["outputs"]
        assert row["record"] == os.path.join(runs, point["run_id"], "record.json")
    # s is linear in scale: the scale-2 points sum to twice the scale-1 points of the same seed
    by = {(r["params"]["scale"], r["params"]["seed"]): r["outputs"]["s"] for r in data["rows"]}
    assert by[(2.0, 1)] == pytest.approx(2 * by[(1.0, 1)], rel=1e-6)

    code, text, _ = cli("runs", "--runs-dir", runs, "table", "latest-sweep")
    assert code == 0
    lines = text.splitlines()
    assert lines[0].split() == ["run", "point", "status", "scale", "seed", "s"] and len(lines) == 5
    # latest is the newest run, the other manifest's, as it is to runs show
    code, text, _ = cli("runs", "--runs-dir", runs, "table", "latest")
    assert code == 0 and len(text.splitlines()) == 2 and text.splitlines()[1].startswith(swept[3])
    code, text, _ = cli("runs", "--runs-dir", runs, "table", sweep["sweep_id"], "--format", "csv")
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [r["run"] for r in rows] == [p["run_id"] for p in sweep["points"]] and all(r["record"] for r in rows)
    code, text, _ = cli("runs", "--runs-dir", runs, "table", sweep["sweep_id"], "--format", "markdown")
    assert text.splitlines()[1].startswith("| --- |") and len(text.splitlines()) == 6


def test_json_given_before_the_subcommand_holds_for_it(swept):
    """`hetflow runs --json show ID` as `hetflow runs show ID --json`: the subcommand's own --json did not undo the
    group's, and show, diff, table and gc printed text, or an error with no JSON object on standard output."""
    _, runs, sweep, other = swept
    point = sweep["points"][0]["run_id"]
    for argv, check in ((("show", point), lambda d: d["run_id"] == point),
                        (("show", sweep["sweep_id"]), lambda d: d["sweep_id"] == sweep["sweep_id"]),
                        (("diff", point, other), lambda d: isinstance(d, dict)),
                        (("table", sweep["sweep_id"]), lambda d: d["params"] == ["scale", "seed"]),
                        (("gc", "--keep", "100", "--dry-run"), lambda d: d["dry_run"] is True)):
        code, out, err = cli("runs", "--json", "--runs-dir", runs, *argv)
        assert code == 0 and check(json.loads(out)), (argv, out[:200], err)
    code, out, _ = cli("runs", "--json", "--runs-dir", runs, "show", "no-such-run")
    assert code == 2 and json.loads(out)["error"] == "bad-input"
    code, out, _ = cli("runs", "--runs-dir", runs, "show", point)
    assert code == 0 and out.startswith(f"run {point}: succeeded")  # without --json, text


def test_runs_diff_shows_params_point_and_outputs_side_by_side(swept):
    _, runs, sweep, _ = swept
    a, b = sweep["points"][0]["run_id"], sweep["points"][2]["run_id"]  # scale 1.0 and 2.0, seed 1
    code, out, _ = cli("runs", "--runs-dir", runs, "diff", a, b, "--json")
    assert code == 0
    d = json.loads(out)
    assert d["params"] == [["scale", 1.0, 2.0]]
    assert d["matrix_point"] == [["point", "sw[scale=1.0,seed=1]", "sw[scale=2.0,seed=1]"]]
    assert d["manifest"][0][0] == "digest" and d["versions"] == [] and d["data"] == []
    y = next(o for o in d["outputs"] if o["output"] == "y")
    ya, yb = load_output(os.path.join(runs, a), "y"), load_output(os.path.join(runs, b), "y")
    assert y["max_abs_diff"] == pytest.approx(float(np.max(np.abs(ya - yb))))
    assert y["a"]["shape"] == [4, 8] and y["a"]["min"] == pytest.approx(float(ya.min()))
    s = next(o for o in d["outputs"] if o["output"] == "s")
    assert s["b"]["value"] == pytest.approx(2 * s["a"]["value"], rel=1e-6) and not s["same"]

    code, text, _ = cli("runs", "--runs-dir", runs, "diff", a, b)
    assert "params:\n  scale: 1.0 -> 2.0\n" in text
    assert "  y: differs  max abs difference" in text and "\n  s: differs" in text
    code, text, _ = cli("runs", "--runs-dir", runs, "diff", a, a)
    assert "params:" not in text and "  s: same  " in text


def test_filters_prefixes_latest_and_scalar_values_in_show(swept):
    _, runs, sweep, other = swept
    code, out, _ = cli("runs", "--runs-dir", runs, "--manifest", "other", "--json")
    assert [r["id"] for r in json.loads(out)] == [other]
    code, out, _ = cli("runs", "--runs-dir", runs, "--manifest", "sw", "--status", "succeeded", "--json")
    assert len(json.loads(out)) == 5  # four points and the sweep
    code, out, _ = cli("runs", "--runs-dir", runs, "--status", "failed", "--json")
    assert json.loads(out) == []
    code, out, _ = cli("runs", "--runs-dir", runs, "--since", "1h", "--json")
    assert len(json.loads(out)) == 6
    code, out, _ = cli("runs", "--runs-dir", runs, "--since", "2999-01-01", "--json")
    assert json.loads(out) == []
    code, _, err = cli("runs", "--runs-dir", runs, "--since", "soon")
    assert code == 2 and "expected an age such as 30d" in err

    code, out, _ = cli("runs", "--runs-dir", runs, "show", "latest")
    assert code == 0 and out.startswith(f"run {other}: succeeded")
    assert "  z: [1, 1, 1]  sha256:" in out
    point = sweep["points"][3]["run_id"]
    unique = next(len(point[:n]) for n in range(1, len(point) + 1)
                  if sum(p["run_id"].startswith(point[:n]) for p in sweep["points"]) == 1 and not other.startswith(point[:n]))
    code, out, _ = cli("runs", "--runs-dir", runs, "show", point[:unique])
    s = float(load_output(os.path.join(runs, point), "s"))
    assert code == 0 and f"  s: {json.dumps(s)}  sha256:" in out and "  y: 4x8 fp32 min " in out
    code, _, err = cli("runs", "--runs-dir", runs, "show", "2")
    assert code == 2 and "'2' matches 6 ids in " in err
    code, _, err = cli("runs", "--runs-dir", runs, "show", "nope")
    assert code == 2 and "no run or sweep 'nope'" in err
