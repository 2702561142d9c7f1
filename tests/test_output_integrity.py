"""A run's outputs are what its record vouches for: each is read back checked against the digest the record keeps,
so a file changed or damaged since the run is refused (the API) or said so (``runs show``, ``report``), never handed
on as the run's."""

import json
from pathlib import Path

import numpy as np
import pytest

import hetflow
from hetflow.engine.cli import main
from hetflow.engine.errors import OutputDamaged

DTYPES = ["fp32", "fp16", "bf16", "fp8e4m3", "fp8e5m2", "int8", "int4", "int16", "int32", "int64", "uint8", "bool",
          "fp64"]

MANIFEST = "version: 1\nname: kinds\nexecutors: {h: {vendor: cpu}}\nstages:\n" \
           "  x: {op: random.normal, args: {shape: [3, 5], seed: 4}}\n" \
           "  s: {op: sum, inputs: [x]}\n" + "".join(f"  c_{d}: {{op: cast, inputs: [x], dtype: {d}}}\n" for d in DTYPES) \
           + "outputs: {s: s, " + ", ".join(f"o_{d}: c_{d}" for d in DTYPES) + "}\n"


@pytest.fixture(scope="module")
def done(tmp_path_factory):
    folder = tmp_path_factory.mktemp("integrity")
    (folder / "m.yaml").write_text(MANIFEST)
    return hetflow.run(folder / "m.yaml", runs_dir=folder / "runs", cache=False)


def test_every_dtype_reads_back_as_the_record_names_it(done):
    again = hetflow.open_run(done.run_id, runs_dir=Path(done.path).parent)
    assert set(again.outputs) == {"s", *(f"o_{d}" for d in DTYPES)}
    for name in again.outputs:
        array = again.outputs[name]
        assert array.shape == tuple(done.record["outputs"][name]["shape"])
        assert np.array_equal(np.asarray(array, np.float64), np.asarray(done.outputs[name], np.float64), equal_nan=True)


@pytest.mark.parametrize("damage", ["changed", "truncated", "replaced", "removed"])
def test_an_output_changed_or_damaged_after_the_run_is_refused_and_said(done, tmp_path, damage):
    import shutil

    run_dir = tmp_path / done.run_id
    shutil.copytree(done.path, run_dir)
    file = run_dir / "o_fp32.npy"
    if damage == "changed":  # one value nudged and saved as a valid .npy: only the digest tells
        array = np.load(file)
        array[0, 0] = np.nextafter(array[0, 0], np.float32(np.inf))
        np.save(file, array)
    elif damage == "truncated":
        file.write_bytes(file.read_bytes()[:100])
    elif damage == "replaced":
        file.write_bytes(b"not an array")
    else:
        file.unlink()
    run = hetflow.open_run(done.run_id, runs_dir=tmp_path)
    with pytest.raises(OutputDamaged) as refused:
        run.outputs["o_fp32"]
    why = {"changed": "is not the array its record's digest names", "truncated": "cannot be read as the fp32 array",
           "replaced": "it is not a .npy file", "removed": "o_fp32.npy is not in"}[damage]
    assert why in str(refused.value) and str(refused.value).startswith("output 'o_fp32': ")
    assert run.outputs["o_fp64"].dtype == np.float64  # the others still read
    import io

    out = io.StringIO()
    assert main(["runs", "show", done.run_id, "--runs-dir", str(tmp_path)], out=out, err=io.StringIO()) == 0
    line = next(text for text in out.getvalue().splitlines() if text.strip().startswith("o_fp32:"))
    assert why in line
    out = io.StringIO()
    assert main(["report", str(run_dir), "-o", str(tmp_path / "r.html")], out=out, err=io.StringIO()) == 0
    assert why.replace("'", "&#x27;") in (tmp_path / "r.html").read_text()
    record = json.loads((run_dir / "record.json").read_text())
    assert record["outputs"]["o_fp32"]["digest"] == done.record["outputs"]["o_fp32"]["digest"]  # nothing rewritten


def test_verify_fails_a_run_whose_files_are_not_what_it_recorded_even_when_the_rerun_matches(done, tmp_path):
    import io
    import shutil

    shutil.copytree(done.path, tmp_path / done.run_id)
    file = tmp_path / done.run_id / "o_int8.npy"
    array = np.load(file)
    array[0, 0] += 1
    np.save(file, array)
    out, err = io.StringIO(), io.StringIO()
    assert main(["verify", done.run_id, "--runs-dir", str(tmp_path), "--json"], out=out, err=err) == 1
    result = json.loads(out.getvalue())
    rows = {r["output"]: r for r in result["outputs"]}
    assert result["match"] is False and all(r["match"] for r in rows.values())  # the rerun reproduces the record
    assert "is not the array its record's digest names" in rows["o_int8"]["file"]
    assert {r["file"] for n, r in rows.items() if n != "o_int8" and "file" in r} == {"ok"}
    assert f"hetflow: output o_int8: {rows['o_int8']['file']}" in err.getvalue()


@pytest.mark.parametrize("elsewhere", ["/etc/passwd", "../other/o_fp32.npy", "sub/o_fp32.npy", ".."])
def test_a_record_naming_a_file_outside_its_run_folder_is_not_read(done, tmp_path, monkeypatch, elsewhere):
    """A record edited to name another path for an output had that file opened and read (refused only by its
    digest): a run's outputs are files of its own folder, named alone."""
    import shutil

    from hetflow.engine.store import records

    run_dir = tmp_path / done.run_id
    shutil.copytree(done.path, run_dir)
    record = json.loads((run_dir / "record.json").read_text())
    record["outputs"]["o_fp32"]["file"] = elsewhere
    (run_dir / "record.json").write_text(json.dumps(record))
    opened = []
    real = np.load
    monkeypatch.setattr(records.np, "load", lambda path, *a, **k: opened.append(path) or real(path, *a, **k))
    run = hetflow.open_run(done.run_id, runs_dir=tmp_path)
    with pytest.raises(OutputDamaged) as refused:
        run.outputs["o_fp32"]
    assert "which is not a file of the run's folder" in str(refused.value) and opened == [], (str(refused.value), opened)
