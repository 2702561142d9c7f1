"""A sweep's point whose scalar output file was replaced or removed after the run: its cell in the report's table
says damaged, with why, where it showed the record's digest as if the output were an array, and it is left out
of the plots."""

from __future__ import annotations

import io
import json
import re

import numpy as np
import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: sd
params: {w: 1.0}
matrix: {w: [1.0, 2.0, 3.0]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 4}}
  y: {op: mul, inputs: [x], args: {value: "${w}"}}
  s: {op: sum, inputs: [y]}
outputs: {s: s}
"""


@pytest.mark.parametrize("harm, why", [
    (lambda f: np.save(f, np.float32(99.0)), "is not the array its record's digest names"),
    (lambda f: f.unlink(), "s.npy is not in "),
])
def test_a_damaged_scalar_reads_damaged_in_the_sweep_table(tmp_path, harm, why):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs, out, err = tmp_path / "runs", io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out, err) == 0
    result = json.loads(out.getvalue())
    points = {p["name"]: p["run_id"] for p in result["points"]}
    harm(runs / points["sd[w=2.0]"] / "s.npy")
    page = tmp_path / "sweep.html"
    assert main(["report", result["sweep_id"], "--runs-dir", str(runs), "-o", str(page)],
                io.StringIO(), io.StringIO()) == 0
    text = page.read_text()
    row = re.search(r'<tr class="point" data-point="sd\[w=2.0\]">(.*?)</tr>', text).group(1)
    cell = re.search(r'<td class="bad damaged" title="([^"]*)">damaged</td>', row)
    assert cell and why in cell.group(1).replace("&#x27;", "'")
    assert "<code title=\"sha256:" not in row  # the digest cell of an array
    assert re.search(r'<tr class="point" data-point="sd\[w=3.0\]">.*?<td class="num">18</td>', text)
    plot = text.split('data-output="s"', 1)[1].split("</svg>", 1)[0]
    assert plot.count("<circle") == 2


@pytest.mark.parametrize("matrix", [[1], "w: [1, 2]", 5])
def test_a_summary_whose_matrix_is_no_mapping_is_drawn_from_its_points(tmp_path, matrix):
    """hetflow's summaries keep no matrix; one written or edited by another tool in another form was refused as
    'could not be drawn ... or hetflow has a bug', with a crash log."""
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs, out, err = tmp_path / "runs", io.StringIO(), io.StringIO()
    assert main(["run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json"], out, err) == 0
    sweep_id = json.loads(out.getvalue())["sweep_id"]
    summary = runs / sweep_id / "sweep.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "matrix": matrix}))
    page, err = tmp_path / "sweep.html", io.StringIO()
    assert main(["report", sweep_id, "--runs-dir", str(runs), "-o", str(page)], io.StringIO(), err) == 0, \
        err.getvalue()
    text = page.read_text()
    assert [m for m in re.findall(r'data-point="([^"]*)"', text)] == ["sd[w=1.0]", "sd[w=2.0]", "sd[w=3.0]"]
    assert text.count("<circle") == 3
