"""``hetflow validate``, ``plan``, ``run`` (a matrix sweep included) and ``verify``: the API's passes on a manifest."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from hetflow.engine.cli.common import (EXIT_BAD_INPUT, EXIT_OK, EXIT_RUN_FAILED, cluster_kwargs, event_sink, problem_lines,
                                      write_output)
from hetflow.engine.errors import ManifestError, RunCancelled, RunFailed, StorageUnavailable, UsageError
from hetflow.engine.run.events import printable

__all__ = ["cmd_validate", "cmd_plan", "cmd_run", "cmd_verify"]


def cmd_validate(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api

    problems = passed = 0
    for file in args.files:
        try:
            warnings = api.validate(file)
        except ManifestError as e:
            problems += len(e.diagnostics)
            for line in problem_lines(e.diagnostics):
                print(printable(line), file=err)
        else:
            passed += 1
            for line in problem_lines(warnings, fold=False):
                print(printable(str(line)), file=err)
            print(printable(f"{file}: ok"), file=out)
    if passed:
        print(api.NOT_CHECKED, file=out)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def cmd_plan(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api
    from hetflow.engine.run.inputs import parse_input_flags
    from hetflow.engine.manifest.validate import parse_overrides

    fmt = args.format or _format_of(args.output)
    if args.output and args.output != "-" and _same_file(args.output, args.file):
        stem = os.path.splitext(os.path.basename(args.file))[0]
        raise UsageError(f"-o {args.output} is the manifest being planned, which the plan would replace; "
                         f"write it to another file (-o {stem}.plan.{'txt' if fmt == 'text' else fmt})")
    plan = api.plan(args.file, parse_overrides(args.param), point=args.point, runs_dir=args.runs_dir,
                    cache_dir=args.cache_dir, inputs=parse_input_flags(args.input) or None, **cluster_kwargs(args))
    if fmt in ("svg", "png"):
        data = _graphviz(plan.to_dot(), fmt)
    elif fmt == "json":
        # bytes where the text goes as UTF-8 anyway (a file, a UTF-8 stream): no copy of it as a str
        data = plan.json_bytes() if args.output or _utf8_buffer(out) else plan.dumps()
    elif fmt == "dot":
        data = plan.to_dot()
    else:
        data = plan.to_text()
    if args.output:
        raw = data if isinstance(data, bytes) else data.encode()
        if args.output == "-" and fmt == "png" and getattr(out, "isatty", lambda: False)():
            raise UsageError("--format png writes binary data; give -o FILE or redirect standard output")
        write_output(args.output, raw, out)
        if args.output != "-":
            print(f"{args.output}: plan written ({fmt})", file=err)
    elif isinstance(data, bytes):
        if fmt == "png" and getattr(out, "isatty", lambda: False)():
            raise UsageError("--format png writes binary data; give -o FILE or redirect standard output")
        buffer = getattr(out, "buffer", None)
        if buffer is None:
            raise UsageError(f"--format {fmt} needs -o FILE here (the output stream takes no bytes)")
        out.flush()
        buffer.write(data)
        buffer.flush()
    else:
        out.write(data)
    return EXIT_OK


def _same_file(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` are one existing file (through links, another spelling of the path)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def _utf8_buffer(out) -> bool:
    """Whether the text stream ``out`` writes UTF-8 into a binary ``buffer`` that bytes can go to directly."""
    encoding = (getattr(out, "encoding", None) or "").lower().replace("-", "").replace("_", "")
    return getattr(out, "buffer", None) is not None and encoding == "utf8"


#: ``plan -o FILE`` without ``--format``: the format its suffix names
_SUFFIX_FORMATS = {".json": "json", ".dot": "dot", ".gv": "dot", ".svg": "svg", ".png": "png"}


def _format_of(output: str | None) -> str:
    return _SUFFIX_FORMATS.get(os.path.splitext(output)[1].lower(), "text") if output else "text"


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


def cmd_run(args: argparse.Namespace, out, err) -> int:
    import warnings

    from hetflow.engine.errors import SourceChanged

    with warnings.catch_warnings():
        warnings.simplefilter("always", SourceChanged)
        shown = warnings.showwarning

        def show(message, category, filename, lineno, file=None, line=None) -> None:
            if issubclass(category, SourceChanged):  # said as the command's own warnings are, before the run
                print(printable(f"hetflow: warning: {message}"), file=err)
            else:
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = show
        return _run(args, out, err)


def _run(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine import api
    from hetflow.engine.manifest import matrix
    from hetflow.engine.manifest.validate import load, parse_overrides

    from hetflow.engine.run.inputs import parse_input_flags

    params = parse_overrides(args.param)
    common = dict(runs_dir=args.runs_dir, cache=not args.no_cache, cache_dir=args.cache_dir, threads=args.threads,
                  schedule_slot=args.schedule_slot, max_points=args.max_points,
                  inputs=parse_input_flags(args.input), **cluster_kwargs(args),
                  # a quiet run shows no dashboard link, so its local cluster serves none
                  **({"dashboard": False} if args.quiet and args.workers is not None else {}))
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    source = args.file
    if args.parallel < 1:
        raise UsageError("--parallel must be at least 1")
    if args.max_points < 1:
        raise UsageError("--max-points must be at least 1")
    if args.resume:
        from hetflow.engine.store.runs import resolve_id

        args.resume = resolve_id(args.runs_dir, args.resume)
    if args.point is not None and not args.point.strip():
        raise UsageError("--point takes a name, got an empty one")  # it ran the whole sweep
    if not args.resume:
        source = load(args.file)
        if matrix.has_matrix(source) and not args.point:
            return _sweep(args, source, params, common, out, err)
    elif os.path.isfile(os.path.join(args.runs_dir, args.resume, "sweep.json")):
        if args.point:
            raise UsageError("--resume continues a sweep's unfinished points; it takes no --point")
        return _sweep(args, source, params, common, out, err)
    sink = event_sink(args, err)
    try:
        run = api.run(source, params, point=args.point, resume=args.resume, on_event=sink, **common)
    finally:
        if hasattr(sink, "close"):
            sink.close()
    rec = run._record  # read only: the caller's own copy of the shared parts is for callers that may change them
    _say_numeric(rec, err)
    if not run.ok:
        origin = (rec.get("error") or {}).get("origin")
        message = f"hetflow: run failed: {origin + ': ' if origin else ''}{run.error}"
        if args.json:
            # exit_code and message, as every command's --json object has them (docs/reference/exit-codes.md)
            print(json.dumps({"status": "failed", "exit_code": EXIT_RUN_FAILED, "message": message,
                              "run_id": run.run_id, "record": run.record_path, "error": run.error,
                              "origin": origin}), file=out)
        print(printable(message), file=err)
        trace = (rec.get("error") or {}).get("traceback_file")
        if trace and (rec.get("error") or {}).get("op"):
            print(f"traceback: {os.path.join(os.path.dirname(run.record_path), trace)}", file=err)
        print(f"record: {run.record_path}", file=err)
        if not args.json:
            print(run.run_id, file=out)
        return EXIT_RUN_FAILED
    if args.json:
        print(json.dumps({"status": run.status, "exit_code": EXIT_OK, "run_id": run.run_id, "record": run.record_path,
                          "outputs": {k: v["digest"] for k, v in rec["outputs"].items()},
                          "cache_hits": rec["cache"]["hits"], "cache_damaged": rec["cache"].get("damaged") or {},
                          "cache_store_failed": rec["cache"].get("store_failed") or {},
                          "cache_unreadable": rec["cache"].get("unreadable") or {}}), file=out)
        _cache_warnings(rec, err)  # the messages still go to stderr, as with every --json
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
    _cache_warnings(rec, err)
    print(f"record: {run.record_path}", file=out)
    print(run.run_id, file=out)
    return EXIT_OK


def _sweep(args: argparse.Namespace, doc, params: dict, common: dict, out, err) -> int:
    from hetflow.engine import api

    def row(point: dict) -> None:
        if not args.json:
            # a point that failed before its run began (its plan refused it here) has no run to name: its error says
            # why. One write, line and end together: points end in threads of their own, and a forced exit's last
            # line must not land between a row and its newline
            out.write(printable(f"{point['status']:<9} {point['name']}  {point['run_id'] or point.get('error')}") + "\n")

    sink = event_sink(args, err)
    try:
        sweep = api.sweep(doc, params, on_event=sink, on_point=row, parallel=args.parallel, resume=args.resume,
                          **common)
    finally:
        if hasattr(sink, "close"):
            sink.close()
    from hetflow.engine.batch.sweeps import exit_code
    from hetflow.engine.errors import capped

    summary, file = sweep.summary, os.path.join(sweep.path, "sweep.json")
    failed = [p for p in summary["points"] if p["status"] != "succeeded"]
    # why each point failed, as a run's own failure says it: the rows on standard output name only its run
    for line in capped([f"hetflow: point {p['name']} {p['status']}: {p.get('error') or 'see its record'}"
                        for p in failed]):
        print(printable(line), file=err)
    code = exit_code(summary["points"])
    if args.json:
        from hetflow.engine.store.runs import failure_text

        said = {"error": failure_text(summary["points"]), "message": failure_text(summary["points"])} if failed else {}
        print(json.dumps({"status": summary["status"], "exit_code": code, "sweep_id": sweep.sweep_id, "summary": file,
                          **said, "points": [_point_json(r) for r in summary["points"]]}), file=out)
    else:
        print(f"sweep {sweep.sweep_id}: {len(summary['points']) - len(failed)} of {len(summary['points'])} points succeeded", file=out)
        print(f"summary: {file}", file=out)
        print(sweep.sweep_id, file=out)
    return code


def _point_json(row: dict) -> dict:
    """A point of a sweep as ``--json`` gives it: name, status, run and outputs, and for one that did not
    succeed why, and the exit code it ended with (5: its disk refused its files), as its row in sweep.json
    keeps them; the object's own ``message`` names only the first three."""
    point = {k: row.get(k) for k in ("name", "status", "run_id", "outputs")}
    if row.get("status") != "succeeded":
        point.update(error=row.get("error"), exit_code=row.get("exit_code") or 1)
    return point


def _point_of(record: dict) -> dict | None:
    """The matrix point of a run, for its verification run: the same point, but no sweep's run."""
    point = record.get("matrix_point")
    return {k: v for k, v in point.items() if k != "sweep"} if isinstance(point, dict) else point


def _say_numeric(record: dict, err) -> None:
    """One warning per stage whose values met a floating-point error (NaN or inf made), at the stage's place."""
    plan_nodes = (record.get("plan") or {}).get("nodes") or {}
    for node, entry in (record.get("nodes") or {}).items():
        kinds = entry.get("numeric") if isinstance(entry, dict) else None
        if kinds:
            info = plan_nodes.get(node) or {}
            where = f"{info['origin']}: " if info.get("origin") else ""
            print(f"{where}warning: stage {node!r} ({info.get('op', '?')}) met {', '.join(kinds)} in its values",
                  file=err)


def cmd_verify(args: argparse.Namespace, out, err) -> int:
    from hetflow.engine.plan.planner import plan as make_plan
    from hetflow.executors import probe
    from hetflow.engine.run.execute import execute
    from hetflow.engine.store.runs import manifest_from_record, read_record, resolve_id, status_of

    from hetflow.engine.run.inputs import describe_inputs, parse_input_flags, recorded_inputs, with_inputs

    given = parse_input_flags(args.input)
    folder = resolve_id(args.runs_dir, args.run_id, "run")
    record = read_record(args.runs_dir, folder, whole=True)
    status = status_of(record)
    if status != "succeeded":
        named = args.run_id if args.run_id == folder else f"{args.run_id} ({folder})"
        raise UsageError(f"run {named} did not succeed (status {status}); there is nothing to verify: verify reruns "
                         "a run that succeeded and compares its outputs")
    if record.get("run_id") != folder:
        # a folder renamed, or two swapped: its files are the ones its record vouches for, wherever it now is
        print(f"hetflow: note: {os.path.join(args.runs_dir, folder)} holds the record of run {record.get('run_id')}; "
              "its files are verified where they are", file=err)
    try:
        manifest = manifest_from_record(record)
    except ManifestError as e:
        raise _from_elsewhere(e, os.path.join(args.runs_dir, folder, "record.json")) from None
    # refused before the rerun starts: a rerun without the run's own arrays could only fail or differ
    bound = recorded_inputs(record, manifest, given, verb="verify")
    plan = with_inputs(make_plan(manifest, probe), bound)
    from hetflow.engine.store.compare import mismatch_causes

    from hetflow.engine.run import threads

    try:
        # at the BLAS threads the run had (one a point of a --parallel sweep): a float sum's order follows them
        with threads.POOLS.pinned(threads.recorded_blas(record)):
            result = execute(manifest, plan, runs_dir=args.runs_dir, overrides=record.get("overrides") or {},
                             use_cache=False, matrix_point=_point_of(record), verifies=record["run_id"],
                             inputs=describe_inputs(bound))
        fresh = {k: v["digest"] for k, v in result.record["outputs"].items()}
        rerun, rerun_ok, rerun_record, rerun_error = result.run_id, True, result.record, None
    except (RunCancelled, StorageUnavailable) as e:
        # its object names the run verified as run_id, and the rerun that was stopped (or whose disk refused its
        # files) as rerun_id, as a finished verify's does
        e.verifies = record["run_id"]
        raise
    except RunFailed as e:
        fresh, rerun, rerun_ok, rerun_error = {}, os.path.basename(os.path.dirname(e.record_path or "")), False, str(e)
        rerun_record = read_record(args.runs_dir, rerun) if rerun else None
        print(printable(f"hetflow: the rerun failed: {e}"), file=err)
    from hetflow.engine.errors import OutputDamaged
    from hetflow.engine.store.records import read_output

    rows = []
    run_dir = os.path.join(args.runs_dir, folder)
    recorded_outputs = record.get("outputs") if isinstance(record.get("outputs"), dict) else {}
    # every output the manifest names, the record's digest-checked resolved form: one the record lacks is no match
    names = list(recorded_outputs) + [n for n in list(fresh) + list(manifest.outputs) if n not in recorded_outputs]
    for name in dict.fromkeys(names):
        entry = recorded_outputs.get(name)
        entry = entry if isinstance(entry, dict) else {}
        digest = entry.get("digest") if isinstance(entry.get("digest"), str) else None
        got = fresh.get(name)
        row = {"output": name, "recorded": digest, "rerun": got, "match": digest is not None and got == digest}
        if not entry:
            row["file"] = "the record lists no such output, though its manifest names it"
            print(f"hetflow: output {name}: {row['file']}", file=err)
        elif digest is None:
            row["file"] = "the record gives no digest for it"
            print(f"hetflow: output {name}: {row['file']}", file=err)
        elif "file" in entry or "value" not in entry:  # the run's own file still the array its record names
            try:
                read_output(run_dir, name, entry)
                row["file"] = "ok"
            except OutputDamaged as e:
                row["file"] = e.why
                print(printable(f"hetflow: output {name}: {e.why}"), file=err)
        if not row["match"] and rerun_ok and digest is not None:
            row["causes"] = mismatch_causes(record, rerun_record, name)
        rows.append(row)
    damaged = [r["output"] for r in rows if r.get("file") not in (None, "ok")]
    edited = _record_contradicts(record, manifest)
    for line in edited:
        print(printable(f"hetflow: {line}"), file=err)
    ok = rerun_ok and all(r["match"] for r in rows) and not damaged and not edited
    changed = (_changed_manifest(record) + _changed_sources(record, manifest)
               + _changed_environment(record, rerun_record))
    for line in changed:
        print(printable(f"hetflow: {line}"), file=err)
    if args.json:
        bad = [r["output"] for r in rows if not r["match"]]
        failed = {} if ok else {"message": f"verify {record['run_id']}: " + (
            f"the rerun failed: {rerun_error}" if rerun_error else f"MISMATCH in {', '.join(bad or damaged)}"
            if bad or damaged else "; ".join(edited))}
        print(json.dumps({"status": "succeeded" if ok else "failed", "exit_code": EXIT_OK if ok else EXIT_RUN_FAILED,
                          **failed, "run_id": record["run_id"], "rerun_id": rerun, "match": ok, "outputs": rows,
                          "changed": changed, **({"record_edited": edited} if edited else {}),
                          **({"error": f"the rerun failed: {rerun_error}"} if rerun_error else {})}),
              file=out)
    else:
        width = max([len(r["output"]) for r in rows] + [6])
        # digests shown to 16 hex digits, or whole where two that differ agree that far (a record edited by hand)
        shown = 71 if any(r["recorded"] and r["rerun"] and r["recorded"] != r["rerun"]
                          and r["recorded"][:23] == r["rerun"][:23] for r in rows) else 23
        print(f"{'output':<{width}}  {'recorded':<{shown}}  {'rerun':<{shown}}  match", file=out)
        for r in rows:
            print(f"{r['output']:<{width}}  {(r['recorded'] or 'missing')[:shown]:<{shown}}  "
                  f"{(r['rerun'] or 'missing')[:shown]:<{shown}}  {'yes' if r['match'] else 'NO'}", file=out)
        for r in rows:
            for cause in r.get("causes", ()):
                print(printable(f"  {r['output']}: likely cause: {cause}"), file=out)
        bad = [r["output"] for r in rows if not r["match"]]
        verdict = ("all outputs match" if ok else f"MISMATCH in {', '.join(bad)}" if bad and rerun_ok else
                   f"the rerun matches the record, but the run's files of {', '.join(damaged)} are not what it "
                   "recorded" if damaged and rerun_ok else "MISMATCH: the rerun failed" if rerun_error else
                   "the rerun matches the record's outputs, but its params are not those the run had" if edited
                   else "MISMATCH")
        print(f"verify {record['run_id']}: {verdict} (rerun {rerun}, a verification run)", file=out)
    return EXIT_OK if ok else EXIT_RUN_FAILED


def _from_elsewhere(error: ManifestError, record_file: str) -> Exception:
    """``error`` of a record's manifest that no longer compiles, or, where the manifest file it names is not on
    this machine (a runs folder copied from another), the same said of the record, the one file there is."""
    gone = [d for d in error.diagnostics
            if d.origin is not None and not os.path.isfile(str(getattr(d.origin, "file", "")))]
    if not gone or len(gone) != len(error.diagnostics):
        return error
    return UsageError("\n".join(
        f"{record_file}: error: {d.message} (the run's manifest, {d.origin.file}, is not on this machine either: "
        "a run is rerun where the files it read are)" for d in gone))


def _record_contradicts(record: dict, manifest: Any) -> list[str]:
    """What the record says its run had that the manifest it ran (the record's resolved form, which its digest
    vouches for) did not: a record whose params or matrix point were edited after the run."""
    from hetflow.engine.store.compare import changes

    def shown(value: Any) -> str:
        return "absent" if value is None else json.dumps(value)

    said = []
    params = record.get("params")
    for k, claimed, ran in changes(params if isinstance(params, dict) else {}, manifest.params):
        said.append(f"the record's params give {k} = {shown(claimed)}, but the manifest it ran has {shown(ran)}: "
                    "the record was edited after the run")
    point = record.get("matrix_point")
    values = point.get("values") if isinstance(point, dict) else None
    for k, claimed, ran in changes(values if isinstance(values, dict) else {},
                                   {k: manifest.params.get(k) for k in (values or {})}):
        said.append(f"the record's matrix point gives {k} = {shown(claimed)}, but the manifest it ran has "
                    f"{shown(ran)}: the record was edited after the run")
    return said


def _changed_manifest(record: dict) -> list[str]:
    """Where the manifest file the run came from now resolves, with the run's params and point, to another manifest
    than the one the record keeps (and verify reran): rerunning the file would not be this verification."""
    from datetime import datetime

    from hetflow.engine.errors import HetflowError
    from hetflow.engine.manifest.validate import compile_manifest, load

    entry = record.get("manifest") if isinstance(record.get("manifest"), dict) else {}
    path = entry.get("file")
    if not isinstance(path, str) or not path or path.startswith("<"):  # "<string>": text that was never a file
        return []
    try:
        began = datetime.fromisoformat(str(record.get("started_at")).replace("Z", "+00:00")).timestamp()
        if os.stat(path).st_mtime < began - 1.0:
            return []  # not written since the run began: a 100,000-stage manifest is not compiled again to say so
    except FileNotFoundError:
        return [f"the manifest file {path} the run came from is no longer there; verify reran the manifest its "
                "record keeps"]
    except (OSError, ValueError, TypeError):
        pass
    point = record.get("matrix_point") if isinstance(record.get("matrix_point"), dict) else {}
    values = point.get("values") if isinstance(point.get("values"), dict) else {}
    overrides = record.get("overrides") if isinstance(record.get("overrides"), dict) else {}
    try:
        if compile_manifest(load(path), {**overrides, **values}).digest == entry.get("digest"):
            return []
        what = "it resolves to another manifest now"
    except HetflowError as e:
        what = f"it no longer compiles: {str(e).splitlines()[0]}"
    return [f"the manifest file {path} has changed since the run ({what}); verify reran the manifest the run's "
            f"record keeps: run {path} anew for the change"]


def _changed_environment(record: dict, rerun: Any) -> list[str]:
    """The library versions and thread pools of the rerun that are not the run's: said whether or not the outputs
    match, as what the verification did not hold as the run had it."""
    from hetflow.engine.store.compare import changes, pools_of

    if not isinstance(rerun, dict):
        return []

    def versions(r: dict) -> dict:
        return r["versions"] if isinstance(r.get("versions"), dict) else {}

    def shown(value: Any) -> str:
        return "absent" if value is None else str(value)

    said = []
    moved = changes(versions(record), versions(rerun))
    if moved:
        said.append("the rerun's library versions are not the run's: "
                    + ", ".join(f"{k} {shown(a)} then, {shown(b)} now" for k, a, b in moved))
    pools = changes(pools_of(record), pools_of(rerun))
    if pools:
        said.append("the rerun's thread pools are not the run's: "
                    + ", ".join(f"{k} {shown(a)} then, {shown(b)} now" for k, a, b in pools))
    return said


def _changed_sources(record: dict, manifest: Any) -> list[str]:
    """The plugins and data files whose bytes differ from those the recorded run used."""
    from hetflow.engine.store.cache import file_digest

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
    for name, d in (record.get("programs") or {}).items():
        digest = file_digest(d["path"]) if isinstance(d, dict) and isinstance(d.get("path"), str) else None
        if isinstance(d, dict) and digest != d.get("digest"):
            changed.append(f"emulator {name!r} runs {d.get('path')}, whose bytes changed since the run "
                           f"({(d.get('digest') or 'unreadable')[:19]} then, {(digest or 'unreadable')[:19]} now)")
    return changed


def _cache_warnings(rec: dict, err) -> None:
    """What the run's cache use should tell its user: damaged entries it replaced, partitions it could not store."""
    damaged = rec["cache"].get("damaged") or {}
    if damaged:  # the run is whole: these ran again, and their fresh entries took the damaged ones' place
        said = ("1 cache entry was damaged, so its partition ran again and replaced it" if len(damaged) == 1 else
                f"{len(damaged)} cache entries were damaged, so their partitions ran again and replaced them")
        print(f"hetflow: warning: {said}: " + "; ".join(f"{pid}: {why}" for pid, why in sorted(damaged.items())),
              file=err)
    unreadable = rec["cache"].get("unreadable") or {}
    if unreadable:  # the run is whole: these ran again, and their entries, another user's, were left as they were
        print(f"hetflow: warning: {len(unreadable)} cache entr{'y' if len(unreadable) == 1 else 'ies'} could not be "
              "read by this user, so their partitions ran again: "
              + "; ".join(f"{pid}: {why}" for pid, why in sorted(unreadable.items())), file=err)
    unstored = rec["cache"].get("store_failed") or {}
    if unstored:  # the run is whole; the next one will compute these partitions again
        print(f"hetflow: warning: {len(unstored)} partition(s) not stored in the cache: "
              + "; ".join(f"{pid}: {why}" for pid, why in sorted(unstored.items())), file=err)
