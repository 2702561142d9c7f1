"""`hetflow run --workers N`: the local cluster serves Dask's dashboard where the run shows its link."""

import io
import json
from pathlib import Path

import pytest

from hetflow.engine import cli

pytest.importorskip("distributed")

MANIFEST = """\
version: 1
name: tiny
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [8, 8], seed: 1}}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def _run(path: str, runs: Path, *flags: str) -> tuple[dict, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", path, "--runs-dir", str(runs), "--workers", "1", "--json", *flags], out=out, err=err)
    assert code == 0, err.getvalue()
    record = json.loads(Path(json.loads(out.getvalue())["record"]).read_text())
    events = [json.loads(line) for line in err.getvalue().splitlines() if line.startswith("{")]
    return record, events


@pytest.mark.slow
def test_a_quiet_run_starts_its_cluster_without_the_dashboard_and_a_shown_one_gives_its_link(manifest_file, tmp_path):
    path = manifest_file(MANIFEST)
    quiet, events = _run(path, tmp_path / "quiet", "--quiet")
    assert quiet["status"] == "succeeded" and quiet["scheduler"]["kind"] == "local-cluster"
    assert quiet["scheduler"]["dashboard"] is None and events == []
    pytest.importorskip("bokeh", minversion="3.1.0", reason="Dask serves the dashboard only with bokeh>=3.1")
    shown, events = _run(path, tmp_path / "shown", "--log-format", "json")
    assert shown["scheduler"]["dashboard"].startswith("http://127.0.0.1:")
    assert events[0]["event"] == "started" and events[0]["dashboard"] == shown["scheduler"]["dashboard"]


def _run_with_open_files(path, runs, soft: int, hard: int):
    import resource
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(path), "--runs-dir", str(runs),
                           "--workers", "2", "--quiet"], capture_output=True, text=True, timeout=180,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard)))


@pytest.mark.parametrize("files", [16, 32, 40])
def test_a_local_cluster_the_machine_will_not_start_is_the_environments_fault(manifest_file, tmp_path, files):
    """Too few open files for a scheduler, two nannies and the run: with some limits from 14 to 18 Dask's scheduler met EMFILE in its
    accept loop and the command hung for ever, with 40 the run crashed importing a module, with 32 it said
    "Nanny failed to start"; now it is refused before the cluster starts."""
    runs = tmp_path / "runs"
    done = _run_with_open_files(manifest_file(MANIFEST), runs, files, files)
    assert done.returncode == 5, done.stderr[-2000:]
    assert (f"a local cluster of 2 worker(s) needs about 68 open files, and this process may open only {files} (its "
            f"hard limit: {files}; `ulimit -n` in a shell)") in done.stderr
    assert "Traceback" not in done.stderr and "internal error" not in done.stderr
    assert not runs.exists()  # a command that cannot start writes nothing


def test_a_low_soft_limit_of_open_files_is_raised_for_a_local_cluster_as_far_as_the_hard_one_allows(manifest_file,
                                                                                                     tmp_path):
    done = _run_with_open_files(manifest_file(MANIFEST), tmp_path / "runs", 16, 4096)
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.mark.parametrize("command", ["run", "plan"])
def test_more_local_workers_than_the_memory_can_start_are_refused_before_any_starts(manifest_file, tmp_path, command):
    from hetflow.engine.run.distributed import _WORKER_START_B, _available_memory

    available = _available_memory()
    if available is None:
        pytest.skip("this machine does not say how much memory it has available (/proc/meminfo)")
    too_many = available // _WORKER_START_B + 1000  # a typo's extra digits: 1000 for 10
    runs = tmp_path / "runs"
    out, err = io.StringIO(), io.StringIO()
    code = cli.main([command, str(manifest_file(MANIFEST)), "--runs-dir", str(runs), "--workers", str(too_many)],
                    out=out, err=err)
    assert code == 5
    said = err.getvalue().strip()
    assert said.startswith(f"hetflow: error: a local cluster of {too_many} workers needs about ") and \
        said.endswith(" or join a cluster with --scheduler"), said
    assert not runs.exists()
