"""A Ctrl-C (Python's own SIGINT handler: a KeyboardInterrupt at whatever line runs) while ``hetflow.sweep`` makes
its folder, as a notebook's user presses it."""

from __future__ import annotations

import json
import os
import signal
import threading

import pytest

import hetflow
from hetflow.engine.store import records, runs as runs_store

MANIFEST = """\
version: 1
name: early
params: {n: 1}
matrix: {n: [1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
outputs: {x: x}
"""


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(), reason="signals reach the main thread")
@pytest.mark.parametrize("module, where", [(records, "write_text_atomic"), (runs_store, "new_sweep")],
                         ids=["after-its-manifest-copy", "after-its-first-summary"])
def test_a_ctrl_c_while_a_sweep_makes_its_folder_leaves_it_cancelled_with_every_point_pending(
        tmp_path, monkeypatch, module, where):
    """One that came after the folder was made and before the sweep's own handler was in place left a folder
    without a summary (its manifest.yaml alone), or a summary saying running for as long as the process lived."""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    real, sent = getattr(module, where), []

    def then_ctrl_c(*args, **kwargs):
        made = real(*args, **kwargs)
        if not sent:
            sent.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return made

    monkeypatch.setattr(module, where, then_ctrl_c)
    path = tmp_path / "early.yaml"
    path.write_text(MANIFEST)
    runs = tmp_path / "runs"
    try:
        hetflow.sweep(path, runs_dir=runs, cache=False)
    except hetflow.RunCancelled as e:
        assert "cancelled by SIGINT" in str(e)
    except KeyboardInterrupt:  # caught here: out of the test it would stop the whole session
        pytest.fail(f"the Ctrl-C came out of hetflow.sweep as it made its folder: {_listing(runs)}")
    else:
        pytest.fail("the sweep ran to its end though a Ctrl-C came")
    assert sent
    (folder,) = [p for p in runs.iterdir() if not p.name.startswith(".")]
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.yaml", "sweep.json"]
    summary = json.loads((folder / "sweep.json").read_text())
    assert summary["status"] == "cancelled" and summary["cancelled"]["signal"] == "SIGINT"
    assert [row["status"] for row in summary["points"]] == ["pending", "pending"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    # and it resumes as a cancelled sweep does, running both points
    monkeypatch.setattr(module, where, real)
    again = hetflow.sweep(path, runs_dir=runs, cache=False, resume=summary["sweep_id"])
    assert again.status == "succeeded" and [r.outputs["x"].tolist() for r in again.runs] == [[1.0], [1.0, 1.0]]


def _listing(folder) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, names in os.walk(folder) for f in names
                  if ".locks" not in d)
