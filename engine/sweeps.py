"""Running the points of a matrix sweep: in parallel, cancellable, resumable.

A sweep's state is its ``sweep.json`` (:func:`hetflow.engine.runs.new_sweep`):
one row per point with its status (``pending``, ``running``, then
``succeeded``, ``failed`` or ``cancelled``) and the run that ran it.
:func:`run_points` runs the rows it is given, up to ``parallel`` at a time
in threads, each point under its own run lock (the lock is per manifest
and resolved params, so points never block each other), and rewrites
``sweep.json`` atomically whenever a row changes.

Cancellation (SIGINT or SIGTERM, :mod:`hetflow.engine.cancel`) reaches
every point's run through the shared flag: running points write their
records as ``cancelled``, points not started stay ``pending``, the sweep
says ``cancelled`` and :class:`~hetflow.engine.errors.RunCancelled` is
raised. :func:`resume_rows` then picks what a resumed sweep runs: every
point that did not succeed, a point whose run had started continuing
that run (``--resume RUN_ID``) so its finished partitions are reused.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

from hetflow.engine.cancel import Cancel, current
from hetflow.engine.errors import HetflowError, RunCancelled, UsageError
from hetflow.engine.records import utc_iso
from hetflow.engine.runs import write_sweep

__all__ = ["run_points", "resume_rows", "RESUMABLE"]

RESUMABLE = ("cancelled", "failed", "running")


def resume_rows(summary: Mapping[str, Any], runs_dir: str) -> list[tuple[dict, str | None]]:
    """(row, run id to continue or None) for every point of a sweep that did not succeed.

    >>> rows = [{"name": "a", "status": "succeeded", "run_id": "r1"}, {"name": "b", "status": "pending", "run_id": None}]
    >>> [(r["name"], again) for r, again in resume_rows({"points": rows}, "runs")]
    [('b', None)]
    """
    out = []
    for row in summary.get("points", []):
        if row.get("status") == "succeeded":
            continue
        run_id = row.get("run_id")
        again = run_id if run_id and os.path.isfile(os.path.join(runs_dir, run_id, "record.json")) else None
        out.append((row, again))
    return out


def run_points(folder: str, summary: dict, todo: list[tuple[dict, Any]], run_one: Callable[[Any, dict], Any], *,
               parallel: int = 1, on_point: Callable[[dict], None] | None = None, cancel: Cancel | None = None) -> dict:
    """Run ``run_one(job, row)`` for each (row, job) of ``todo`` and keep ``sweep.json`` in step.

    ``run_one`` returns an object with ``status``, ``run_id``, ``record_path``,
    ``record`` and ``error`` (a :class:`hetflow.Run`). Returns the summary;
    raises :class:`RunCancelled` when the sweep was cancelled.
    """
    if parallel < 1:
        raise UsageError("--parallel must be at least 1")
    cancel = cancel or current() or Cancel()
    runs_dir = os.path.dirname(os.path.abspath(folder))
    guard = threading.Lock()
    started = time.time()
    summary.update(status="running", ended_at=None, duration_s=None, parallel=parallel)
    write_sweep(folder, summary)

    def save(row: dict, **changes: Any) -> None:
        with guard:
            row.update(changes)
            write_sweep(folder, summary)
        if on_point is not None and row["status"] not in ("running", "pending"):
            on_point(dict(row))

    def one(row: dict, job: Any) -> None:
        if cancel.requested:
            return
        save(row, status="running", error=None)
        try:
            done = run_one(job, row)
        except RunCancelled as e:
            run_id = os.path.basename(os.path.dirname(e.record_path)) if e.record_path else row.get("run_id")
            save(row, status="cancelled", run_id=run_id, error=str(e),
                 record=os.path.relpath(e.record_path, runs_dir) if e.record_path else row.get("record"))
            return
        except HetflowError as e:  # a point that cannot start (its lock is held, its inputs are wrong)
            save(row, status="failed", error=str(e))
            return
        save(row, status=done.status, run_id=done.run_id, record=os.path.relpath(done.record_path, runs_dir),
             outputs={k: v["digest"] for k, v in done.record["outputs"].items()}, error=done.error)

    if parallel == 1:
        for row, job in todo:
            one(row, job)
    else:
        with ThreadPoolExecutor(max_workers=parallel, thread_name_prefix="hetflow-point") as pool:
            for future in [pool.submit(one, row, job) for row, job in todo]:
                future.result()
    rows = summary["points"]
    states = {r["status"] for r in rows}
    if cancel.requested and states - {"succeeded", "failed"}:
        status = "cancelled"
    else:
        status = "failed" if states - {"succeeded"} else "succeeded"
    summary.update(status=status, ended_at=utc_iso(time.time()), duration_s=round(time.time() - started, 6))
    if status == "cancelled":
        summary["cancelled"] = {"signal": cancel.signal, "at": utc_iso(cancel.at or time.time()),
                                "finished": [r["name"] for r in rows if r["status"] in ("succeeded", "failed")]}
    else:
        summary.pop("cancelled", None)
    write_sweep(folder, summary)
    if status == "cancelled":
        done = len(summary["cancelled"]["finished"])
        raise RunCancelled(f"sweep {summary['sweep_id']} cancelled by {cancel.signal}: {done} of {len(rows)} points "
                           f"had finished", os.path.join(folder, "sweep.json"), cancel.signal)
    return summary
