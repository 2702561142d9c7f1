"""Two ``runs gc`` at once on one runs directory (two cron jobs that overlap): a unit the other gc took first (its
folders already renamed away when this one came to them) is said removed by that gc alone, not by both; what this
gc removed is what it says."""

from __future__ import annotations

import io
import json
import os

from hetflow.engine.cli import main
from hetflow.engine.store import runs as store

MANIFEST = """\
version: 1
name: gcc
params: {k: 1}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_a_unit_another_gc_took_first_is_not_said_removed_by_this_one(tmp_path, monkeypatch):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    made = []
    for k in (1, 2, 3):
        code, out, err = _cli("run", str(tmp_path / "m.yaml"), "-p", f"k={k}", "--runs-dir", runs, "--quiet", "--json")
        assert code == 0, err
        made.append(json.loads(out)["run_id"])
    taken = made[0]
    real = store._take_locks

    def other_gc_first(runs_dir, unit, records):
        # the other gc's step on this unit, between this gc's look and its removal: the folder renamed away
        if unit["id"] == taken and os.path.isdir(os.path.join(runs_dir, taken)):
            os.rename(os.path.join(runs_dir, taken), os.path.join(runs_dir, ".gc-" + taken))
        return real(runs_dir, unit, records)

    monkeypatch.setattr(store, "_take_locks", other_gc_first)
    code, out, err = _cli("runs", "gc", "--keep", "1", "--runs-dir", runs, "--json")
    monkeypatch.undo()
    assert code == 0, err
    said = json.loads(out)
    assert said["removed_runs"] == [made[1]] and [u["id"] for u in said["removed"]] == [made[1]]
    assert said["kept_runs"] == [made[2]]
    assert sorted(d for d in os.listdir(runs) if not d.startswith(".")) == [made[2]]
