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
from typing import Sequence

from hetflow.engine.errors import HetflowError, ManifestError, RunFailed, UsageError
from hetflow.engine.manifest import compile_manifest, load, parse_overrides
from hetflow.engine.planner import plan as make_plan
from hetflow.engine.planner import render_text
from hetflow.executors import inventory, probe
from hetflow.executors import ops as oplib
from hetflow.executors.base import Dtype

__all__ = ["main", "entry"]

EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is already 2
        self.print_usage(sys.stderr)
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="hetflow", description="Run declarative pipelines across heterogeneous compute.")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an internal error")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    v = sub.add_parser("validate", help="load and validate manifests; FILE:LINE:COL per problem")
    v.add_argument("files", nargs="+", metavar="FILE")

    pl = sub.add_parser("plan", help="placement, partitions, bridges, and why")
    pl.add_argument("file", metavar="FILE")
    pl.add_argument("--format", choices=["text", "json"], default="text")
    pl.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")

    r = sub.add_parser("run", help="run a pipeline and write its run record")
    r.add_argument("file", metavar="FILE")
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    r.add_argument("--runs-dir", default="runs", help="where run folders go (default: ./runs)")
    r.add_argument("--threads", type=int, default=None, help="threads of the in-process scheduler (default: CPU count)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")

    e = sub.add_parser("executors", help="what this machine offers: vendors, devices, dtypes")
    e.add_argument("--json", action="store_true")
    e.add_argument("--ops", action="store_true", help="list the op registry: arity, arguments, dtypes")
    return p


def _compile(file: str, params: list[str]):
    return compile_manifest(load(file), parse_overrides(params))


def _cmd_validate(args: argparse.Namespace, out, err) -> int:
    problems = 0
    for file in args.files:
        try:
            _compile(file, [])
        except ManifestError as e:
            problems += len(e.diagnostics)
            for d in e.diagnostics:
                print(d, file=err)
        else:
            print(f"{file}: ok", file=out)
    return EXIT_BAD_INPUT if problems else EXIT_OK


def _cmd_plan(args: argparse.Namespace, out, err) -> int:
    plan = make_plan(_compile(args.file, args.param), probe)
    if args.format == "json":
        print(json.dumps(plan.to_json(), indent=2), file=out)
    else:
        print(render_text(plan), file=out)
    return EXIT_OK


def _cmd_run(args: argparse.Namespace, out, err) -> int:
    manifest = _compile(args.file, args.param)
    plan = make_plan(manifest, probe)
    if args.threads is not None and args.threads < 1:
        raise UsageError("--threads must be at least 1")
    from hetflow.engine.run import execute  # dask loads only for commands that run

    try:
        result = execute(manifest, plan, runs_dir=args.runs_dir, overrides=parse_overrides(args.param),
                         num_workers=args.threads)
    except RunFailed as e:
        if args.json:
            print(json.dumps({"status": "failed", "record": e.record_path, "error": str(e)}), file=out)
        print(f"hetflow: run failed: {e}", file=err)
        print(f"record: {e.record_path}", file=err)
        return EXIT_RUN_FAILED
    rec = result.record
    if args.json:
        print(json.dumps({"status": result.status, "run_id": result.run_id, "record": result.record_path,
                          "outputs": rec["outputs"]}), file=out)
        return EXIT_OK
    t = plan.totals()
    print(f"run {result.run_id}: {result.status} in {rec['duration_s']:.3f} s "
          f"({t['partitions']} partitions, {t['bridges']} bridges)", file=out)
    for name, o in rec["outputs"].items():
        print(f"  {name}: {o['shape']} {o['dtype']}  {o['digest'][:23]}  {os.path.join(result.run_dir, o['file'])}", file=out)
    print(f"record: {result.record_path}", file=out)
    return EXIT_OK


def _cmd_executors(args: argparse.Namespace, out, err) -> int:
    if args.ops:
        rows = [{"op": op.name, "inputs": list(op.arity), "args": {k: {"kind": a.kind, "required": a.required, "default": a.default} for k, a in op.args.items()},
                 "dtypes": [d.value for d in Dtype if d in op.dtypes], "doc": op.doc}
                for op in oplib.REGISTRY.values()]
        if args.json:
            print(json.dumps(rows, indent=2), file=out)
        else:
            for r in rows:
                arity = str(r["inputs"][0]) if r["inputs"][0] == r["inputs"][1] else f"{r['inputs'][0]}-{r['inputs'][1]}"
                argtext = ", ".join(k + ("" if a["required"] else f"={a['default']}") for k, a in r["args"].items())
                print(f"{r['op']:<15} inputs {arity}  args({argtext})  dtypes {','.join(r['dtypes'])}  {r['doc']}", file=out)
        return EXIT_OK
    offers = inventory()
    if args.json:
        print(json.dumps([o.to_json() for o in offers], indent=2), file=out)
        return EXIT_OK
    for o in offers:
        state = "available" if o.available else "unavailable"
        print(f"{o.vendor.value:<7} {state:<12} {o.reason}", file=out)
        for d in o.devices:
            print(f"        device {d.bus_address}: {d.display_name}", file=out)
        if o.dtypes:
            print(f"        dtypes: {', '.join(d.value for d in o.dtypes)}", file=out)
    return EXIT_OK


_COMMANDS = {"validate": _cmd_validate, "plan": _cmd_plan, "run": _cmd_run, "executors": _cmd_executors}


def main(argv: Sequence[str] | None = None, out=None, err=None) -> int:
    out = out or sys.stdout
    err = err or sys.stderr
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        args = _parser().parse_args(argv)
        return _COMMANDS[args.command](args, out, err)
    except ManifestError as e:
        for d in e.diagnostics:
            print(d, file=err)
        return EXIT_BAD_INPUT
    except UsageError as e:
        print(f"hetflow: error: {e}", file=err)
        return EXIT_BAD_INPUT
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


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
