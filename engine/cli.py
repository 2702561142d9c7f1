"""The ``hetflow`` command line.

``main(argv) -> int`` parses, dispatches and maps every failure to an
exit code: 0 success, 1 the run failed, 2 bad input (manifest, arguments),
3 internal error (one line on screen, the traceback in a log file, shown
in full with ``--debug``). It is the only place that prints.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Sequence

from hetflow.engine.errors import HetflowError, ManifestError, RunCancelled, RunFailed, UsageError
from hetflow.engine.locks import LockHeld

# Each command imports the passes it uses when it runs: `hetflow emulate`
# and `--help` start without numpy, networkx, jsonschema or dask.

__all__ = ["main", "entry"]

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_LOCKED = 0, 1, 2, 3, 4


class _ShowVersion(Exception):
    """``--version`` was given: main prints the version to its output stream."""


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print hetflow's version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise _ShowVersion()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is already 2
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hetflow", description="Run declarative pipelines across heterogeneous compute.")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an internal error")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    v = sub.add_parser("validate", help="load and validate manifests; FILE:LINE:COL per problem")
    v.add_argument("files", nargs="+", metavar="FILE")

    pl = sub.add_parser("plan", help="placement, partitions, bridges, and why")
    pl.add_argument("file", metavar="FILE")
    pl.add_argument("--format", choices=["text", "json", "dot", "svg", "png"], default="text",
                    help="text for people, json as data, dot for Graphviz; svg and png render through Graphviz's dot")
    pl.add_argument("-o", "--output", metavar="FILE", help="write the plan to FILE instead of standard output")
    pl.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    pl.add_argument("--point", metavar="NAME", help="plan this point of the matrix (default: the first)")
    pl.add_argument("--runs-dir", default="runs", help="where earlier runs are, to say what is cached and why (default: ./runs)")
    pl.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    _cluster_args(pl)

    r = sub.add_parser("run", help="run a pipeline and write its run record")
    r.add_argument("file", metavar="FILE")
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    r.add_argument("--runs-dir", default="runs", help="where run folders go (default: ./runs)")
    r.add_argument("--threads", type=int, default=None, help="threads of the in-process scheduler (default: CPU count)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.add_argument("--point", metavar="NAME", help="run one point of the matrix: its full name or the part in brackets")
    r.add_argument("--max-points", type=int, default=256, metavar="N", help="the most points a matrix may expand to (default: 256)")
    r.add_argument("--no-cache", action="store_true", help="neither take partitions from the cache nor store them")
    r.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    r.add_argument("--resume", metavar="RUN_ID",
                   help="continue a run (or a sweep, by its SWEEP_ID) that was cancelled, crashed or was killed, in its "
                        "own folder: what finished is reused, the rest runs")
    r.add_argument("--parallel", type=int, default=1, metavar="K",
                   help="run up to K points of a matrix sweep at once (default: 1)")
    r.add_argument("--schedule-slot", metavar="SLOT",
                   help="run as the schedule slot SLOT (a UTC instant) of the manifest's schedule: block; "
                        "hetflow schedule passes it")
    _cluster_args(r)
    r.add_argument("--quiet", action="store_true", help="no progress display and no event log")
    r.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="the run's events on stderr: text is a progress bar on a terminal and one line per event "
                        "otherwise; json is one JSON object per event per line")

    vf = sub.add_parser("verify", help="rerun a run's resolved manifest without the cache and compare output digests")
    vf.add_argument("run_id", metavar="RUN_ID")
    vf.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    vf.add_argument("--json", action="store_true")

    rs = sub.add_parser("runs", help="list runs and sweeps; show, compare and tabulate them; remove old ones")
    rs.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    rs.add_argument("--json", action="store_true")
    rs.add_argument("--manifest", metavar="NAME", help="only runs of this manifest (its name or file)")
    rs.add_argument("--status", choices=["running", "succeeded", "failed", "cancelled"], help="only runs with this status")
    rs.add_argument("--since", metavar="WHEN", help="only runs started since: an age (30d, 12h, 45m, 2w) or a date (2026-03-01)")
    rsub = rs.add_subparsers(dest="runs_command", parser_class=_Parser)
    show = rsub.add_parser("show", help="one run's record, summarized, with the values of scalar outputs")
    show.add_argument("run_id", metavar="RUN_ID", help="a run or sweep id, a unique prefix of one, or latest")
    show.add_argument("--json", action="store_true", help="the whole record")
    show.add_argument("--runs-dir", default=argparse.SUPPRESS)
    df = rsub.add_parser("diff", help="two runs side by side: params, point, manifest, plugins, data files, versions, outputs")
    df.add_argument("a", metavar="A", help="a run id, a unique prefix of one, or latest")
    df.add_argument("b", metavar="B", help="a run id, a unique prefix of one, or latest")
    df.add_argument("--json", action="store_true")
    df.add_argument("--runs-dir", default=argparse.SUPPRESS)
    tb = rsub.add_parser("table", help="one row per run with its params and scalar outputs: a sweep's points or the runs named")
    tb.add_argument("refs", nargs="+", metavar="SWEEP_ID|RUN_ID", help="one sweep, or runs (ids, unique prefixes, latest)")
    tb.add_argument("--format", choices=["text", "csv", "json", "markdown"], default="text")
    tb.add_argument("--runs-dir", default=argparse.SUPPRESS)
    gc = rsub.add_parser("gc", help="remove old runs (per manifest, or by age), the sweeps and schedule claims left "
                                    "without runs, and cache entries no kept run needs")
    gc.add_argument("--keep", type=int, metavar="N", help="keep the newest N runs of each manifest")
    gc.add_argument("--older-than", metavar="AGE", help="remove runs started more than AGE ago (30d, 12h, 2w) or before a date")
    gc.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    gc.add_argument("--dry-run", action="store_true", help="say what would go, remove nothing")
    gc.add_argument("--json", action="store_true")
    gc.add_argument("--runs-dir", default=argparse.SUPPRESS)

    e = sub.add_parser("executors", help="what this machine offers: vendors, devices, dtypes")
    e.add_argument("--json", action="store_true")
    e.add_argument("--ops", action="store_true", help="list the op registry: arity, arguments, dtypes")

    ex = sub.add_parser("examples", help="the example manifests and guest programs shipped with hetflow")
    exsub = ex.add_subparsers(dest="examples_command", required=True, parser_class=_Parser)
    exsub.add_parser("list", help="every shipped file")
    exc = exsub.add_parser("copy", help="write examples/ and pipelines/ into DIR, ready to run")
    exc.add_argument("dir", metavar="DIR")
    exc.add_argument("--force", action="store_true", help="overwrite files that already exist there")

    em = sub.add_parser("emulate", help="run one RISC-V guest program directly")
    em.add_argument("elf", metavar="ELF")
    em.add_argument("--backend", choices=["fast", "reference", "native"], default="fast",
                    help="fast (the numba interpreter), native (the guest's code translated to host code with LLVM, "
                         "cached on disk per program) or reference (plain Python); identical results")
    em.add_argument("--no-interpreter-start", dest="interpreter_start", action="store_false",
                    help=f"run on the fast or native backend from the first step (by default a guest first gets "
                         f"{INTERPRETER_START_STEPS:,} steps in the reference interpreter, which spares a short guest "
                         "the fast backend's start-up)")
    em.add_argument("--input", metavar="FILE", help="bytes mapped at the guest's input address ('-' reads stdin)")
    em.add_argument("--max-steps", type=int, default=EMULATE_MAX_STEPS,
                    help=f"fail after this many steps without an exit (default: {EMULATE_MAX_STEPS})")
    em.add_argument("--chunk-steps", type=int, default=1 << 18, help="steps per min-trace chunk (default: 262144)")
    em.add_argument("--json", action="store_true", help="print the result as JSON")
    em.add_argument("--fetch", choices=["executable", "any"], default="executable",
                    help="where instructions may be fetched from: executable ELF segments only (default; a jump "
                         "into data faults) or any mapped memory, as the ISA lets M-mode without PMP")

    sc = sub.add_parser("schedule", help="keep the schedule: of manifests: list, run what is due, serve")
    scsub = sc.add_subparsers(dest="schedule_command", required=True, parser_class=_Parser)
    sl = scsub.add_parser("list", help="each scheduled manifest with its next fire times")
    sl.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    sl.add_argument("--now", metavar="ISO", help="list fire times after this instant (default: now)")
    sl.add_argument("--count", type=int, default=3, metavar="N", help="fire times per manifest (default: 3)")
    sl.add_argument("--json", action="store_true")
    sd = scsub.add_parser("run-due", help="run every slot due now, once, and exit (for cron)")
    sd.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    sd.add_argument("--now", metavar="ISO", help="decide as if it were this instant (default: now)")
    sd.add_argument("--runs-dir", default="runs", help="where run folders and slot claims go (default: ./runs)")
    sd.add_argument("--log-format", choices=["text", "json"], default="text", help="one line per event, as text or JSON")
    sd.add_argument("--dry-run", action="store_true",
                    help="say which slots would run, be skipped or be queued; claim, start and write nothing")
    st = scsub.add_parser("status", help="each scheduled manifest's last slot, its run and result, and its next slot")
    st.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    st.add_argument("--runs-dir", default="runs", help="where run folders and slot claims are (default: ./runs)")
    st.add_argument("--now", metavar="ISO", help="the instant to compute the next slot from (default: now)")
    st.add_argument("--json", action="store_true")
    ss = scsub.add_parser("serve", help="keep the schedules: start due runs as processes until SIGTERM")
    ss.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    ss.add_argument("--runs-dir", default="runs", help="where run folders and slot claims go (default: ./runs)")
    ss.add_argument("--log-format", choices=["text", "json"], default="text", help="one line per event, as text or JSON")
    ss.add_argument("--poll", type=float, default=5.0, metavar="SECONDS",
                    help="how often to look for changed manifests (default: 5)")

    rp = sub.add_parser("report", help="a self-contained HTML page of a run or sweep: plan graph, timeline, outputs")
    rp.add_argument("run_id", metavar="RUN_ID", help="a run id or sweep id under --runs-dir, or a run folder")
    rp.add_argument("-o", "--output", metavar="FILE", help="where to write the page (default: RUN_DIR/report.html)")
    rp.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    rp.add_argument("--graph", choices=["auto", "graphviz", "builtin"], default="auto",
                    help="plan graph layout: Graphviz's dot when installed (auto), or hetflow's own (builtin)")

    sch = sub.add_parser("schema", help="the manifest JSON Schema for editors, with the op registry folded in")
    sch.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of stdout")
    sch.add_argument("--plugins", nargs="+", metavar="SPEC",
                     help="also fold in the ops of these plugins (.py paths or module names), as a manifest's plugins: loads them")
    return p


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, metavar="N", help="run on a new local Dask cluster of N worker processes")
    p.add_argument("--threads-per-worker", type=int, metavar="T",
                   help="threads of each --workers process (default: CPU count / N)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on an existing Dask cluster: tcp://HOST:PORT or the path of a scheduler file")
    p.add_argument("--place", action="append", default=[], metavar="EXECUTOR=WORKER",
                   help="host EXECUTOR on the worker of that name or address (with --workers or --scheduler)")


def _cluster_kwargs(args: argparse.Namespace) -> dict:
    """The cluster flags as the API's keywords; their combinations are checked here, in the flags' own words."""
    if args.workers is not None and args.scheduler is not None:
        raise UsageError("--workers starts a new cluster and --scheduler joins one; give one of them")
    if args.threads_per_worker is not None and args.workers is None:
        raise UsageError("--threads-per-worker goes with --workers")
    if args.workers is None and args.scheduler is None:
        if args.place:
            raise UsageError("--place needs a cluster: add --workers N or --scheduler ADDRESS")
    elif getattr(args, "threads", None) is not None:
        raise UsageError("--threads sets the in-process scheduler; with a cluster use --threads-per-worker")
    place = {}
    for pair in args.place:
        name, sep, worker = pair.partition("=")
        if not sep or not name.strip() or not worker.strip():
            raise UsageError(f"--place expects EXECUTOR=WORKER, got {pair!r}")
        place[name.strip()] = worker.strip()
    return {"workers": args.workers, "threads_per_worker": args.threads_per_worker, "scheduler": args.scheduler,
            "place": place or None}


def _event_sink(args: argparse.Namespace, err):
    if args.quiet:
        return None
    from hetflow.engine import events

    if args.log_format == "json":
        return events.JsonLog(err)
    if hasattr(err, "isatty") and err.isatty():
        return events.ProgressDisplay(err)
    return events.LineLog(err)


def _cmd_validate(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api

    problems = 0
    for file in args.files:
        try:
            api.validate(file)
        except ManifestError as e:
            problems += len(e.diagnostics)
            for d in e.diagnostics:
                print(d, file=err)
        else:
            print(f"{file}: ok", file=out)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def _cmd_plan(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api
    from hetflow.engine.manifest import parse_overrides

    plan = api.plan(args.file, parse_overrides(args.param), point=args.point, runs_dir=args.runs_dir,
                    cache_dir=args.cache_dir, **_cluster_kwargs(args))
    if args.format in ("svg", "png"):
        data = _graphviz(plan.to_dot(), args.format)
    elif args.format == "json":
        data = json.dumps(plan.to_json(), indent=2) + "\n"
    elif args.format == "dot":
        data = plan.to_dot()
    else:
        data = plan.to_text()
    if args.output:
        tmp = f"{args.output}.tmp-{os.getpid()}"
        with open(tmp, "wb") as f:
            f.write(data if isinstance(data, bytes) else data.encode())
        os.replace(tmp, args.output)
        print(f"{args.output}: plan written ({args.format})", file=err)
    elif isinstance(data, bytes):
        if args.format == "png" and getattr(out, "isatty", lambda: False)():
            raise UsageError("--format png writes binary data; give -o FILE or redirect standard output")
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            raise UsageError(f"--format {args.format} needs -o FILE here (the output stream takes no bytes)")
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data)
    return EXIT_OK


def _graphviz(dot_text: str, fmt: str) -> bytes:
    """Render DOT through Graphviz's ``dot``; a missing or failing ``dot`` is bad input (exit 2)."""
    import shutil
    import subprocess

    exe = shutil.which("dot")
    if exe is None:
        raise UsageError(f"--format {fmt} renders through Graphviz's `dot`, which is not installed (not on PATH); "
                         "install Graphviz (apt-get install graphviz, brew install graphviz) or use --format dot")
    done = subprocess.run([exe, f"-T{fmt}"], input=dot_text.encode(), capture_output=True, timeout=120)
    if done.returncode != 0:
        raise UsageError(f"Graphviz's dot failed to render {fmt}: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout


def _cmd_run(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api, matrix
    from hetflow.engine.manifest import load, parse_overrides

    params = parse_overrides(args.param)
    common = dict(runs_dir=args.runs_dir, cache=not args.no_cache, cache_dir=args.cache_dir, threads=args.threads,
                  schedule_slot=args.schedule_slot, max_points=args.max_points, **_cluster_kwargs(args))
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    source = args.file
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if args.resume:
        from hetflow.engine.runs import resolve_id

        args.resume = resolve_id(args.runs_dir, args.resume)
    if not args.resume:
        source = load(args.file)
        if matrix.has_matrix(source) and not args.point:
            return _sweep(args, source, params, common, out, err)
    elif os.path.isfile(os.path.join(args.runs_dir, args.resume, "sweep.json")):
        if args.point:
            raise UsageError("--resume continues a sweep's unfinished points; it takes no --point")
        return _sweep(args, source, params, common, out, err)
    sink = _event_sink(args, err)
    try:
        run = api.run(source, params, point=args.point, resume=args.resume, on_event=sink, **common)
    finally:
        if hasattr(sink, "close"):
            sink.close()
    rec = run.record
    if not run.ok:
        if args.json:
            print(json.dumps({"status": "failed", "run_id": run.run_id, "record": run.record_path, "error": run.error}),
                  file=out)
        print(f"hetflow: run failed: {run.error}", file=err)
        trace = (rec.get("error") or {}).get("traceback_file")
        if trace and (rec.get("error") or {}).get("op"):
            print(f"traceback: {os.path.join(os.path.dirname(run.record_path), trace)}", file=err)
        print(f"record: {run.record_path}", file=err)
        if not args.json:
            print(run.run_id, file=out)
        return EXIT_RUN_FAILED
    if args.json:
        print(json.dumps({"status": run.status, "run_id": run.run_id, "record": run.record_path,
                          "outputs": {k: v["digest"] for k, v in rec["outputs"].items()},
                          "cache_hits": rec["cache"]["hits"]}), file=out)
        return EXIT_OK
    t = rec["plan"]["totals"]
    hits = len(rec["cache"]["hits"])
    cached = f", {hits} from cache" if hits else ""
    print(f"run {run.run_id}: {run.status} in {rec['duration_s']:.3f} s "
          f"({t['partitions']} partitions{cached}, {t['bridges']} bridges)", file=out)
    for name, o in rec["outputs"].items():
        if "file" not in o:
            print(f"  {name}: {json.dumps(o['value'])[:60]}  {o['digest'][:23]}  (in record.json)", file=out)
            continue
        print(f"  {name}: {o['shape']} {o['dtype']}  {o['digest'][:23]}  {os.path.join(run.path, o['file'])}", file=out)
    print(f"record: {run.record_path}", file=out)
    print(run.run_id, file=out)
    return EXIT_OK


def _sweep(args: argparse.Namespace, doc, params: dict, common: dict, out, err) -> int:
    from hetflow.engine import api

    def row(point: dict) -> None:
        if not args.json:
            print(f"{point['status']:<9} {point['name']}  {point['run_id']}", file=out)

    sink = _event_sink(args, err)
    try:
        sweep = api.sweep(doc, params, on_event=sink, on_point=row, parallel=args.parallel, resume=args.resume,
                          **common)
    finally:
        if hasattr(sink, "close"):
            sink.close()
    summary, file = sweep.summary, os.path.join(sweep.path, "sweep.json")
    failed = sum(p["status"] != "succeeded" for p in summary["points"])
    if args.json:
        print(json.dumps({"status": summary["status"], "sweep_id": sweep.sweep_id, "summary": file,
                          "points": [{k: r[k] for k in ("name", "status", "run_id", "outputs")} for r in summary["points"]]}), file=out)
    else:
        print(f"sweep {sweep.sweep_id}: {len(summary['points']) - failed} of {len(summary['points'])} points succeeded", file=out)
        print(f"summary: {file}", file=out)
        print(sweep.sweep_id, file=out)
    return EXIT_RUN_FAILED if failed else EXIT_OK


def _cmd_verify(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine.planner import plan as make_plan
    from hetflow.executors import probe
    from hetflow.engine.run import execute
    from hetflow.engine.runs import manifest_from_record, read_record

    record = read_record(args.runs_dir, args.run_id)
    if record.get("status") != "succeeded":
        raise UsageError(f"run {args.run_id} did not succeed (status {record.get('status')}); there is nothing to verify")
    manifest = manifest_from_record(record)
    plan = make_plan(manifest, probe)
    from hetflow.engine.compare import mismatch_causes

    try:
        result = execute(manifest, plan, runs_dir=args.runs_dir, overrides=record.get("overrides") or {},
                         use_cache=False, matrix_point=record.get("matrix_point"), verifies=record["run_id"])
        fresh = {k: v["digest"] for k, v in result.record["outputs"].items()}
        rerun, rerun_ok, rerun_record = result.run_id, True, result.record
    except RunFailed as e:
        fresh, rerun, rerun_ok = {}, os.path.basename(os.path.dirname(e.record_path or "")), False
        rerun_record = read_record(args.runs_dir, rerun) if rerun else None
        print(f"hetflow: the rerun failed: {e}", file=err)
    rows = []
    for name, entry in record.get("outputs", {}).items():
        got = fresh.get(name)
        row = {"output": name, "recorded": entry["digest"], "rerun": got, "match": got == entry["digest"]}
        if not row["match"] and rerun_ok:
            row["causes"] = mismatch_causes(record, rerun_record, name)
        rows.append(row)
    ok = rerun_ok and all(r["match"] for r in rows)
    changed = _changed_sources(record, manifest)
    for line in changed:
        print(f"hetflow: {line}", file=err)
    if args.json:
        print(json.dumps({"run_id": args.run_id, "rerun_id": rerun, "match": ok, "outputs": rows, "changed": changed}),
              file=out)
    else:
        width = max([len(r["output"]) for r in rows] + [6])
        print(f"{'output':<{width}}  {'recorded':<23}  {'rerun':<23}  match", file=out)
        for r in rows:
            print(f"{r['output']:<{width}}  {r['recorded'][:23]:<23}  {(r['rerun'] or 'missing')[:23]:<23}  "
                  f"{'yes' if r['match'] else 'NO'}", file=out)
        for r in rows:
            for cause in r.get("causes", ()):
                print(f"  {r['output']}: likely cause: {cause}", file=out)
        bad = [r["output"] for r in rows if not r["match"]]
        verdict = "all outputs match" if ok else f"MISMATCH in {', '.join(bad)}" if bad and rerun_ok else "MISMATCH"
        print(f"verify {record['run_id']}: {verdict} (rerun {rerun}, a verification run)", file=out)
    return EXIT_OK if ok else EXIT_RUN_FAILED


def _changed_sources(record: dict, manifest: Any) -> list[str]:
    """The plugins and data files whose bytes differ from those the recorded run used."""
    from hetflow.engine.cache import file_digest

    now = {p.spec: p for p in getattr(manifest, "plugins", ())}
    changed = []
    for p in record.get("plugins") or []:
        current = now.get(p["spec"])
        if current is None or current.digest != p["digest"]:
            where = p.get("file") or p.get("distribution") or p["module"]
            changed.append(f"plugin {p['spec']!r} ({where}) is not the code the run used "
                           f"({p['digest'][:19]} then, {current.digest[:19] if current else 'absent'} now)")
    for stage, d in (record.get("data") or {}).items():
        digest = file_digest(d["path"])
        if digest != d["digest"]:
            changed.append(f"stage {stage!r} reads {d['path']}, whose bytes changed since the run "
                           f"({(d['digest'] or 'unreadable')[:19]} then, {(digest or 'unreadable')[:19]} now)")
    return changed


def _cmd_runs(args: argparse.Namespace, out, err) -> int:
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


def _cmd_executors(args: argparse.Namespace, out, err) -> int:
    from hetflow.executors import inventory
    from hetflow.executors import ops as oplib
    from hetflow.executors.base import Dtype, Vendor

    if args.ops:
        from hetflow.executors import plugins

        # Listing every op is the one place that imports every installed plugin.
        loaded, failed = plugins.all_plugins()
        for spec, problem in failed:
            print(f"hetflow: entry point {spec}: {problem}", file=err)
        where = {name: p.label + (f" ({p.spec})" if p.kind == "entry point" else "") for p in loaded for name in p.ops}
        rows = [{"op": op.name, "inputs": list(op.arity), "args": {k: {"kind": a.kind, "required": a.required, "default": a.default} for k, a in op.args.items()},
                 "dtypes": [d.value for d in Dtype if d in op.dtypes], "doc": op.doc,
                 "source": "built-in" if op.name in oplib.BUILTIN else where.get(op.name, op.defined_at or op.source),
                 "vendors": [v.value for v in Vendor if op.runs_on(v.value)],
                 "kernels": sorted({*op.kernels, *(["vulkan"] if op.invoke is not None and op.wgsl else [])})}
                for op in oplib.REGISTRY.values() if op.name in oplib.BUILTIN or op.name in where]
        if args.json:
            print(json.dumps(rows, indent=2), file=out)
        else:
            for r in rows:
                arity = str(r["inputs"][0]) if r["inputs"][0] == r["inputs"][1] else f"{r['inputs'][0]}-{r['inputs'][1]}"
                argtext = ", ".join(k + ("" if a["required"] else f"={a['default']}") for k, a in r["args"].items())
                origin = "" if r["source"] == "built-in" else f"  from {r['source']}"
                print(f"{r['op']:<15} inputs {arity}  args({argtext})  dtypes {','.join(r['dtypes'])}  {r['doc']}{origin}",
                      file=out)
        return EXIT_OK
    offers = inventory()
    if args.json:
        print(json.dumps([o.to_json() for o in offers], indent=2), file=out)
        return EXIT_OK
    for o in offers:
        state = "available" if o.available else "unavailable"
        print(f"{o.vendor.value:<7} {state:<12} {o.reason}", file=out)
        for d in o.devices:
            memory = f", {d.memory_bytes / 2**30:.1f} GiB" if d.memory_bytes else ""
            print(f"        device {d.bus_address}: {d.display_name}{memory}", file=out)
        if o.dtypes:
            print(f"        dtypes: {', '.join(d.value for d in o.dtypes)}", file=out)
    return EXIT_OK


def _cmd_examples(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import examples

    if args.examples_command == "list":
        for name in examples.shipped():
            print(name, file=out)
        return EXIT_OK
    written = examples.copy(args.dir, force=args.force)
    print(f"wrote {len(written)} files under {args.dir}; try: hetflow run {os.path.join(args.dir, 'examples', 'quickstart.yaml')}",
          file=out)
    return EXIT_OK


# A guest that never exits must fail in seconds, not hang a cron job.
EMULATE_MAX_STEPS = 1 << 28

# Loading the fast backend's compiled code costs numba's start-up (about
# 0.7 s here) however short the guest. A guest that ends within this many
# steps ends sooner in the reference interpreter (about 0.1 s for 20,000
# steps), whose results are the same by contract (tests/emulator check every
# field); a longer one is rerun from the start on the fast backend.
INTERPRETER_START_STEPS = 20_000


def _cmd_emulate(args: argparse.Namespace, out, err) -> int:
    if args.max_steps < 1 or args.chunk_steps < 1:
        raise UsageError("--max-steps and --chunk-steps must be at least 1")
    from hetflow.executors.emulator import ElfError, GuestError, execute, load_elf  # numba loads only here

    try:
        program = load_elf(args.elf, fetch=args.fetch)
    except ElfError as e:
        raise UsageError(str(e)) from None
    data = b""
    if args.input == "-":
        data = sys.stdin.buffer.read()
    elif args.input is not None:
        try:
            with open(args.input, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UsageError(f"--input {args.input}: cannot read: {e.strerror or e}") from None
    from hetflow.executors.emulator.machine import StepLimitExceeded

    ran_on = args.backend
    t0 = time.perf_counter()
    try:
        result = None
        if args.backend in ("fast", "native") and args.interpreter_start:
            budget = min(args.max_steps, INTERPRETER_START_STEPS)
            try:
                result = execute(program, backend="reference", input=data, chunk_steps=args.chunk_steps,
                                 max_steps=budget, runners=False)
                ran_on = "reference"
            except StepLimitExceeded:
                if budget == args.max_steps:
                    raise
        if result is None:
            if args.backend == "fast":
                from hetflow.executors.emulator import fast
                fast.warm_up()                 # steps/s measures the run, not numba's compile
                t0 = time.perf_counter()
            elif args.backend == "native":
                from hetflow.executors.emulator import native    # llvmlite loads only here
                native.warm_up()
                t0 = time.perf_counter()
            result = execute(program, backend=args.backend, input=data, chunk_steps=args.chunk_steps,
                             max_steps=args.max_steps, runners=False)
            ran_on = args.backend
    except ElfError as e:
        raise UsageError(str(e)) from None
    except GuestError as e:
        hint = " (raise it with --max-steps)" if "step limit" in str(e) else ""
        if args.json:
            print(json.dumps({"program": args.elf, "backend": args.backend, "status": "failed", "error": str(e),
                              "pc": e.pc, "insn": e.insn, "step": e.step}), file=out)
        print(f"hetflow: emulate failed: {args.elf}: {e}{hint}", file=err)
        return EXIT_RUN_FAILED
    elapsed = time.perf_counter() - t0
    rate = result.steps / elapsed if elapsed > 0 else 0.0
    text = result.stdout.decode("utf-8", errors="replace")
    ok = result.exit_code == 0
    if args.json:
        print(json.dumps({"program": args.elf, "backend": args.backend, "ran_on": ran_on, "status": "ok" if ok else "failed",
                          "steps": result.steps, "exit_code": result.exit_code, "end_reason": result.end_reason,
                          "pub_outs": [v for _, v in result.pub_outs], "stdout": text,
                          "chunks": len(result.min_traces), "chunk_steps": args.chunk_steps,
                          "counters": result.counters.totals(), "elapsed_s": elapsed, "steps_per_s": rate,
                          **({"translation": result.extra["translation"]} if "translation" in result.extra else {})}),
              file=out)
    else:
        how = {"exit": "exit ecall", "tohost": "tohost write"}.get(result.end_reason, result.end_reason)
        print(f"{args.elf}: exit code {result.exit_code} ({how}) after {result.steps} steps, "
              f"{len(result.min_traces)} chunks, in {elapsed:.3f} s ({rate / 1e6:.2f} M steps/s, "
              f"{args.backend} backend" + ("" if ran_on == args.backend else
                                          f"; it ended within the first {INTERPRETER_START_STEPS:,} steps, run by the "
                                          f"{ran_on} interpreter") + ")", file=out)
        tr = result.extra.get("translation")
        if tr:
            print(f"translation: {tr['blocks']} blocks, {tr['instructions']} instructions, {tr['seconds']:.3f} s "
                  f"({'loaded from the cache' if tr['cached'] else 'compiled and cached'}; included above)", file=out)
        nonzero = [(i, v) for i, v in result.pub_outs if v]
        if nonzero:
            print("public outputs: " + " ".join(f"[{i}]={v:#010x}" for i, v in nonzero), file=out)
        else:
            print(f"public outputs: all {len(result.pub_outs)} zero", file=out)
        if text:
            print(f"guest output ({len(result.stdout)} bytes):", file=out)
            print(text, end="" if text.endswith("\n") else "\n", file=out)
    if not ok:
        print(f"hetflow: emulate failed: {args.elf}: guest exited with code {result.exit_code}", file=err)
        return EXIT_RUN_FAILED
    return EXIT_OK


def _cmd_report(args: argparse.Namespace, out, err) -> int:
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


def _cmd_schema(args: argparse.Namespace, out, err) -> int:
    from hetflow.executors import ops as oplib

    from hetflow.engine import schemagen

    from hetflow.executors import plugins

    ops = {name: op for name, op in oplib.REGISTRY.items() if op.invoke is None}
    for spec in args.plugins or ():
        try:
            loaded = plugins.load_plugin(spec, os.getcwd())
        except plugins.PluginError as e:
            raise UsageError(f"--plugins {spec}: {e}") from None
        ops.update({name: oplib.REGISTRY[name] for name in loaded.ops})
    text = schemagen.dumps(schemagen.editor_schema(ops))
    if args.output is None or args.output == "-":
        out.write(text)
        return EXIT_OK
    try:
        schemagen.write(args.output, text)
    except OSError as e:
        raise UsageError(f"-o {args.output}: cannot write: {e.strerror or e}") from None
    print(f"schema: {args.output}", file=out)
    return EXIT_OK


def _cmd_schedule(args: argparse.Namespace, out, err) -> int:
    from datetime import datetime, timezone

    from hetflow.engine import schedule as schedlib

    def log(event: str, fields) -> None:
        print(schedlib.format_event(event, fields, args.log_format), file=out, flush=True)

    files = schedlib.discover(args.paths)
    if args.schedule_command == "serve":
        from hetflow.engine.serve import Server

        Server(args.paths, args.runs_dir, log, poll=args.poll).serve()
        return EXIT_OK
    now = schedlib.parse_instant(args.now) if args.now else datetime.now(timezone.utc)
    if args.schedule_command == "run-due":
        counts, problems = schedlib.run_due(files, args.runs_dir, now, log, dry_run=args.dry_run)
        for d in problems:
            print(d, file=err)
        if problems:
            return EXIT_BAD_INPUT
        return EXIT_RUN_FAILED if counts["failed"] else EXIT_OK
    if args.schedule_command == "status":
        rows, problems = schedlib.status(files, args.runs_dir, now)
        for d in problems:
            print(d, file=err)
        if args.json:
            print(json.dumps(rows, indent=2), file=out)
        for r in rows if not args.json else []:
            if r["last_slot"] is None:
                last = "never ran"
            else:
                result = r["status"] or r["state"]
                took = f" in {r['duration_s']:.2f} s" if r["duration_s"] is not None else ""
                last = f"last slot {r['last_slot']}: {result}{took}" + (f" (run {r['run_id']})" if r["run_id"] else "")
            active = "  active now" if r["active"] else ""
            print(f"{r['manifest']}  {r['file']}  {last}  next {r['next_slot']}{active}", file=out)
        return EXIT_BAD_INPUT if problems else EXIT_OK
    if args.count < 1:
        raise UsageError("--count must be at least 1")
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
    for d in problems:
        print(d, file=err)
    if args.json:
        print(json.dumps(rows, indent=2), file=out)
    elif not rows and not problems:
        print("no scheduled manifests in " + ", ".join(args.paths), file=out)
    for r in rows if not args.json else []:
        print(f"{r['manifest']}  {r['file']}  cron {r['cron']!r} in {r['timezone']}  catchup {str(r['catchup']).lower()}  "
              f"max_active {r['max_active']}", file=out)
        for utc, local in zip(r["next"], r["next_local"]):
            print(f"  {utc}  ({local})", file=out)
    return EXIT_BAD_INPUT if problems else EXIT_OK


_COMMANDS = {"validate": _cmd_validate, "plan": _cmd_plan, "run": _cmd_run, "executors": _cmd_executors,
             "verify": _cmd_verify, "runs": _cmd_runs,
             "emulate": _cmd_emulate, "examples": _cmd_examples, "report": _cmd_report, "schedule": _cmd_schedule,
             "schema": _cmd_schema}


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        if args.command not in _STOPPABLE:
            return _COMMANDS[args.command](args, out, err)
        from hetflow.engine.cancel import stopping

        with stopping():
            return _COMMANDS[args.command](args, out, err)
    except RunCancelled as e:
        print(f"hetflow: {e}", file=err)
        if e.record_path:
            print(f"record: {e.record_path}", file=err)
        from hetflow.engine.cancel import exit_code_of

        return exit_code_of(e.signal)
    except _ShowVersion:
        import hetflow

        print(f"hetflow {hetflow.__version__}", file=out)
        return EXIT_OK
    except ManifestError as e:
        for d in e.diagnostics:
            print(d, file=err)
        return EXIT_BAD_INPUT
    except UsageError as e:
        print(f"hetflow: error: {e}", file=err)
        return EXIT_BAD_INPUT
    except LockHeld as e:
        print(f"hetflow: {e}", file=err)
        return EXIT_LOCKED
    except HetflowError as e:
        print(f"hetflow: error: {e}", file=err)
        return EXIT_RUN_FAILED
    except SystemExit as e:  # --help
        return int(e.code or 0)
    except KeyboardInterrupt:
        print("hetflow: interrupted", file=err)
        return 130
    except Exception as e:  # noqa: BLE001 - the one place that maps bugs to exit 3
        log = _write_crash_log()
        print(f"hetflow: internal error: {type(e).__name__}: {e} (traceback in {log}; --debug shows it)", file=err)
        if debug:
            traceback.print_exc(file=err)
        return EXIT_INTERNAL


def _write_crash_log() -> str:
    folder = os.path.join(tempfile.gettempdir(), "hetflow")
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"crash-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log")
    with open(path, "w", encoding="utf-8") as f:
        f.write(traceback.format_exc())
    return path


# Commands that run pipelines: SIGINT and SIGTERM cancel them (hetflow.engine.cancel) and they exit 128 + signal.
_STOPPABLE = frozenset({"run", "verify"})


def entry() -> None:
    code = main()
    if code > 128:
        # A cancelled run abandoned executor calls still going in worker threads; the interpreter would wait for them.
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    entry()
