"""``hetflow emulate``: run one RISC-V guest program directly.

Starts without numpy, networkx, jsonschema or dask: the emulator loads
inside the command, and a short guest ends in the reference interpreter
before the fast backend's compiled code would have loaded.  A plain
command line (the flags spelled out, no ``--help``, nothing argparse
would refuse) is read by :func:`plain_args` without argparse, whose
import and parser cost more than a whole cached native run of a short
guest; anything else goes to the parser, which says what it means.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from types import SimpleNamespace

from hetflow.engine.cli.common import EXIT_OK, EXIT_RUN_FAILED

__all__ = ["INTERPRETER_START_STEPS", "cmd_emulate", "plain_args"]

# Loading the fast backend's compiled code costs numba's start-up (about
# 0.7 s here) however short the guest. A guest that ends within this many
# steps ends sooner in the reference interpreter (about 0.1 s for 20,000
# steps), whose results are the same by contract (tests/emulator check every
# field); a longer one is rerun from the start on the fast backend.
INTERPRETER_START_STEPS = 20_000

#: emulate's flags as its argparse parser declares them (``parser._emulate_parser``; a test holds the two
#: together): flag -> (dest, how its value converts, or None for a switch, and the choices or the switch's value)
#: the largest --input: it is mapped at INPUT_ADDR (0x4000_0000), its length first, up to where programs load
#: (0x8000_0000)
MAX_INPUT_BYTES = (1 << 30) - 8
INPUT_ADDR = 0x4000_0000
#: executors.emulator.MAX_CHUNK_STEPS, said here so that the command's checks load nothing of the emulator
MAX_CHUNK_STEPS = 1 << 24
#: executors.emulator's DEFAULT_MAX_OUTPUT and MAX_OUTPUT_LIMIT, said here for the same reason
DEFAULT_MAX_OUTPUT = 1 << 24
MAX_OUTPUT_LIMIT = 1 << 30

_FLAGS = {"--backend": ("backend", str, ("auto", "fast", "reference", "native")),
          "--no-interpreter-start": ("interpreter_start", None, False),
          "--input": ("input", str, None), "--max-steps": ("max_steps", int, None),
          "--timeout": ("timeout", float, None), "--max-output": ("max_output", int, None), "--isa": ("isa", str, ("rv64imac", "rv64ima")),
          "--chunk-steps": ("chunk_steps", int, None), "--json": ("json", None, True),
          "--fetch": ("fetch", str, ("executable", "any")), "--memory": ("memory", str, ("protected", "flat"))}
#: the namespace argparse gives ``hetflow emulate ELF`` (the top-level flags' too), less ``elf``
_DEFAULTS = {"debug": False, "version": None, "command": "emulate", "backend": "auto", "interpreter_start": True,
             "input": None, "max_steps": None, "timeout": None, "max_output": None, "isa": "rv64imac", "chunk_steps": 1 << 18,
             "json": False, "fetch": None, "memory": "protected"}


def plain_args(argv: list[str]) -> SimpleNamespace | None:
    """``argv`` (``["emulate", ...]``) as the emulate parser would read it, or None where that takes argparse.

    A plain line is one ELF and whole flags, each value a separate word that
    does not start with ``-`` and converts and is among the choices; what
    is left (``--help``, ``--flag=value``, an abbreviation, ``--``, a bad
    value, a second ELF) returns None, and the parser gives its usage, help
    or error as before.  The attributes are argparse's for the same line.

    >>> vars(plain_args(["emulate", "g.elf", "--max-steps", "100", "--json"]))["max_steps"]
    100
    >>> plain_args(["emulate", "g.elf", "--max-steps", "many"]) is None      # argparse's error, not ours
    True
    """
    if argv[:1] != ["emulate"]:
        return None
    values, elf = dict(_DEFAULTS), None
    words = iter(argv[1:])
    for word in words:
        if not word.startswith("-"):
            if elf is not None:
                return None
            elf = word
            continue
        flag = _FLAGS.get(word)
        if flag is None:
            return None
        dest, convert, choices = flag
        if convert is None:
            values[dest] = choices
            continue
        value = next(words, None)
        if value is None or value.startswith("-") and value != "-":
            return None
        try:
            value = convert(value)
        except ValueError:
            return None
        if choices is not None and value not in choices:
            return None
        values[dest] = value
    if elf is None:
        return None
    return SimpleNamespace(elf=elf, **values)


def _usage(message: str):
    # the errors module loads only when a command line is refused: the plain start does without it
    from hetflow.engine.errors import UsageError

    return UsageError(message)


def _output(r: dict, program, data: bytes, chunk_steps: int):
    """The native main execution's dict as the ExecutionOutput ``execute`` returns (its min traces
    without their reads, which the command never shows)."""
    from hetflow.executors.emulator.output import BackendArtifacts, CountersChunkMetrics, ExecutionOutput

    return ExecutionOutput(min_traces=r["traces"], counters=CountersChunkMetrics(r["counts"]), pub_outs=r["pub_outs"],
                           steps=r["steps"], backend=BackendArtifacts("native", None, None), exit_code=r["exit_code"],
                           stdout=r["stdout"], end_reason=r["end_reason"],
                           extra={"program": program.name, "input_size": len(data), "chunk_steps": chunk_steps,
                                  "backend": "native", "translation": r["translation"]})


def _warm_up_fast(err) -> tuple[float, str | None]:
    """Load the fast backend's interpreter, or compile it when numba's disk
    cache holds none for this machine (27-58 s, once), saying so on ``err``
    first: a silent minute looks like a hang.  Returns the compile's seconds
    and what it was (``0.0, None`` for a load from the cache, which the
    run's time leaves out as before)."""
    from hetflow.executors.emulator import fast, fast_compile_needed

    if not fast_compile_needed():
        fast.warm_up()
        return 0.0, None
    print("hetflow: compiling the fast backend's interpreter (first run on this machine; cached for later runs)...",
          file=err, flush=True)
    t0 = time.perf_counter()
    fast.warm_up()
    seconds = time.perf_counter() - t0
    print(f"hetflow: compiled in {seconds:.1f} s", file=err, flush=True)
    return seconds, "compiling the fast backend's interpreter"


def _end_reason(e: Exception) -> str:
    """Why a guest that failed ended, as ``--json``'s ``end_reason`` names it beside an ended run's ``exit`` and
    ``tohost``: ``trap``, ``step-limit``, ``time-limit`` or ``output-limit``."""
    from hetflow.executors.emulator.machine import (GuestTrap, OutputLimitExceeded, StepLimitExceeded,
                                                    TimeLimitExceeded)

    for kind, reason in ((GuestTrap, "trap"), (StepLimitExceeded, "step-limit"), (TimeLimitExceeded, "time-limit"),
                         (OutputLimitExceeded, "output-limit")):
        if isinstance(e, kind):
            return reason
    return "error"


def _report(args, result_or_error, out) -> None:
    """The public outputs and the guest's printed output, of a run that ended or failed."""
    nonzero = [(i, v) for i, v in result_or_error.pub_outs if v]
    if nonzero:
        print("public outputs: " + " ".join(f"[{i}]={v:#010x}" for i, v in nonzero), file=out)
    else:
        print(f"public outputs: all {len(result_or_error.pub_outs)} zero", file=out)
    text = result_or_error.stdout.decode("utf-8", errors="replace")
    if text:
        print(f"guest output ({len(result_or_error.stdout)} bytes):", file=out)
        print(text, end="" if text.endswith("\n") else "\n", file=out)


def cmd_emulate(args, out, err) -> int:
    from hetflow.executors.emulator import (DEFAULT_MAX_STEPS, ElfError, GuestError, execute,  # numba loads only here
                                            load_elf)

    if args.max_steps is None:
        args.max_steps = DEFAULT_MAX_STEPS
    if args.max_steps < 1 or args.chunk_steps < 1:
        raise _usage("--max-steps and --chunk-steps must be at least 1")
    if args.chunk_steps > MAX_CHUNK_STEPS:
        raise _usage(f"--chunk-steps is at most {MAX_CHUNK_STEPS} (a chunk's trace is held whole, and the native "
                     f"backend reads the clock between chunks), not {args.chunk_steps}")
    if args.timeout is not None and not args.timeout > 0:
        raise _usage("--timeout must be a positive number of seconds")
    max_output = getattr(args, "max_output", None)
    max_output = DEFAULT_MAX_OUTPUT if max_output is None else max_output
    if not 0 <= max_output <= MAX_OUTPUT_LIMIT:
        raise _usage(f"--max-output is a number of bytes from 0 to {MAX_OUTPUT_LIMIT:,} (1 GiB), not {max_output:,}")
    memory = getattr(args, "memory", "protected")
    if memory == "flat" and args.fetch == "executable":
        raise _usage("--memory flat fetches from any mapped memory (it implies --fetch any); "
                     "drop --fetch executable, or drop --memory flat")
    fetch = args.fetch or ("any" if memory == "flat" else "executable")
    from hetflow.executors.emulator import AUTO, resolve_backend

    requested = args.backend
    args.backend, why = resolve_backend(args.backend)
    try:
        if args.backend == "native":
            # pyelftools stays unloaded when the translation's disk cache holds what the run needs of the file
            from hetflow.executors.emulator.native_main import load_program
            program = load_program(args.elf, fetch=fetch, isa=args.isa, memory=memory)
        else:
            program = load_elf(args.elf, fetch=fetch, isa=args.isa, memory=memory)
    except ElfError as e:
        raise _usage(str(e)) from None
    data = b""
    if args.input == "-":
        if sys.stdin is None:  # started with its standard input closed (<&-)
            raise _usage("--input -: standard input is closed; give the input's file, or pipe it in")
        data = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    elif args.input is not None:
        try:
            with open(args.input, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                if stat.S_ISDIR(os.fstat(f.fileno()).st_mode):
                    raise IsADirectoryError(21, "Is a directory")
                # a regular file says its size before it is read; a pipe (--input <(...)) is read up to the limit
                data = b"" if size > MAX_INPUT_BYTES else f.read(MAX_INPUT_BYTES + 1)
                size = max(size, len(data))
        except OSError as e:
            raise _usage(f"--input {args.input}: cannot read: {e.strerror or e}") from None
        if size > MAX_INPUT_BYTES:
            raise _usage(f"--input {args.input}: {size:,} bytes or more; a guest's input is at most "
                         f"{MAX_INPUT_BYTES:,} (it is mapped at {INPUT_ADDR:#x}, below the program)")
    if len(data) > MAX_INPUT_BYTES:
        raise _usage(f"--input -: more than {MAX_INPUT_BYTES:,} bytes; a guest's input is at most "
                     f"{MAX_INPUT_BYTES:,} (it is mapped at {INPUT_ADDR:#x}, below the program)")
    from hetflow.executors.emulator.machine import StepLimitExceeded, TimeLimitExceeded, with_output

    # one deadline for the whole command: the interpreter's start, a compile and the run all count
    deadline = None if args.timeout is None else time.monotonic() + args.timeout

    def left() -> float | None:
        return None if deadline is None else max(deadline - time.monotonic(), 1e-9)

    ran_on = args.backend
    compile_s, compiled = 0.0, None
    t0 = time.perf_counter()
    try:
        result = main_run = None
        if args.backend == "native":
            # numpy, numba and llvmlite stay unloaded when the disk cache holds the translation
            from hetflow.executors.emulator import native_main
            main_run = native_main.MainRun(program, data, translate=False)
        if args.backend in ("fast", "native") and args.interpreter_start and (main_run is None or main_run.code is None):
            budget = min(args.max_steps, INTERPRETER_START_STEPS)
            ran_on = "reference"  # what a guest that fails here failed on
            try:
                result = execute(program, backend="reference", input=data, chunk_steps=args.chunk_steps,
                                 max_steps=budget, runners=False, timeout=left(), max_output=max_output)
            except StepLimitExceeded:
                if budget == args.max_steps:
                    raise
                ran_on = args.backend
        if result is None:
            if args.backend == "fast":
                compile_s, compiled = _warm_up_fast(err)
                t0 = time.perf_counter()
            if main_run is not None:
                if main_run.code is None:          # llvmlite loads only when the cache holds no translation
                    print(f"hetflow: translating {args.elf}'s code to host code with LLVM (not in the disk cache; "
                          "cached for later runs)...", file=err, flush=True)
                    tc = time.perf_counter()
                    main_run.translate()
                    compile_s, compiled = time.perf_counter() - tc, "translating the guest's code"
                    print(f"hetflow: translated in {compile_s:.2f} s", file=err, flush=True)
                t0 = time.perf_counter()
                before = main_run.translating["seconds"]
                # the command shows no min trace's reads: they stay in the run's buffer, uncopied
                result = _output(main_run.run(args.chunk_steps, args.max_steps, deadline, args.timeout, reads=False,
                                              max_output=max_output),
                                 program, data, args.chunk_steps)
                # code the run met later was translated as it ran: that time is translation's, not the run's
                again = main_run.translating["seconds"] - before
                if again > 0.01:  # not a cached translation's load
                    t0 += again
                    compile_s += again
                    # the first translation covers what is reachable from the entry; jumps the run met later
                    # (through registers) were translated with it again
                    print(f"hetflow: translated again, with the code the run reached through jumps, in {again:.2f} s "
                          f"({compile_s:.2f} s in all)", file=err, flush=True)
                    compiled = compiled or "translating the guest's code"
            else:
                result = execute(program, backend=args.backend, input=data, chunk_steps=args.chunk_steps,
                                 max_steps=args.max_steps, runners=False, timeout=left(), max_output=max_output)
    except ElfError as e:
        raise _usage(str(e)) from None
    except GuestError as e:
        if "step limit" in str(e):
            hint = " (raise it with --max-steps)"
        elif "time limit" in str(e):
            hint = " (raise it with --timeout)"
        elif "output limit" in str(e):
            hint = " (raise it with --max-output)"
        else:
            hint = ""
        if isinstance(e, TimeLimitExceeded):
            # named by the command's limit, not by what was left of it for the run that passed it
            e = with_output(TimeLimitExceeded(args.timeout, pc=e.pc, insn=e.insn, step=e.step, symbol=e.symbol),
                            e.stdout, e.pub_outs)
        message = f"hetflow: emulate failed: {args.elf}: {e}{hint}"
        if args.json:
            import json

            # exit_code and message as every command's --json object has them (docs/reference/exit-codes.md)
            print(json.dumps({"program": args.elf, "backend": args.backend, "ran_on": ran_on,
                              "requested_backend": requested, "backend_reason": why, "status": "failed",
                              "exit_code": EXIT_RUN_FAILED, "message": message, "error": str(e),
                              "end_reason": _end_reason(e),
                              "pc": e.pc, "symbol": e.symbol, "insn": e.insn, "step": e.step, "steps": e.step,
                              "pub_outs": [v for _, v in e.pub_outs],
                              "stdout": e.stdout.decode("utf-8", errors="replace")}), file=out)
        else:
            print(f"{args.elf}: failed after {e.step} steps ({ran_on} backend"
                  + (f", in the {ran_on} interpreter's first {INTERPRETER_START_STEPS:,} steps" if ran_on != args.backend
                     else "") + ")", file=out)
            _report(args, e, out)
        print(message, file=err)
        return EXIT_RUN_FAILED
    run_s = time.perf_counter() - t0
    elapsed = run_s + compile_s
    rate = result.steps / run_s if run_s > 0 else 0.0
    chosen = f", auto: {why}" if requested == AUTO else ""
    text = result.stdout.decode("utf-8", errors="replace")
    ok = result.exit_code == 0
    message = f"hetflow: emulate failed: {args.elf}: guest exited with code {result.exit_code}"
    if args.json:
        import json

        # exit_code is the process's, as in every command's --json object; the guest's is guest_exit_code
        print(json.dumps({"program": args.elf, "backend": args.backend, "ran_on": ran_on, "status": "ok" if ok else "failed",
                          "exit_code": EXIT_OK if ok else EXIT_RUN_FAILED, **({} if ok else {"message": message}),
                          "steps": result.steps, "guest_exit_code": result.exit_code, "end_reason": result.end_reason,
                          "pub_outs": [v for _, v in result.pub_outs], "stdout": text,
                          "chunks": len(result.min_traces), "chunk_steps": args.chunk_steps,
                          "counters": result.counters.totals(), "elapsed_s": elapsed, "steps_per_s": rate,
                          "run_s": run_s, "compile_s": compile_s, "compiled": compiled, "requested_backend": requested,
                          "backend_reason": why,
                          **({"translation": result.extra["translation"]} if "translation" in result.extra else {})}),
              file=out)
    else:
        how = {"exit": "exit ecall", "tohost": "tohost write"}.get(result.end_reason, result.end_reason)
        print(f"{args.elf}: exit code {result.exit_code} ({how}) after {result.steps} steps, "
              f"{len(result.min_traces)} chunks, in {elapsed:.3f} s ("
              + (f"{compile_s:.3f} s of it {compiled}; " if compiled else "") + f"{rate / 1e6:.2f} M steps/s, "
              f"{args.backend} backend{chosen}" + ("" if ran_on == args.backend else
                                          f"; it ended within the first {INTERPRETER_START_STEPS:,} steps, run by the "
                                          f"{ran_on} interpreter") + ")", file=out)
        tr = result.extra.get("translation")
        if tr:
            print(f"translation: {tr['blocks']} blocks, {tr['instructions']} instructions, {tr['seconds']:.3f} s "
                  f"({'loaded from the cache' if tr['cached'] else 'compiled and cached'}; included above)", file=out)
        _report(args, result, out)
    if not ok:
        print(message, file=err)
        return EXIT_RUN_FAILED
    return EXIT_OK
