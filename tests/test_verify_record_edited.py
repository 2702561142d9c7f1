"""A record whose params or matrix point were edited by hand after the run: the resolved manifest it keeps (its
digest checked) is what ran, so verify reruns that, and fails naming each param the record misstates, where it
said "all outputs match" of a run whose record claims a computation that never ran."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: ed
params: {k: 2.0, n: 4}
matrix: {k: [2.0, .nan]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: "${n}"}}
  y: {op: mul, inputs: [x], args: {value: "${k}"}}
outputs: {y: y}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def points(tmp_path_factory):
    root = tmp_path_factory.mktemp("ed")
    (root / "m.yaml").write_text(MANIFEST)
    runs = root / "runs"
    code, out, err = _cli("run", str(root / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    return runs, {p["name"]: p["run_id"] for p in json.loads(out)["points"]}


def _edited(runs: Path, run_id: str, name: str, change) -> str:
    record = json.loads((runs / run_id / "record.json").read_text())
    change(record)
    record["run_id"] = name
    (runs / name).mkdir()
    for f in (runs / run_id).iterdir():
        if f.name != "record.json":
            (runs / name / f.name).write_bytes(f.read_bytes())
    (runs / name / "record.json").write_text(json.dumps(record))
    return name


@pytest.mark.parametrize("point", ["ed[k=2.0]", "ed[k=NaN]"])
def test_an_untouched_point_verifies(points, point):
    runs, ids = points
    code, out, err = _cli("verify", ids[point], "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert json.loads(out)["match"] is True and "record_edited" not in json.loads(out)


@pytest.mark.parametrize("name, change, said", [
    ("p1", lambda r: r["params"].update(n=40), "the record's params give n = 40, but the manifest it ran has 4"),
    ("p2", lambda r: r["params"].pop("n"), "the record's params give n = absent, but the manifest it ran has 4"),
    ("p3", lambda r: r["matrix_point"]["values"].update(k=3.0),
     "the record's matrix point gives k = 3.0, but the manifest it ran has 2.0"),
    ("p4", lambda r: (r["params"].update(k=3.0), r["matrix_point"]["values"].update(k=3.0)),
     "the record's params give k = 3.0, but the manifest it ran has 2.0"),
])
def test_a_record_whose_params_were_edited_does_not_verify(points, name, change, said):
    runs, ids = points
    run_id = _edited(runs, ids["ed[k=2.0]"], name, change)
    code, out, err = _cli("verify", run_id, "--runs-dir", str(runs), "--json")
    assert code == 1, err
    result = json.loads(out)
    assert result["status"] == "failed" and result["match"] is False
    assert all(r["match"] for r in result["outputs"])  # the outputs are those of the manifest it ran
    assert any(line.startswith(said) for line in result["record_edited"])
    assert said in result["message"] and f"hetflow: {said}" in err
    code, out, _ = _cli("verify", run_id, "--runs-dir", str(runs))
    assert code == 1
    assert f"verify {run_id}: the rerun matches the record's outputs, but its params are not those the run had" in out


def test_a_resolved_manifest_edited_by_hand_is_said_to_be_edited_not_a_version_change(tmp_path):
    """The record's resolved manifest edited (a stage's argument changed) made verify blame a hetflow version
    change, though the run was made by this very hetflow."""
    import json as _json

    from hetflow.engine.store.runs import manifest_from_record

    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                    "  x: {op: full, args: {shape: [2], value: 3}}\noutputs: {x: x}\n")
    import hetflow

    done = hetflow.run(path, runs_dir=tmp_path / "runs", cache=False)
    record = _json.loads(open(done.record_path).read())
    record["manifest"]["resolved"]["stages"]["x"]["args"]["value"] = 4
    with pytest.raises(hetflow.UsageError) as refused:
        manifest_from_record(record)
    assert "was changed since (edited by hand, or damaged)" in str(refused.value), str(refused.value)
    record["versions"]["hetflow"] = "0.0.1"
    with pytest.raises(hetflow.UsageError) as refused:
        manifest_from_record(record)
    assert "the run was made by hetflow 0.0.1" in str(refused.value), str(refused.value)
