"""runs gc: the newest N runs of each manifest, by age, and a dry run that says what would go and why."""

import io
import json
import time
from pathlib import Path

from hetflow.engine.cli import main
from hetflow.engine.records import utc_iso, write_json_atomic

BODY = """\
version: 1
name: NAME
params: {k: 1}
executors: {h: {vendor: cpu}}
stages:
  z: {op: full, args: {shape: [2], value: "${k}"}}
outputs: {z: z}
"""


def cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def run(tmp_path: Path, name: str, k: int) -> str:
    path = tmp_path / f"{name}.yaml"
    path.write_text(BODY.replace("NAME", name))
    code, out, err = cli("run", str(path), "--runs-dir", str(tmp_path / "runs"), "-p", f"k={k}", "--quiet", "--json")
    assert code == 0, err
    return json.loads(out)["run_id"]


def test_keep_counts_per_manifest(tmp_path):
    a = [run(tmp_path, "a", k) for k in (1, 2, 3)]
    b = run(tmp_path, "b", 9)
    runs = str(tmp_path / "runs")
    code, out, _ = cli("runs", "--runs-dir", runs, "gc", "--keep", "2", "--dry-run")
    assert code == 0
    assert out.splitlines()[0].startswith(f"would remove run {a[0]}  a  succeeded  started ")
    assert out.splitlines()[0].endswith(": beyond the newest 2 of a")
    assert sorted(p.name for p in Path(runs).iterdir() if not p.name.startswith(".")) == sorted(a + [b])
    code, out, _ = cli("runs", "--runs-dir", runs, "gc", "--keep", "2", "--json")
    result = json.loads(out)
    assert result["removed_runs"] == [a[0]] and sorted(result["kept_runs"]) == sorted(a[1:] + [b])
    assert result["removed_cache_entries"] == 1  # k=1's partition; the others are still used
    assert sorted(p.name for p in Path(runs).iterdir() if not p.name.startswith(".")) == sorted(a[1:] + [b])


def test_older_than_removes_by_age_and_says_so_in_a_dry_run(tmp_path):
    old, new = run(tmp_path, "a", 1), run(tmp_path, "a", 2)
    runs = tmp_path / "runs"
    record_file = runs / old / "record.json"
    record = json.loads(record_file.read_text())
    record["started_at"] = utc_iso(time.time() - 40 * 86400)  # a run from 40 days ago
    write_json_atomic(str(record_file), record)
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "30d", "--dry-run")
    assert code == 0 and f"would remove run {old}  a  succeeded  started {record['started_at']}: started before " in out
    assert "(30d ago)" in out and "kept 1 runs; would remove 1 runs" in out and record_file.exists()
    code, out, _ = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "30d", "--keep", "1")
    assert "kept 1 runs; removed 1 runs" in out and not record_file.exists() and (runs / new).is_dir()
    code, _, err = cli("runs", "--runs-dir", str(runs), "gc")
    assert code == 2 and "runs gc needs --keep N (per manifest), --older-than AGE, or both" in err
    code, _, err = cli("runs", "--runs-dir", str(runs), "gc", "--older-than", "a month")
    assert code == 2 and "expected an age such as 30d" in err
