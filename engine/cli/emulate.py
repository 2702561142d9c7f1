"""``hetflow emulate``: run one RISC-V guest program directly.

Starts without numpy, networkx, jsonschema or dask: the emulator loads
inside the command, and a short guest ends in the reference interpreter
before the fast backend's compiled code would have loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from hetflow.engine.cli.common import EXIT_OK, EXIT_RUN_FAILED
from hetflow.engine.errors import UsageError

__all__ = ["EMULATE_MAX_STEPS", "INTERPRETER_START_STEPS", "cmd_emulate"]

# A guest that never exits must fail in seconds, not hang a cron job.
EMULATE_MAX_STEPS = 1 << 28

# Loading the fast backend's compiled code costs numba's start-up (about
# 0.7 s here) however short the guest. A guest that ends within this many
# steps ends sooner in the reference interpreter (about 0.1 s for 20,000
# steps), whose results are the same by contract (tests/emulator check every
# field); a longer one is rerun from the start on the fast backend.
INTERPRETER_START_STEPS = 20_000


def _output(r: dict, program, data: bytes, chunk_steps: int):
    """The native main execution's dict as the ExecutionOutput ``execute`` returns."""
    from hetflow.executors.emulator.output import BackendArtifacts, CountersChunkMetrics, ExecutionOutput

    return ExecutionOutput(min_traces=r["traces"], counters=CountersChunkMetrics(r["counts"]), pub_outs=r["pub_outs"],
                           steps=r["steps"], backend=BackendArtifacts("native", None, None), exit_code=r["exit_code"],
                           stdout=r["stdout"], end_reason=r["end_reason"],
                           extra={"program": program.name, "input_size": len(data), "chunk_steps": chunk_steps,
                                  "backend": "native", "translation": r["translation"]})


def cmd_emulate(args: argparse.Namespace, out, err) -> int:
    if args.max_steps < 1 or args.chunk_steps < 1:
        raise UsageError("--max-steps and --chunk-steps must be at least 1")
    from hetflow.executors.emulator import ElfError, GuestError, execute, load_elf  # numba loads only here

    try:
        if args.backend == "native":
            # pyelftools stays unloaded when the translation's disk cache holds what the run needs of the file
            from hetflow.executors.emulator.native_main import load_program
            program = load_program(args.elf, fetch=args.fetch)
        else:
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
        result = main_run = None
        if args.backend == "native":
            # numpy, numba and llvmlite stay unloaded when the disk cache holds the translation
            from hetflow.executors.emulator import native_main
            main_run = native_main.MainRun(program, data, translate=False)
        if args.backend in ("fast", "native") and args.interpreter_start and (main_run is None or main_run.code is None):
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
            if main_run is not None:
                t0 = time.perf_counter()
                main_run.translate()               # llvmlite loads only when the cache holds no translation
                result = _output(main_run.run(args.chunk_steps, args.max_steps), program, data, args.chunk_steps)
            else:
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
