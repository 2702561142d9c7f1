"""``runs gc --cache-dir`` that names a file, or a path inside one, is refused as every command refuses it (exit 2,
nothing removed), not taken for a cache without entries."""

from __future__ import annotations

import io
import json
import os

import pytest

from hetflow.engine.cli import main

MANIFEST = """\
version: 1
name: gcd
params: {k: 1}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, 2], seed: "${k}"}, executor: h}
outputs: {x: x}
"""


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("inside", [False, True])
def test_a_cache_dir_that_is_a_file_is_refused_and_nothing_is_removed(tmp_path, inside):
    (tmp_path / "m.yaml").write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    made = []
    for k in (1, 2):
        code, out, err = _cli("run", str(tmp_path / "m.yaml"), "-p", f"k={k}", "--runs-dir", runs, "--quiet", "--json")
        assert code == 0, err
        made.append(json.loads(out)["run_id"])
    (tmp_path / "notes.txt").write_text("a file")
    cache = str(tmp_path / "notes.txt") + ("/cache" if inside else "")
    code, out, err = _cli("runs", "gc", "--keep", "1", "--runs-dir", runs, "--cache-dir", cache, "--json")
    assert code == 2, (out, err)
    said = json.loads(out)
    assert said["error"] == "bad-input" and said["message"].startswith(f"--cache-dir {cache!r} is ")
    assert said["message"].endswith(", not a folder")
    assert sorted(d for d in os.listdir(runs) if not d.startswith(".")) == sorted(made)
    # the same command with the runs directory's own cache goes on
    code, out, err = _cli("runs", "gc", "--keep", "1", "--runs-dir", runs, "--json")
    assert code == 0, err
    assert json.loads(out)["removed_runs"] == [made[0]]
