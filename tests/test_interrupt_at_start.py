"""A Ctrl-C (Python's own SIGINT handler: a KeyboardInterrupt at whatever line runs) as a run sets out."""

import json
import os
import signal
import threading

import pytest

import hetflow
from hetflow.engine.run import execute

MANIFEST = """\
version: 1
name: early
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [4]}}
outputs: {x: x}
"""


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
@pytest.mark.parametrize("where", ["_initial_write", "new_run_dir"])
def test_a_ctrl_c_while_the_run_sets_out_leaves_a_cancelled_record(tmp_path, monkeypatch, where):
    """One that came after the running record was handed to its writer left that record running for as long as
    the process lived (and one a moment earlier, a folder without a record)."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    real = getattr(execute, where)

    def then_ctrl_c(*args, **kwargs):
        made = real(*args, **kwargs)
        os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(execute, where, then_ctrl_c)
    path = tmp_path / "early.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    # the Ctrl-C asks the run to stop: it stops where it looks, and says so
    with pytest.raises(hetflow.RunCancelled):
        hetflow.run(path, runs_dir=runs, cache=False)
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    execute._record_writers().submit(lambda: None).result()  # a running record's write under way has ended
    record = json.loads((folder / "record.json").read_text())
    assert record["status"] == "cancelled" and record["cancelled"]["signal"] == "SIGINT", record["status"]
    assert sorted(p.name for p in folder.iterdir()) == ["record.json"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
def test_a_ctrl_c_as_a_sweep_sets_out_leaves_its_summary_cancelled(tmp_path, monkeypatch):
    """One right after the running summary's first write, before the handler that writes its end, left the
    summary running for as long as the process lived."""
    from hetflow.engine.batch import sweeps

    real, calls = sweeps.write_sweep, []

    def then_ctrl_c(*args, **kwargs):
        made = real(*args, **kwargs)
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(sweeps, "write_sweep", then_ctrl_c)
    path = tmp_path / "early.yaml"
    path.write_text(MANIFEST.replace("name: early", "name: early\nparams: {n: 1}\nmatrix: {n: [1, 2]}"))
    runs = tmp_path / "runs"
    with pytest.raises((KeyboardInterrupt, hetflow.RunCancelled)):
        hetflow.sweep(path, runs_dir=runs, cache=False)
    (summary,) = runs.glob("*/sweep.json")
    assert json.loads(summary.read_text())["status"] == "cancelled"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
