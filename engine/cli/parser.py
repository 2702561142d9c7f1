"""The ``hetflow`` argument parser: every command, its flags and their help, in one place.

The CLI reference of the documentation is generated from :func:`_parser`.
A parse error is a :class:`~hetflow.engine.errors.UsageError` (exit 2),
never argparse's own exit.
"""

from __future__ import annotations

import argparse
import sys

from hetflow.engine.cli.common import _ShowVersion
from hetflow.engine.cli.emulate import INTERPRETER_START_STEPS
from hetflow.engine.errors import UsageError

__all__ = ["_parser"]


class _Version(argparse.Action):
    def __init__(self, option_strings, dest, **kwargs) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print hetflow's version and exit")

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        raise _ShowVersion()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own exit code is already 2
        self.print_usage(sys.stderr)
        raise UsageError(message)


#: what every ``--json`` does whatever the outcome (docs/reference/exit-codes.md has the failure's object)
_JSON = "; a failure, however it comes, prints one JSON object too (status, exit_code, error, message)"

#: the commands in the order :func:`_parser` adds them (tests check it against the parser)
COMMANDS = ("validate", "plan", "run", "verify", "runs", "executors", "examples", "emulate", "schedule", "report",
            "schema", "import")


def _parser(only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser; ``only="emulate"``: the same parser holding that command alone (what
    ``hetflow emulate ...`` is parsed with: its usage, help and errors are the same, and the other
    commands' parsers, a few milliseconds to build, are not built)."""
    p = _Parser(prog="hetflow", description="Run declarative pipelines across heterogeneous compute.")
    p.add_argument("--debug", action="store_true", help="show the full traceback of an internal error")
    p.add_argument("--version", action=_Version)
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    if only == "emulate":
        sub.metavar = "{" + ",".join(COMMANDS) + "}"      # the usage an unknown flag prints names every command
        _emulate_parser(sub)
        return p

    v = sub.add_parser("validate", help="load and validate manifests; FILE:LINE:COL per problem")
    v.add_argument("files", nargs="+", metavar="FILE")

    pl = sub.add_parser("plan", help="placement, partitions, bridges, and why")
    pl.add_argument("file", metavar="FILE")
    pl.add_argument("--format", choices=["text", "json", "dot", "svg", "png"],
                    help="text for people, json as data, dot for Graphviz; svg and png render through Graphviz's dot "
                         "(default: as -o FILE's suffix says, .json .dot .gv .svg .png, else text)")
    pl.add_argument("-o", "--output", metavar="FILE", help="write the plan to FILE instead of standard output")
    pl.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    pl.add_argument("--point", metavar="NAME", help="plan this point of the matrix alone (default: every point is checked, as `validate` checks them, and the first is planned)")
    pl.add_argument("--runs-dir", default="runs", help="where earlier runs are, to say what is cached and why (default: ./runs)")
    pl.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    pl.add_argument("--input", action="append", default=[], metavar="STAGE=PATH",
                    help="the array of the input stage STAGE, as run takes it, so that the cache forecast is the "
                         "run's (without it, what depends on the stage is unknown); repeat for each input stage")
    _cluster_args(pl)

    r = sub.add_parser("run", help="run a pipeline and write its run record")
    r.add_argument("file", metavar="FILE")
    r.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="override a param")
    r.add_argument("--runs-dir", default="runs", help="where run folders go (default: ./runs)")
    r.add_argument("--input", action="append", default=[], metavar="STAGE=PATH",
                   help="feed the input stage STAGE from a file: PATH is a .npy file, or a .npz or .safetensors file "
                        "with :KEY naming the array (not needed when it holds one). Its array must have the stage's "
                        "shape and values its dtype holds, checked as a load stage's file is; the record keeps the "
                        "file's path and sha256, so verify reruns the run with it. Repeat for each input stage")
    r.add_argument("--threads", type=int, default=None, help="threads of the in-process scheduler (default: CPU count)")
    r.add_argument("--json", action="store_true", help="print the result as one JSON object" + _JSON)
    r.add_argument("--point", metavar="NAME", help="run one point of the matrix: its full name or the part in brackets")
    r.add_argument("--max-points", type=int, default=256, metavar="N", help="the most points a matrix may expand to (default: 256)")
    r.add_argument("--no-cache", action="store_true", help="neither take partitions from the cache nor store them")
    r.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    r.add_argument("--resume", metavar="RUN_ID",
                   help="continue a run or a sweep that was cancelled, failed or died (its process was killed), in its "
                        "own folder: what finished is reused, the rest runs. RUN_ID is a run or sweep id or its folder, a unique "
                        "prefix of one or of its random part, or latest (the newest run, or the sweep it is a point of)")
    r.add_argument("--parallel", type=int, default=1, metavar="K",
                   help="run up to K points of a matrix sweep at once (default: 1)")
    r.add_argument("--schedule-slot", metavar="SLOT",
                   help="run as the schedule slot SLOT (a UTC instant) of the manifest's schedule: block; "
                        "hetflow schedule passes it")
    _cluster_args(r)
    r.add_argument("--quiet", action="store_true",
                   help="no progress display and no event log (and a --workers cluster serves no dashboard)")
    r.add_argument("--log-format", choices=["text", "json"], default="text",
                   help="the run's events on stderr: text is a progress bar on a terminal and one line per event "
                        "otherwise; json is one JSON object per event per line")

    vf = sub.add_parser("verify", help="rerun a run's resolved manifest without the cache and compare output digests")
    vf.add_argument("run_id", metavar="RUN_ID",
                    help="a run id or its folder, a unique prefix of one or of its random part, a point name "
                         "NAME[k=v,...], or latest (the newest run that is not itself a verification run)")
    vf.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    vf.add_argument("--input", action="append", default=[], metavar="STAGE=PATH",
                    help="the array of the input stage STAGE, as run takes it: needed for a run whose arrays came "
                         "from memory (hetflow.run(inputs=)), and checked against the digest its record keeps. "
                         "Without it, the files the run read are read again, and a file whose bytes changed is refused")
    vf.add_argument("--json", action="store_true", help="print the comparison as one JSON object" + _JSON)

    rs = sub.add_parser("runs", help="list runs and sweeps; show, compare and tabulate them; remove old ones")
    rs.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    rs.add_argument("--json", action="store_true", help="print the list as JSON" + _JSON)
    rs.add_argument("--manifest", metavar="NAME", help="only runs of this manifest (its name or file)")
    rs.add_argument("--status", choices=["running", "succeeded", "failed", "cancelled", "died", "unreadable", "forbidden",
                                            "empty"],
                    help="only runs with this status; died: the record says running but its process is gone; "
                         "unreadable: the record is damaged; forbidden: a folder this user cannot read; "
                         "empty: a folder without its record")
    rs.add_argument("--since", metavar="WHEN", help="only runs started since: an age (30d, 12h, 45m, 2w) or a date (2026-03-01)")
    rsub = rs.add_subparsers(dest="runs_command", parser_class=_Parser)
    show = rsub.add_parser("show", help="one run's record, summarized, with the values of scalar outputs; "
                                        "or a sweep's points")
    show.add_argument("run_id", metavar="RUN_ID",
                      help="a run or sweep id or its folder, a unique prefix of one or of its random part, a point name NAME[k=v,...] "
                           "(its newest run), latest (the newest run, or the sweep it is a point of), latest-run, "
                           "latest-sweep or latest-verification")
    # default=SUPPRESS: `hetflow runs --json show ID` keeps the --json given before the subcommand
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the whole record" + _JSON)
    show.add_argument("--runs-dir", default=argparse.SUPPRESS)
    df = rsub.add_parser("diff", help="two runs side by side: params, point, manifest, plugins, data files, versions, outputs")
    df.add_argument("a", metavar="A", help="a run, named as runs show takes it (latest: the newest run)")
    df.add_argument("b", metavar="B", help="a run, named as runs show takes it (latest: the newest run)")
    df.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="print the comparison as one JSON object" + _JSON)
    df.add_argument("--runs-dir", default=argparse.SUPPRESS)
    tb = rsub.add_parser("table", help="one row per run with its params and scalar outputs: a sweep's points or the runs named")
    tb.add_argument("refs", nargs="+", metavar="SWEEP_ID|RUN_ID",
                    help="one sweep or run, or several runs, named as runs show takes them: latest is the newest run, "
                         "or the sweep it is a point of; latest-sweep the newest sweep")
    tb.add_argument("--format", choices=["text", "csv", "json", "markdown"],
                    help="default: text, or json with --json")
    tb.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                    help="the table as one JSON object, as --format json" + _JSON)
    tb.add_argument("--runs-dir", default=argparse.SUPPRESS)
    gc = rsub.add_parser("gc", help="remove old sweeps and runs (per manifest, or by age), each whole with its "
                                    "verification runs; then the cache entries no kept run needs, lock files no process holds and "
                                    "schedule claims of removed runs. A run or sweep that still runs is never removed")
    gc.add_argument("--keep", type=int, metavar="N",
                    help="keep the newest N of each manifest, where a sweep (with all its point runs) counts as one and "
                         "a verification run counts as nothing: it stays and goes with the run it verifies")
    gc.add_argument("--older-than", metavar="AGE",
                    help="remove sweeps and runs started more than AGE ago (30d, 12h, 2w) or before a date, and "
                         "folders whose record cannot be read, by the time in their id")
    gc.add_argument("--cache-dir", metavar="DIR", help="the partition cache (default: RUNS_DIR/.cache)")
    gc.add_argument("--dry-run", action="store_true",
                    help="say what would go and why (each sweep, run, verification run, lock, claim; the count of "
                         "cache entries), remove nothing")
    gc.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="the same as one JSON object" + _JSON)
    gc.add_argument("--runs-dir", default=argparse.SUPPRESS)

    e = sub.add_parser("executors", help="what this machine offers: vendors, devices, dtypes")
    e.add_argument("--json", action="store_true", help="print the list as JSON" + _JSON)
    e.add_argument("--ops", action="store_true", help="list the op registry: arity, arguments, dtypes")

    ex = sub.add_parser("examples", help="the example manifests and guest programs shipped with hetflow")
    exsub = ex.add_subparsers(dest="examples_command", required=True, parser_class=_Parser)
    exsub.add_parser("list", help="every shipped file")
    exc = exsub.add_parser("copy", help="write examples/ and pipelines/ into DIR, ready to run, with "
                                        "schemas/pipeline.schema.json for their editor modelines")
    exc.add_argument("dir", metavar="DIR")
    exc.add_argument("--force", action="store_true", help="overwrite files that already exist there")

    _emulate_parser(sub)

    sc = sub.add_parser("schedule", help="keep the schedule: of manifests: list, run what is due, serve")
    scsub = sc.add_subparsers(dest="schedule_command", required=True, parser_class=_Parser)
    sl = scsub.add_parser("list", help="each scheduled manifest with its next fire times")
    sl.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    sl.add_argument("--now", metavar="ISO", help="list fire times after this instant (default: now)")
    sl.add_argument("--count", type=int, default=3, metavar="N",
                    help="fire times per manifest, at most 10000 (default: 3); fewer where the calendar ends, in 9999")
    sl.add_argument("--json", action="store_true", help="print the list as JSON" + _JSON)
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
    st.add_argument("--json", action="store_true",
                    help="print the list as JSON; with --check, one object: status (ok, failed, overdue), exit_code, "
                         "message and the list as manifests" + _JSON)
    st.add_argument("--check", action="store_true",
                    help="for monitoring: exit 1 when a manifest's last slot failed or died, 6 when a fire time more "
                         "than --grace seconds past was not decided (no scheduler ran), else 0")
    st.add_argument("--grace", type=float, default=300.0, metavar="SECONDS",
                    help="how late a fire time may be before it counts as overdue (default: 300)")
    ss = scsub.add_parser("serve", help="keep the schedules: start due runs as processes until SIGTERM")
    ss.add_argument("paths", nargs="+", metavar="PATH", help="a manifest, or a folder of *.yaml manifests")
    ss.add_argument("--runs-dir", default="runs", help="where run folders and slot claims go (default: ./runs)")
    ss.add_argument("--log-format", choices=["text", "json"], default="text", help="one line per event, as text or JSON")
    ss.add_argument("--poll", type=float, default=5.0, metavar="SECONDS",
                    help="how often to look for changed manifests (default: 5)")

    rp = sub.add_parser("report", help="a self-contained HTML page of a run or sweep: plan graph, timeline, outputs")
    rp.add_argument("run_id", metavar="RUN_ID",
                    help="a run or sweep folder, or a name as runs show takes it: an id, a unique prefix of one or of "
                         "its random part, a point name, latest (the newest run, or the sweep it is a point of)")
    rp.add_argument("-o", "--output", metavar="FILE", help="where to write the page, - for standard output; a link is written through (default: RUN_DIR/report.html)")
    rp.add_argument("--runs-dir", default="runs", help="where run folders are (default: ./runs)")
    rp.add_argument("--graph", choices=["auto", "graphviz", "builtin"], default="auto",
                    help="plan graph layout: Graphviz's dot when installed (auto), or hetflow's own (builtin)")

    sch = sub.add_parser("schema", help="the manifest JSON Schema for editors, with the op registry folded in")
    sch.add_argument("-o", "--output", metavar="FILE", help="write it to FILE instead of stdout")
    sch.add_argument("--plugins", nargs="+", metavar="SPEC",
                     help="also fold in the ops of these plugins (.py paths or module names), as a manifest's plugins: loads them")

    im = sub.add_parser("import", help="bring a model from another format in as a manifest")
    imsub = im.add_subparsers(dest="import_format", metavar="FORMAT", required=True, parser_class=_Parser)
    io = imsub.add_parser("onnx", help="an ONNX model as DIR/NAME.yaml, its weights as DIR/NAME.safetensors")
    io.add_argument("model", metavar="MODEL", help="the .onnx file (external data is read from beside it)")
    io.add_argument("-o", "--output", required=True, metavar="DIR", help="the folder to write into (made if missing)")
    io.add_argument("--name", help="the manifest's name and the files' stem (default: MODEL's file name)")
    io.add_argument("--allow-missing", action="store_true",
                    help="write the manifest even where nodes have no hetflow op, with a plugin stub "
                         "(NAME_missing.py) of those ops to fill in; without it, such a model is refused (exit 2) "
                         "with every missing node listed, and nothing is written")
    io.add_argument("--json", action="store_true", help="print what was written as one JSON object" + _JSON)
    return p


def _emulate_parser(sub) -> None:
    em = sub.add_parser("emulate", help="run one RISC-V guest program directly")
    em.add_argument("elf", metavar="ELF")
    em.add_argument("--backend", choices=["auto", "fast", "reference", "native"], default="auto",
                    help="auto (default: native where llvmlite is installed, else fast where numba is, else "
                         "reference; the output says which ran and why), fast (the numba interpreter), native (the guest's code translated to host code with LLVM, "
                         "cached on disk per program) or reference (plain Python); identical results")
    em.add_argument("--no-interpreter-start", dest="interpreter_start", action="store_false",
                    help=f"run on the fast or native backend from the first step (by default a guest first gets "
                         f"{INTERPRETER_START_STEPS:,} steps in the reference interpreter, which spares a short guest "
                         "the fast backend's start-up)")
    em.add_argument("--input", metavar="FILE", help="bytes mapped at the guest's input address ('-' reads stdin)")
    # the default is the emulator's DEFAULT_MAX_STEPS, resolved when the command runs: building the parser for
    # every command must not load the emulator
    em.add_argument("--max-steps", type=int, default=None,
                    help="fail after this many steps without an exit (default: 2^28, as in manifests)")
    em.add_argument("--timeout", type=float, metavar="SECONDS",
                    help="fail when the guest has not ended after this many seconds of wall-clock time")
    em.add_argument("--max-output", type=int, metavar="BYTES", default=None,
                    help="fail at the write that would take the guest's output past this many bytes (default: "
                         "16 MiB, as in manifests; at most 1 GiB)")
    em.add_argument("--isa", choices=["rv64imac", "rv64ima"], default="rv64imac",
                    help="rv64ima refuses an ELF built with compressed instructions (default: rv64imac)")
    em.add_argument("--chunk-steps", type=int, default=1 << 18, help="steps per min-trace chunk (default: 262144)")
    em.add_argument("--json", action="store_true", help="print the result as one JSON object" + _JSON)
    # None: not given, so that --memory flat can refuse a --fetch executable it would override
    em.add_argument("--fetch", choices=["executable", "any"], default=None,
                    help="where instructions may be fetched from: executable ELF segments only (default; a jump "
                         "into data faults) or any mapped memory, as the ISA lets M-mode without PMP")
    em.add_argument("--memory", choices=["protected", "flat"], default="protected",
                    help="protected: regions keep their ELF permissions (default); flat: fetch, load and store "
                         "anywhere mapped, as M-mode without PMP (implies --fetch any; what riscv-tests assume)")


def _cluster_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=int, metavar="N", help="run on a new local Dask cluster of N worker processes")
    p.add_argument("--threads-per-worker", type=int, metavar="T",
                   help="threads of each --workers process (default: CPU count / N)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run on an existing Dask cluster: tcp://HOST:PORT or the path of a scheduler file")
    p.add_argument("--place", action="append", default=[], metavar="EXECUTOR=WORKER",
                   help="host EXECUTOR on the worker of that name or address (with --workers or --scheduler)")
