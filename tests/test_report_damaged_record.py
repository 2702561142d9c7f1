"""The report of a record edited by hand whose inventory gives a device's name or bus address as a number or
null: shown as text, where it ended in 'could not be drawn ... or hetflow has a bug' with a crash log."""

from __future__ import annotations

import io
import json

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: dr
executors: {h: {vendor: cpu}}
stages:
  x: {op: arange, args: {stop: 4}}
outputs: {x: x}
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    root = tmp_path_factory.mktemp("dr")
    (root / "m.yaml").write_text(MANIFEST)
    out, err = io.StringIO(), io.StringIO()
    assert main(["run", str(root / "m.yaml"), "--runs-dir", str(root / "runs"), "--quiet"], out, err) == 0
    return root / "runs", out.getvalue().split()[-1]


@pytest.mark.parametrize("change, shown", [
    (lambda inv: inv[0]["devices"][0].update(bus_address=-1), "AMD"),
    (lambda inv: inv[0]["devices"][0].update(display_name=7, bus_address=None), "7 (None)"),
])
def test_odd_inventory_entries_are_drawn_as_text(ran, tmp_path, change, shown):
    runs, run_id = ran
    record = json.loads((runs / run_id / "record.json").read_text())
    change(record["inventory"])
    folder = tmp_path / "runs" / "X"
    folder.mkdir(parents=True)
    for f in (runs / run_id).iterdir():
        (folder / f.name).write_bytes(f.read_bytes())
    (folder / "record.json").write_text(json.dumps(record))
    err = io.StringIO()
    page = tmp_path / "page.html"
    assert main(["report", "X", "--runs-dir", str(tmp_path / "runs"), "-o", str(page)], io.StringIO(), err) == 0, \
        err.getvalue()
    text = page.read_text()
    inventory = text.split("executor inventory of the machine", 1)[1].split("</details>", 1)[0]
    assert shown in inventory
