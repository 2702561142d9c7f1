"""``hetflow runs`` (list, show, diff, table, gc) and ``hetflow report``: what runs left on disk."""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import datetime

from hetflow.engine.store import runs
from hetflow.engine.cli.common import EXIT_ENVIRONMENT, EXIT_OK, write_output
from hetflow.engine.errors import EnvironmentUnavailable, UsageError, refuse_file_in_the_way
from hetflow.engine.run.events import printable

__all__ = ["cmd_runs", "cmd_report"]


def cmd_runs(args: argparse.Namespace, out, err) -> int:
    # a listing of it would say "no runs", as of an empty one: a --runs-dir that names a file is a slip
    refuse_file_in_the_way(args.runs_dir, "runs_dir")
    if args.runs_command == "diff":
        return _runs_diff(args, out)
    if args.runs_command == "table":
        from hetflow.engine.store.compare import render_table, table

        if args.json and args.format not in (None, "json"):
            # --json promises one JSON value on standard output however the command ends
            raise UsageError(f"--json prints the table as JSON; it takes no --format {args.format}")
        out.write(render_table(table(args.runs_dir, args.refs), args.format or ("json" if args.json else "text")))
        return EXIT_OK
    if args.runs_command == "show":
        args.run_id = runs.resolve_id(args.runs_dir, args.run_id)
        sweep_file = os.path.join(args.runs_dir, args.run_id, "sweep.json")
        if os.path.isfile(sweep_file):
            summary = runs.sweep_view(runs.read_summary(sweep_file), args.runs_dir)
            if args.json:
                print(runs.json_text(summary, indent=2), file=out)
                return EXIT_OK
            sweep_id = summary.get("sweep_id") or args.run_id
            resume = _resume_command(summary.get("manifest"), sweep_id, args.runs_dir)
            print(printable(f"sweep {sweep_id}: {summary.get('status') or '-'}  manifest {summary.get('name') or '-'} "
                            f"({summary.get('manifest') or '-'})  {len(summary['points'])} points over "
                            f"{', '.join(map(str, summary.get('params') or [])) or '-'}"), file=out)
            _newer(summary.get("format"), runs.SWEEP_FORMAT, "summary", out)
            from rich.cells import cell_len  # names as wide as the terminal shows them: 中文 takes four

            width = max((cell_len(printable(str(p.get("name") or "-"))) for p in summary["points"]), default=0)
            # as wide as "succeeded" at least, so the run ids line up sweep after sweep, and wider for "unreadable"
            said = max([9] + [len(str(p.get("status") or "-")) for p in summary["points"]])
            for p in summary["points"]:
                outputs = p.get("outputs") if isinstance(p.get("outputs"), dict) else {}
                digests = " ".join(f"{k}={str(v)[7:19]}" for k, v in outputs.items())
                name = printable(str(p.get("name") or "-"))
                print(f"  {name}{' ' * (width - cell_len(name))}  {str(p.get('status') or '-'):<{said}}  "
                      f"{p.get('run_id') or '-'}  {digests}".rstrip(), file=out)
                if p.get("status") != "succeeded" and p.get("error"):  # why, as the sweep said it when the point ended
                    why = " ".join(str(p["error"]).split())
                    print(printable(f"  {'':<{width}}  {why if len(why) <= 200 else why[:197] + '...'}"), file=out)
            if isinstance(summary.get("error"), dict) and summary["error"].get("message"):
                # what ended the sweep early, where no point's row says it (a caller's on_point that raised)
                print(printable(f"{summary['error']['message']}; {resume} runs the points left"), file=out)
            _died(summary, resume, out)
            return EXIT_OK
        record = runs.read_record(args.runs_dir, args.run_id)
        status = runs.status_of(record)
        if args.json:
            print(runs.json_text({**record, "status": status}, indent=2), file=out)
            return EXIT_OK
        # a record of another hetflow, or one edited by hand, may lack what this one writes: shown as absent
        point = runs.as_object(record.get("matrix_point")).get("name") or "-"
        made = record.get("manifest") if isinstance(record.get("manifest"), dict) else {}
        run_id = record.get("run_id") or args.run_id
        resume = _resume_command(made.get("file"), run_id, args.runs_dir)
        print(printable(f"run {run_id}: {status or '-'}  manifest {made.get('name') or '-'} "
                        f"({made.get('file') or '-'})  point {point}"), file=out)
        print(f"started {record.get('started_at') or '-'}  duration {_duration(record, status)}  "
              f"digest {str(made.get('digest') or '-')[:23]}", file=out)
        from hetflow.engine.store.records import RECORD_FORMAT

        _newer(record.get("format"), RECORD_FORMAT, "record", out)
        _died({**record, "status": status}, resume, out)
        cache = record.get("cache") if isinstance(record.get("cache"), dict) else {}
        partitions = (record.get("plan") or {}).get("partitions") if isinstance(record.get("plan"), dict) else None
        print(f"partitions: {len(partitions) if isinstance(partitions, (list, dict)) else '-'}, from cache: "
              f"{len(cache.get('hits') or [])}", file=out)
        from hetflow.engine.store.compare import output_view

        outputs = record.get("outputs") if isinstance(record.get("outputs"), dict) else {}
        for name, o in outputs.items():
            o = o if isinstance(o, dict) else {}
            print(f"  {name}: {_view_text(output_view(os.path.join(args.runs_dir, args.run_id), name, o))}  "
                  f"{str(o.get('digest') or '-')[:23]}", file=out)
        nodes = record.get("nodes") if isinstance(record.get("nodes"), dict) else {}
        for node, entry in nodes.items():
            if isinstance(entry, dict) and entry.get("numeric"):
                print(f"warning: stage {node!r} met {', '.join(map(str, entry['numeric']))} in its values", file=out)
        if isinstance(record.get("cancelled"), dict):
            c = record["cancelled"]
            print(f"cancelled by {c.get('signal')} at {c.get('at')}: finished {', '.join(c.get('finished') or []) or 'nothing'}; "
                  f"resume with: {resume}", file=out)
        if record.get("verifies"):
            print(f"verification run of {record['verifies']}", file=out)
        if record.get("error"):
            print(printable(f"error: {record['error'].get('message')}"), file=out)
        return EXIT_OK
    if args.runs_command == "gc":
        if args.cache_dir is not None:
            # a cache folder that is a file holds no entries: gc would say it removed none, and run refuses it
            refuse_file_in_the_way(args.cache_dir, "cache_dir")
        result = runs.collect_garbage(args.runs_dir, args.keep, args.cache_dir, dry_run=args.dry_run,
                                      older_than=args.older_than)
        if args.json:
            print(runs.json_text(result), file=out)
        else:
            _gc_text(result, out)
        for left in result["not_removed"]:
            print(f"hetflow: warning: could not remove {left['error']}; {left['path']} is left, and the next gc "
                  "tries again", file=err)
        # the file system kept something gc meant to remove: the environment's, as a full disk is
        return EXIT_ENVIRONMENT if result["not_removed"] else EXIT_OK
    rows = runs.list_runs(args.runs_dir, manifest=args.manifest, status=args.status, since=args.since)
    if args.json:
        print(runs.json_text(rows, indent=2), file=out)
        return EXIT_OK
    if not rows:
        filters = [f"{k} {v}" for k, v in (("manifest", args.manifest), ("status", args.status),
                                            ("since", args.since)) if v is not None]
        print(f"no runs in {args.runs_dir}" + (f" with {', '.join(filters)}" if filters else ""), file=out)
        return EXIT_OK
    head = ["id", "manifest", "point", "status", "started", "duration"]
    body = [[r["id"], r["manifest"] or "-", r["point"] or "-",
             (r["status"] or "-") + (f" (verifies {r['verifies']})" if r.get("verifies") else ""), r["started_at"] or "-",
             "-" if r["duration_s"] is None else f"{r['duration_s']:.2f} s"] for r in rows]
    from rich.cells import cell_len  # columns as wide as the terminal shows them: 中文 takes four, e\u0301 one

    body = [[printable(c) for c in line] for line in body]
    widths = [max(cell_len(x) for x in col) for col in zip(head, *body)]
    for line in [head] + body:
        print("  ".join(c + " " * (w - cell_len(c)) for c, w in zip(line, widths)).rstrip(), file=out)
    return EXIT_OK


def _newer(found: object, known: int, what: str, out) -> None:
    """Say so where a record or summary is of a format newer than this hetflow writes: what it shows may lack
    what that format added."""
    if isinstance(found, int) and not isinstance(found, bool) and found > known:
        print(f"note: this {what} is of format {found}, written by a newer hetflow than this one (which writes "
              f"format {known}): what is shown here may leave out what that format added", file=out)


def _resume_command(manifest: str | None, ident: str, runs_dir: str) -> str:
    """The command that continues run or sweep ``ident`` of ``runs_dir``, as a user types it from here."""
    import shlex

    where = "" if os.path.normpath(runs_dir) == "runs" else f" --runs-dir {shlex.quote(runs_dir)}"
    return f"hetflow run {shlex.quote(manifest or 'MANIFEST')} --resume {ident}{where}"


def _duration(record: dict, status: str | None) -> str:
    """A run's duration as ``runs show`` prints it; for one that has none yet, the time since it started."""
    if isinstance(record.get("duration_s"), (int, float)):
        return f"{record['duration_s']:.3f} s"
    if status == "running" and record.get("started_at"):
        try:
            began = datetime.fromisoformat(record["started_at"].replace("Z", "+00:00")).timestamp()
        except ValueError:
            return "-"
        return f"- (running for {time.time() - began:.1f} s)"
    return "-"


def _died(data: dict, resume: str, out) -> None:
    """For a run or sweep whose process is gone: say so, and how to continue it."""
    if data.get("status") != "died":
        return
    who = runs.owner_of(data) or {}
    print(printable(f"died: its process (pid {who.get('pid')} on {who.get('host')}) ended without writing its final "
                    f"record (killed, out of memory, or the machine stopped); resume with: {resume}"), file=out)


def _gc_text(result: dict, out) -> None:
    """What ``runs gc`` removed (or, with ``--dry-run``, would remove) and why, one line per thing, then the totals."""
    verb = "would remove" if result["dry_run"] else "removed"
    for u in result["removed"]:
        kind = "verification run" if u["kind"] == "verification" else u["kind"]
        print(f"{verb} {kind} {u['id']}  {u['manifest'] or '-'}  {u['status'] or '-'}  started {u['started_at']}: "
              f"{u['why']}", file=out)
        for run_id in u["runs"] if u["kind"] == "sweep" else []:
            print(f"  with its point run {run_id}", file=out)
        for run_id in u.get("damaged", []):
            print(f"  with its point run {run_id}, whose record cannot be read", file=out)
        for run_id in u["verifications"]:
            print(f"  with verification run {run_id}", file=out)
    for u in result["spared"]:
        print(f"kept {u['kind']} {u['id']}  {u['manifest'] or '-'}  started {u['started_at']}: {u['why']}, but "
              f"{u['kept_because']}", file=out)
    for u in result.get("left_damaged", []):
        print(f"kept {u['kind']} folder {u['id']}  started {u['started_at']}: {u['why']}", file=out)
    for lock in result["removed_locks"]:
        print(f"{verb} stale lock {lock}: no process holds it", file=out)
    for claim in result["removed_claims"]:
        print(f"{verb} schedule claim {claim}: its run is removed, or it is an old skipped slot", file=out)
    if result["removed_cache_entries"]:
        print(f"{verb} {result['removed_cache_entries']} cache entries: no kept run uses them", file=out)
    checks = len(result["removed_verifications"])
    print(f"kept {len(result['kept_runs'])} runs; {verb} {len(result['removed_runs'])} runs, "
          f"{len(result['removed_sweeps'])} sweeps, {result['removed_cache_entries']} cache entries, "
          f"{len(result['removed_claims'])} schedule claims, {len(result['removed_locks'])} stale locks"
          + (f" ({checks} of the runs verification runs)" if checks else ""), file=out)


def _view_text(view: dict) -> str:
    """An output as ``runs show`` and ``runs diff`` print it: its value, or its shape and statistics."""
    if "value" in view:
        text = json.dumps(view["value"])
        return text if len(text) <= 80 else text[:77] + "..."
    shape = "x".join(str(d) for d in view.get("shape") or []) or "-"
    if "missing" in view:
        return f"{shape} {view.get('dtype')} ({view['missing']})"
    if "min" not in view:
        return f"{shape} {view.get('dtype')}"
    return f"{shape} {view.get('dtype')} min {view['min']:.6g} max {view['max']:.6g} mean {view['mean']:.6g}"


def _runs_diff(args: argparse.Namespace, out) -> int:
    from hetflow.engine.store.compare import diff_runs

    d = diff_runs(args.runs_dir, args.a, args.b)
    if args.json:
        print(runs.json_text(d, indent=2), file=out)
        return EXIT_OK
    a, b = d["a"]["run_id"], d["b"]["run_id"]
    print(f"a: {a} ({d['a']['status']}, {d['a']['started_at']})", file=out)
    print(f"b: {b} ({d['b']['status']}, {d['b']['started_at']})", file=out)
    for section in ("manifest", "params", "matrix_point", "plugins", "data", "programs", "inputs", "versions", "threads"):
        rows = d[section]
        if not rows:
            continue
        print(f"{section.replace('_', ' ')}:", file=out)
        for key, va, vb in rows:
            print(f"  {key}: {json.dumps(va)} -> {json.dumps(vb)}", file=out)
    print("outputs:", file=out)
    for r in d["outputs"]:
        if r["a"] is None or r["b"] is None:
            print(f"  {r['output']}: only in {'b' if r['a'] is None else 'a'}", file=out)
            continue
        if r.get("damaged"):
            print(f"  {r['output']}: not compared: a file of it is damaged or gone", file=out)
            print(f"    a: {_view_text(r['a'])}  {str(r['a']['digest'])[:23]}", file=out)
            print(f"    b: {_view_text(r['b'])}  {str(r['b']['digest'])[:23]}", file=out)
            continue
        if r["same"]:
            print(f"  {r['output']}: same  {_view_text(r['a'])}  {str(r['a']['digest'])[:23]}", file=out)
            continue
        extra = f"  max abs difference {r['max_abs_diff']:.6g}" if "max_abs_diff" in r else ""
        print(f"  {r['output']}: differs{extra}", file=out)
        print(f"    a: {_view_text(r['a'])}  {str(r['a']['digest'])[:23]}", file=out)
        print(f"    b: {_view_text(r['b'])}  {str(r['b']['digest'])[:23]}", file=out)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import report  # numpy and networkx load only for commands that need them

    refuse_file_in_the_way(args.runs_dir, "runs_dir")
    if args.output == "":
        # -o "$PAGE" with PAGE unset: the page would go into the run's folder, where the command did not say
        raise UsageError("-o: an empty path names no file; give the page's file, or - for standard output")
    located = report.locate(args.run_id, args.runs_dir)
    if args.output and args.output != "-":
        kept = _kept_by(located, args.output)
        if kept:
            raise UsageError(f"-o {args.output} {kept}; write the page to another file (-o {located.kind}-report.html)")
    try:
        page = report.render(located, runs_dir=args.runs_dir, graph=args.graph)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError) as e:
        # the checks of a record's shape name the fields the commands read; a record edited deeper than they look
        # is still bad input, said with the crash log a bug report needs should hetflow have written it so
        import traceback

        from hetflow.engine.cli.outcomes import _write_crash_log

        try:
            where = f"traceback in {_write_crash_log(''.join(traceback.format_exception(e)))}"
        except OSError as unwritable:
            where = f"no crash log: {unwritable}"
        file = os.path.join(located.folder, "record.json" if located.kind == "run" else "sweep.json")
        raise UsageError(f"{file}: error: it could not be drawn ({type(e).__name__}: {e}): it holds what no "
                         f"{located.kind} hetflow wrote does, or hetflow has a bug ({where})") from None
    path = args.output or os.path.join(located.folder, "report.html")
    if path == "-":
        write_output(path, page.encode(), out)
        return EXIT_OK
    try:
        write_output(path, page.encode(), out, flag="-o " if args.output else "")
    except UsageError:
        if args.output or os.access(located.folder, os.W_OK):
            raise
        # a path the user named and may not write is a slip; the run's own folder, which nobody named, is the runs
        # directory that cannot be written here, as for every command
        raise EnvironmentUnavailable(f"{path}: cannot write: the {located.kind}'s folder may not be written here "
                                     f"(Permission denied); -o FILE writes the page elsewhere") from None
    print(f"report: {path}", file=out)
    return EXIT_OK


def _kept_by(located, path: str) -> str | None:
    """Why ``path`` may not take the page, said after ``-o PATH``: it is one of the files a run or sweep keeps (its
    record or summary, an output) or the one being reported read (the manifest, a plugin, a data or input file,
    a guest program), or it would be a record or summary in a folder of the other kind; else None. The page that
    ``report`` wrote there before is none of them, and is replaced as any other file."""
    def same(other) -> bool:
        try:
            return isinstance(other, str) and os.path.samefile(path, other)
        except (OSError, ValueError):
            return False

    data = located.data if isinstance(located.data, dict) else {}
    # any run's or sweep's folder, this one's or another's in the runs directory: its files are its account
    folder, name = os.path.split(os.path.realpath(path))
    # a page named record.json beside a sweep's summary (or sweep.json beside a record) would make its folder read
    # as the other kind, and unreadable
    taken = os.path.isfile(path) or name in ("record.json", "sweep.json")
    for kind, summary in (("run", "record.json"), ("sweep", "sweep.json")):
        if name != "report.html" and taken and os.path.isfile(os.path.join(folder, summary)):
            if not os.path.isfile(path):
                return (f"would put a {name} in the folder of the {kind} {os.path.basename(folder)}, which would then "
                        "read as another kind of folder, and unreadable")
            return f"is a file of the {kind} {os.path.basename(folder)} ({name}), which the report would replace"
    manifest = data.get("manifest")
    read = [("the manifest it ran", manifest.get("file") if isinstance(manifest, dict) else manifest)]
    for key, what in (("data", "a file it loaded"), ("inputs", "an input file it read"),
                      ("programs", "a guest program it ran")):
        entries = data.get(key)
        read += [(what, e.get("path")) for e in (entries.values() if isinstance(entries, dict) else ())
                 if isinstance(e, dict)]
    plugins = data.get("plugins")
    read += [("a plugin it imported", p.get("file")) for p in (plugins if isinstance(plugins, list) else ())
             if isinstance(p, dict)]
    for what, file in read:
        if same(file):
            return f"is {what} ({file}), which the report would replace"
    return None
