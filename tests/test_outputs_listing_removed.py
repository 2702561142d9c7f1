"""A run or sweep that ``runs gc`` (in another process) renames out of the runs directory at the moment a listing
reads it is gone from the listing, never listed as ``unreadable`` or ``forbidden``: those say a folder that is
still there is damaged or another user's; a sweep's point whose run goes so reads ``missing``. gc's own step is taken here, a rename to ``.gc-NAME``, at the instant
between the listing's look at the folder and its read of the file."""

from __future__ import annotations

import io
import json
import os
import sys

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: lr
params: {k: 1}
matrix: {k: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.fixture
def swept(tmp_path):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = tmp_path / "runs"
    code, out, err = _cli("run", str(tmp_path / "m.yaml"), "--runs-dir", str(runs), "--quiet", "--json")
    assert code == 0, err
    said = json.loads(out)
    return runs, said["sweep_id"], [p["run_id"] for p in said["points"]]


def _removed_at(monkeypatch, check: str, path: str, caller: str | None = None) -> list[str]:
    """gc's rename of the folder of ``path`` (``path`` itself for ``access``) lands at ``os.CHECK(path)``: after
    ``os.path.isfile`` has found the file, before ``os.access`` looks at the folder; with ``caller``, at the first
    such look that function of hetflow's makes. Returns the folders moved."""
    holder, name = (os.path, "isfile") if check == "path.isfile" else (os, "access")
    real = getattr(holder, name)
    folder = os.path.dirname(path) if check == "path.isfile" else path
    moved: list[str] = []

    def move() -> None:
        os.rename(folder, os.path.join(os.path.dirname(folder), ".gc-" + os.path.basename(folder)))
        moved.append(os.path.basename(folder))

    def look(p, *args, **kwargs):
        if os.fspath(p) != path or moved or (caller is not None and sys._getframe(1).f_code.co_name != caller):
            return real(p, *args, **kwargs)
        if check == "access":
            move()
            return real(p, *args, **kwargs)
        answer = real(p, *args, **kwargs)
        move()
        return answer

    monkeypatch.setattr(holder, name, look)
    return moved


@pytest.mark.parametrize("which, check", [("run", "path.isfile"), ("sweep", "path.isfile"), ("run", "access"),
                                          ("sweep", "access")])
def test_a_folder_removed_while_listed_is_not_listed_as_damaged(swept, monkeypatch, which, check):
    runs, sweep_id, points = swept
    name = points[1] if which == "run" else sweep_id
    folder = os.path.join(str(runs), name)
    target = folder if check == "access" else os.path.join(folder, "record.json" if which == "run" else "sweep.json")
    moved = _removed_at(monkeypatch, check, target)
    code, out, err = _cli("runs", "--runs-dir", str(runs), "--json")
    monkeypatch.undo()
    assert moved == [name]
    assert code == 0, err
    rows = {r["id"]: r["status"] for r in json.loads(out)}
    assert name not in rows, rows
    assert set(rows.values()) == {"succeeded"}, rows
    # what is still there is listed as it is
    assert set(rows) == ({sweep_id, *points} - {name})


def test_a_points_run_removed_while_its_sweep_is_shown_reads_missing_not_unreadable(swept, monkeypatch):
    runs, sweep_id, points = swept
    record = os.path.join(str(runs), points[0], "record.json")
    moved = _removed_at(monkeypatch, "path.isfile", record)
    code, out, err = _cli("runs", "show", sweep_id, "--runs-dir", str(runs), "--json")
    monkeypatch.undo()
    assert moved == [points[0]]
    assert code == 0, err
    assert [(p["run_id"], p["status"]) for p in json.loads(out)["points"]] == \
        [(points[0], "missing"), (points[1], "succeeded")]


def test_a_points_run_removed_while_runs_table_reads_it_is_a_missing_row(swept, monkeypatch):
    runs, sweep_id, points = swept
    # after the sweep's view found the record, as the table looks for it again to read it
    moved = _removed_at(monkeypatch, "path.isfile", os.path.join(str(runs), points[0], "record.json"), caller="table")
    code, out, err = _cli("runs", "table", sweep_id, "--runs-dir", str(runs), "--format", "json")
    monkeypatch.undo()
    assert moved == [points[0]]
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert [(r["run_id"], r["status"], r["record"]) for r in rows] == \
        [(points[0], "missing", None), (points[1], "succeeded", os.path.join(str(runs), points[1], "record.json"))]


def test_a_points_run_removed_while_report_draws_its_sweep_reads_missing(swept, monkeypatch, tmp_path):
    runs, sweep_id, points = swept
    page = tmp_path / "page.html"
    moved = _removed_at(monkeypatch, "path.isfile", os.path.join(str(runs), points[0], "record.json"),
                        caller="_point_record")
    code, out, err = _cli("report", sweep_id, "--runs-dir", str(runs), "-o", str(page))
    monkeypatch.undo()
    assert moved == [points[0]]
    assert code == 0, err
    text = page.read_text()
    gone = text.split('data-point="lr[k=1]"', 1)[1].split("</tr>", 1)[0]
    kept = text.split('data-point="lr[k=2]"', 1)[1].split("</tr>", 1)[0]
    assert "missing" in gone and "succeeded" not in gone, gone
    assert "succeeded" in kept, kept
