"""Faults at seeded random moments in real ``hetflow run`` processes leave true records (see tests/faultinject.py).

Each trial is a real process: a run, a sweep, a ``--parallel 2`` sweep or
a run on a local Dask cluster, sent a signal (SIGINT, two SIGINTs, SIGTERM,
SIGHUP, SIGKILL) or having its stdout or stderr pipe closed at a random
moment. Afterwards every record is terminal or shown as died, no crash log
was written, and a resume gives a clean run's outputs without running a
finished partition again. ``bench/faults.py`` runs hundreds of these.
"""

import signal
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import faultinject as fi  # noqa: E402

pytestmark = pytest.mark.slow

SEED = 20261204
TRIALS = (fi.plan_trials(21, SEED, ("run", "sweep-parallel", "sweep"))
          + fi.plan_trials(3, SEED, ("cluster",), ("SIGTERM", "SIGKILL", "close-stdout")))


@pytest.fixture(scope="module")
def workloads(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    manifests = fi.write_workloads(root / "manifests")
    return manifests, fi.clean_outputs(manifests, root)


@pytest.mark.parametrize("trial", TRIALS, ids=lambda t: f"{t.index}-{t.workload}-{t.fault}-{t.delay_s}s")
def test_a_fault_at_a_random_moment_leaves_true_records_and_a_resume_that_matches(trial, workloads, tmp_path):
    manifests, clean = workloads
    verdict = fi.run_trial(trial, manifests, tmp_path, clean)
    assert verdict.ok, (verdict.lies, verdict.crash_logs, verdict.resume_differed, verdict.reran, verdict.statuses)
    allowed = {fi.EXPECTED_EXIT[trial.fault]}
    if trial.fault.startswith("SIG"):
        # after the work is done a signal finds nothing to stop; before hetflow's handlers are in place (the
        # first tenths of a second, before anything is written) it ends the process as it ends any other
        allowed |= {0, -int(getattr(signal, trial.fault.partition("*")[0]))}
    assert verdict.exit_code in allowed, (verdict.exit_code, verdict.stdout_tail)
    if trial.fault.startswith("close-"):
        assert all(s.endswith(":succeeded") for s in verdict.statuses), verdict.statuses
    if verdict.top_id and trial.fault not in ("SIGKILL", "close-stdout") and verdict.exit_code >= 0:
        # every outcome that has an id ends stdout with it: id=$(hetflow run ... | tail -1) holds
        assert verdict.stdout_tail.splitlines()[-1] == verdict.top_id, verdict.stdout_tail


def test_resume_of_a_run_or_sweep_whose_process_still_runs_is_refused(tmp_path):
    import json
    import subprocess
    import time

    manifests = fi.write_workloads(tmp_path / "manifests")
    for path in manifests.values():  # steps long enough to outlast the resume's start on a loaded machine
        path.write_text(path.read_text().replace(f"seconds: {fi.STEP_S}}}", "seconds: 5}"))
    runs = tmp_path / "runs"
    for kind, name in (("run", "record.json"), ("sweep", "sweep.json")):
        proc = subprocess.Popen(fi.hetflow("run", str(manifests[kind]), "--runs-dir", str(runs), "--quiet"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 30
            while not list(runs.glob(f"*/{name}")) and time.monotonic() < deadline:
                time.sleep(0.05)
            (entry,) = [p.parent.name for p in runs.glob(f"*/{name}")
                        if json.loads(p.read_text()).get("owner", {}).get("pid") == proc.pid]
            code, result = fi.cli_json("run", str(manifests[kind]), "--runs-dir", str(runs), "--resume", entry, "--json")
            # exit 4, as when the resume finds the run's lock taken: which of the two it meets first is timing
            assert code == 4 and result["error"] == "locked" and "is still running" in result["message"], result
            assert result["holder"]["pid"] == proc.pid, result
        finally:
            proc.kill()
            proc.wait()
