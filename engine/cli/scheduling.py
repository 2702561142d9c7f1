"""``hetflow schedule list|run-due|status|serve``: keep the ``schedule:`` of manifests."""

from __future__ import annotations

import argparse

from hetflow.engine.cli.common import EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED

#: ``schedule status --check``: no scheduler decided a fire time that is more than ``--grace`` seconds past
EXIT_OVERDUE = 6
from hetflow.engine.errors import ManifestError, UsageError, require_runs_dir
from hetflow.engine.run.events import printable
from hetflow.engine.store.runs import json_text

__all__ = ["cmd_schedule"]


def cmd_schedule(args: argparse.Namespace, out, err) -> int:
    if args.schedule_command == "serve":
        return _serve_stoppable_from_start(args, out, err)
    return _schedule(args, out, err)


def _serve_stoppable_from_start(args: argparse.Namespace, out, err) -> int:
    """``serve`` with a stop signal taken from its first moment: one that comes while it loads its modules and
    reads its manifests (a second on a loaded machine) would end it by the default action (-15, or 130 for a
    Ctrl-C), where a stop ends serve with 0; it then starts, claims nothing and stops."""
    import signal

    from hetflow._stops import Stops
    from hetflow.engine.run.cancel import listened

    came: list[int] = []
    old = {}
    for s in listened():
        try:
            old[s] = signal.signal(s, lambda signum, frame: came.append(signum))
        except ValueError:
            break  # not the main thread (main() called from a thread): serve's own handlers cannot be set either
        if isinstance(old[s], Stops):  # what came while the command line loaded
            came.extend(old[s])
    args.stopped = lambda: bool(came)
    try:
        return _schedule(args, out, err)
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


def _schedule(args: argparse.Namespace, out, err) -> int:
    from datetime import datetime, timezone

    from hetflow.engine.batch import schedule as schedlib

    import threading

    written = threading.Lock()  # one line at a time: slots are run, and concluded, in threads of their own

    def log(event: str, fields) -> None:
        line = schedlib.format_event(event, fields, args.log_format) + "\n"
        with written:
            out.write(line)
            out.flush()

    files = schedlib.discover(args.paths)
    if args.schedule_command in ("run-due", "status"):
        _scheduled_as_named(args.paths)
    if args.schedule_command in ("serve", "run-due"):
        # claims go under the runs directory: a file in its way is exit 5 before a manifest is read; a
        # missing one is made when the first slot is claimed, so a command that stops on bad input writes nothing
        require_runs_dir(args.runs_dir, create=False)
    if args.schedule_command == "serve":
        from hetflow.engine.batch.serve import Server

        _writable(args.runs_dir)  # a service that could never claim a slot says so now, not at every poll
        _check_identities(files)
        Server(args.paths, args.runs_dir, log, poll=args.poll).serve(stopped=args.stopped)
        return EXIT_OK
    now = schedlib.parse_instant(args.now) if args.now else datetime.now(timezone.utc)
    if args.schedule_command == "run-due":
        # an explicit --now on a fire time names that slot: asked again (an Airflow retry, by hand), a failed one reruns
        counts, problems = schedlib.run_due(files, args.runs_dir, now, log, dry_run=args.dry_run, retry=bool(args.now))
        for d in problems:
            print(printable(str(d)), file=err)
        if problems:
            return EXIT_BAD_INPUT
        return EXIT_RUN_FAILED if counts["failed"] or counts["died"] else EXIT_OK
    if args.schedule_command == "status":
        if not 0 <= args.grace <= 10 * 365 * 86400:  # NaN too
            raise UsageError(f"--grace must be 0 seconds or more, and at most ten years, got {args.grace}")
        rows, problems = schedlib.status(files, args.runs_dir, now, grace=args.grace)
        if problems and args.json:  # the one object a failure prints, with every problem, not a list
            raise ManifestError(problems)
        for d in problems:
            print(printable(str(d)), file=err)
        code, message = _checked(rows) if args.check else (EXIT_OK, None)
        if args.json and args.check:
            # a check's exit code is its result: said in the object, as every --json result with one says it
            print(json_text({"status": _CHECKED[code], "exit_code": code, **({"message": message} if message else {}),
                              "manifests": rows}, indent=2), file=out)
        elif args.json:
            print(json_text(rows, indent=2), file=out)
        elif not rows and not problems:
            print("no scheduled manifests in " + ", ".join(args.paths), file=out)
        for r in rows if not args.json else []:
            if r["last_slot"] is None:
                last = "never ran"
            else:
                result = r["status"] or r["state"]
                took = f" in {r['duration_s']:.2f} s" if r["duration_s"] is not None else ""
                last = f"last slot {r['last_slot']}: {result}{took}" + (f" (run {r['run_id']})" if r["run_id"] else "")
            active = "  active now" if r["active"] else ""
            overdue = f"  overdue: {r['overdue']} not decided" if r["overdue"] else ""
            print(printable(f"{r['manifest']}  {r['file']}  {last}  next {r['next_slot']}{active}{overdue}"), file=out)
        if problems:
            return EXIT_BAD_INPUT
        if message:
            print(printable(f"hetflow: {message}"), file=err)
        return code
    if not 1 <= args.count <= MAX_COUNT:  # a count past it ran for ever, fire time after fire time
        raise UsageError(f"--count must be from 1 to {MAX_COUNT}, got {args.count}")
    rows, problems = [], []
    for file in files:
        try:
            entry = schedlib.load_entry(file)
        except ManifestError as e:
            problems.extend(e.diagnostics)
            continue
        if entry is None:
            continue
        s = entry.schedule
        rows.append({"file": file, "manifest": entry.name, "cron": s.cron, "timezone": s.timezone, "catchup": s.catchup,
                     "max_active": s.max_active, "params": dict(s.params),
                     "next": [schedlib.slot_id(t) for t in s.after(now, args.count)],
                     "next_local": [t.astimezone(s.tz).isoformat() for t in s.after(now, args.count)]})
    if problems and args.json:  # the one object a failure prints, with every problem, not a list
        raise ManifestError(problems)
    for d in problems:
        print(printable(str(d)), file=err)
    if args.json:
        print(json_text(rows, indent=2), file=out)
    elif not rows and not problems:
        print("no scheduled manifests in " + ", ".join(args.paths), file=out)
    for r in rows if not args.json else []:
        print(printable(f"{r['manifest']}  {r['file']}  cron {r['cron']!r} in {r['timezone']}  "
                        f"catchup {str(r['catchup']).lower()}  max_active {r['max_active']}"), file=out)
        for utc, local in zip(r["next"], r["next_local"]):
            print(f"  {utc}  ({local})", file=out)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def _scheduled_as_named(paths) -> None:
    """A manifest file named on the command line carries a ``schedule:`` block: without one, ``run-due`` and
    ``status`` did nothing and said nothing, exit 0, as for a folder of manifests none of which is scheduled."""
    import os

    from hetflow.engine.manifest.validate import load

    for path in paths:
        if os.path.isfile(path):
            doc = load(path)
            if isinstance(doc.value, dict) and "schedule" not in doc.value:
                raise UsageError(f"{path} has no schedule: block, so nothing of it is scheduled (add one, as "
                                 "docs/how-to/schedule.md shows, or run it now with hetflow run)")


def _writable(runs_dir: str) -> None:
    """Refuse (exit 5) a runs directory this user cannot write in, or cannot make: its nearest folder that exists
    is read-only to it (a read-only mount, another user's)."""
    import os

    from hetflow.engine.errors import EnvironmentUnavailable

    folder = os.path.abspath(runs_dir)
    while not os.path.exists(folder) and os.path.dirname(folder) != folder:
        folder = os.path.dirname(folder)
    if not os.access(folder, os.W_OK | os.X_OK):
        what = "is not writable" if folder == os.path.abspath(runs_dir) else f"cannot be made in {folder}"
        raise EnvironmentUnavailable(f"the runs directory {runs_dir} {what}: schedule serve could claim no slot")


#: ``schedule list --count``: the most fire times listed per manifest
MAX_COUNT = 10000

#: what ``status --check`` counts as a failed last slot
FAILED = ("failed", "died", "cancelled")

#: ``status --check --json``'s ``status`` for each exit code
_CHECKED = {EXIT_OK: "ok", EXIT_RUN_FAILED: "failed", EXIT_OVERDUE: "overdue"}


def _checked(rows) -> tuple[int, str | None]:
    """``status --check``'s exit code for ``rows``, and what it is about (None when all is well)."""
    failed = [r for r in rows if (r["status"] or r["state"]) in FAILED]
    if failed:
        return EXIT_RUN_FAILED, "; ".join(f"{r['manifest']}: last slot {r['last_slot']} {r['status'] or r['state']}"
                                          for r in failed)
    overdue = [r for r in rows if r["overdue"]]
    if overdue:
        return EXIT_OVERDUE, "; ".join(f"{r['manifest']}: {r['overdue']} not decided" for r in overdue)
    return EXIT_OK, None


def _check_identities(files) -> None:
    """Two different files that name one manifest are an error before serving (exit 2); bad manifests wait for serve."""
    from hetflow.engine.batch import schedule as schedlib

    entries = []
    for file in files:
        try:
            entry = schedlib.load_entry(file)
        except (ManifestError, UsageError):
            continue
        if entry is not None:
            entries.append(entry)
    schedlib.check_identities(entries)
