"""``hetflow runs`` (list, show, diff, table, gc) and ``hetflow report``: what runs left on disk."""

from __future__ import annotations

import argparse
import json
import os

from hetflow.engine.cli.common import EXIT_OK
from hetflow.engine.errors import UsageError

__all__ = ["cmd_runs", "cmd_report"]


def cmd_runs(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import runs

    if args.runs_command == "diff":
        return _runs_diff(args, out)
    if args.runs_command == "table":
        from hetflow.engine.compare import render_table, table

        out.write(render_table(table(args.runs_dir, args.refs), args.format))
        return EXIT_OK
    if args.runs_command == "show":
        args.run_id = runs.resolve_id(args.runs_dir, args.run_id)
        sweep_file = os.path.join(args.runs_dir, args.run_id, "sweep.json")
        if os.path.isfile(sweep_file):
            with open(sweep_file, encoding="utf-8") as f:
                summary = json.load(f)
            if args.json:
                print(json.dumps(summary, indent=2), file=out)
                return EXIT_OK
            print(f"sweep {summary['sweep_id']}: {summary['status']}  manifest {summary['name']} ({summary['manifest']})  "
                  f"{len(summary['points'])} points over {', '.join(summary['params'])}", file=out)
            width = max(len(p["name"]) for p in summary["points"])
            for p in summary["points"]:
                digests = " ".join(f"{k}={v[7:19]}" for k, v in p["outputs"].items())
                print(f"  {p['name']:<{width}}  {p['status']:<9}  {p['run_id'] or '-'}  {digests}", file=out)
            return EXIT_OK
        record = runs.read_record(args.runs_dir, args.run_id)
        if args.json:
            print(json.dumps(record, indent=2), file=out)
            return EXIT_OK
        point = (record.get("matrix_point") or {}).get("name") or "-"
        print(f"run {record['run_id']}: {record['status']}  manifest {record['manifest']['name']} "
              f"({record['manifest']['file']})  point {point}", file=out)
        print(f"started {record['started_at']}  duration {record.get('duration_s')} s  digest {record['manifest']['digest'][:23]}", file=out)
        cache = record.get("cache") or {}
        print(f"partitions: {len(record['plan']['partitions'])}, from cache: {len(cache.get('hits', []))}", file=out)
        from hetflow.engine.compare import output_view

        for name, o in record.get("outputs", {}).items():
            print(f"  {name}: {_view_text(output_view(os.path.join(args.runs_dir, args.run_id), name, o))}  "
                  f"{o['digest'][:23]}", file=out)
        if record.get("cancelled"):
            c = record["cancelled"]
            print(f"cancelled by {c['signal']} at {c['at']}: finished {', '.join(c['finished']) or 'nothing'}; "
                  f"resume with: hetflow run {record['manifest']['file']} --resume {record['run_id']}", file=out)
        if record.get("verifies"):
            print(f"verification run of {record['verifies']}", file=out)
        if record.get("error"):
            print(f"error: {record['error'].get('message')}", file=out)
        return EXIT_OK
    if args.runs_command == "gc":
        result = runs.collect_garbage(args.runs_dir, args.keep, args.cache_dir, dry_run=args.dry_run,
                                      older_than=args.older_than)
        if args.json:
            print(json.dumps(result), file=out)
        else:
            verb = "would remove" if args.dry_run else "removed"
            if args.dry_run:
                for r in result["removed"]:
                    print(f"would remove run {r['id']}  {r['manifest']}  {r['status']}  started {r['started_at']}: "
                          f"{r['why']}", file=out)
                for name in result["removed_sweeps"]:
                    print(f"would remove sweep {name}: none of its points' runs is kept", file=out)
                for claim in result["removed_claims"]:
                    print(f"would remove schedule claim {claim}", file=out)
            print(f"kept {len(result['kept_runs'])} runs; {verb} {len(result['removed_runs'])} runs, "
                  f"{len(result['removed_sweeps'])} sweeps, {result['removed_cache_entries']} cache entries, "
                  f"{len(result['removed_claims'])} schedule claims", file=out)
        return EXIT_OK
    rows = runs.list_runs(args.runs_dir, manifest=args.manifest, status=args.status, since=args.since)
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
        return EXIT_OK
    if not rows:
        print(f"no runs in {args.runs_dir}", file=out)
        return EXIT_OK
    head = ["id", "manifest", "point", "status", "started", "duration"]
    body = [[r["id"], r["manifest"] or "-", r["point"] or "-",
             (r["status"] or "-") + (f" (verifies {r['verifies']})" if r.get("verifies") else ""), r["started_at"] or "-",
             "-" if r["duration_s"] is None else f"{r['duration_s']:.2f} s"] for r in rows]
    widths = [max(len(x) for x in col) for col in zip(head, *body)]
    for line in [head] + body:
        print("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip(), file=out)
    return EXIT_OK


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
    from hetflow.engine.compare import diff_runs

    d = diff_runs(args.runs_dir, args.a, args.b)
    if args.json:
        print(json.dumps(d, indent=2), file=out)
        return EXIT_OK
    a, b = d["a"]["run_id"], d["b"]["run_id"]
    print(f"a: {a} ({d['a']['status']}, {d['a']['started_at']})", file=out)
    print(f"b: {b} ({d['b']['status']}, {d['b']['started_at']})", file=out)
    for section in ("manifest", "params", "matrix_point", "plugins", "data", "inputs", "versions"):
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
        if r["same"]:
            print(f"  {r['output']}: same  {_view_text(r['a'])}  {r['a']['digest'][:23]}", file=out)
            continue
        extra = f"  max abs difference {r['max_abs_diff']:.6g}" if "max_abs_diff" in r else ""
        print(f"  {r['output']}: differs{extra}", file=out)
        print(f"    a: {_view_text(r['a'])}  {r['a']['digest'][:23]}", file=out)
        print(f"    b: {_view_text(r['b'])}  {r['b']['digest'][:23]}", file=out)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import report  # numpy and networkx load only for commands that need them

    located = report.locate(args.run_id, args.runs_dir)
    page = report.render(located, runs_dir=args.runs_dir, graph=args.graph)
    path = args.output or os.path.join(located.folder, "report.html")
    try:
        report.write_report(page, path)
    except OSError as e:
        raise UsageError(f"-o {path}: cannot write: {e.strerror or e}") from None
    print(f"report: {path}", file=out)
    return EXIT_OK
