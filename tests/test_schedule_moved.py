"""A scheduled manifest's folder moved while its slot runs: the slot is concluded, and its hook, which runs from the
manifest's folder, is owed to the next scheduler rather than lost or ending the scheduler in an internal error."""

import json
import shutil
import subprocess
import sys

from test_schedule import SLOW_OP, slow_body, wait_for, write


def test_a_hook_whose_manifest_folder_moved_while_its_slot_ran_is_owed_and_run_once_from_where_it_went(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    (a / "slow_ops.py").write_text(SLOW_OP)
    hooks = tmp_path / "hooks.txt"
    write(a, "moved", f"cron: \"0 * * * *\"\non_success: 'echo \"$HETFLOW_SLOT $PWD\" >> {hooks}'\n",
          body=slow_body(1.5).replace("{seconds: 1.5}", "{seconds: 1.5}, cache: false"))
    runs = tmp_path / "runs"
    argv = [sys.executable, "-m", "hetflow.engine.cli", "schedule", "run-due", "--now", "2026-06-01T00:05:00Z",
            "--runs-dir", str(runs), "--log-format", "json"]
    proc = subprocess.Popen([*argv, str(a / "moved.yaml")], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # the run has read its manifest and written its record: the folder goes while the stage waits
        wait_for(lambda: any(runs.glob("*/record.json")), 120, "the slot's run to begin")
        shutil.move(a, b)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    said = [json.loads(line) for line in out.splitlines()]
    assert proc.returncode == 0 and "Traceback" not in err and "internal error" not in err, (out, err)
    assert [e["event"] for e in said] == ["started", "succeeded", "hook-deferred"], said
    assert f"the manifest's folder {a} is gone" in said[-1]["reason"], said[-1]
    claim = json.loads((runs / ".schedule" / "moved" / "20260601T000000Z.json").read_text())
    assert claim["state"] == "succeeded" and claim["hook"] == "pending", claim
    assert not hooks.exists()
    # the next scheduler, of the file where it is now, runs it once, from its folder
    done = subprocess.run([*argv[:6], "2026-06-01T00:06:00Z", *argv[7:], str(b / "moved.yaml")], capture_output=True,
                          text=True, timeout=120)
    said = [json.loads(line) for line in done.stdout.splitlines()]
    assert done.returncode == 0 and [e["event"] for e in said] == ["hook-owed", "hook"], (said, done.stderr)
    assert hooks.read_text().split() == ["2026-06-01T00:00:00Z", str(b)]
    claim = json.loads((runs / ".schedule" / "moved" / "20260601T000000Z.json").read_text())
    assert (claim["hook"], claim["hook_rc"]) == ("ran", 0), claim
