"""hetflow's RV64IMA emulator: two backends, one output (issue 5, seed 002).

Public API (the engine's emulator phases call these)::

    program = load_elf("guest.elf")                        # ElfError on a bad file
    out = execute(program, backend="fast", input=b"...",   # or "reference"
                  chunk_steps=1 << 18, max_steps=1 << 32)  # GuestError on a failed run
    out.min_traces, out.counters, out.pub_outs, out.steps, out.backend
    plans, device_bytes = out.backend.await_mem_plans()    # once; "already consumed" after
    hist = out.backend.await_rom_histogram()               # once, then None
    end_state, counts = reexecute_chunk(program, out.min_traces[i])
    verify_min_traces(program, out)                        # every chunk, from its min trace alone
    table = witness_table(program, out.min_traces[i], input_size=len(input))  # one Dask task per chunk
    instances = plan_instances(out.counters, {"main": 1 << 22, "mem": 1 << 22})
    rows = instance_table(instances[k], {c: table_of[c] for c in instances[k].chunks})

Witness columns, state machines and the packing rule: :mod:`.witness`.

On the reference path ``await_*`` return ``([], None)``/``None`` (the
seed's Rust variant); the same plans and histogram come from
``mem_plans_from_min_traces`` / ``rom_histogram_from_min_traces``.

The machine, memory map and guest ABI (how a guest ends, emits public
outputs and prints) are documented in :mod:`.machine`; the ISA table in
:mod:`.isa`; the backends in :mod:`.reference` and :mod:`.fast`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import machine
from .elf import ElfError, Program, load_elf
from .machine import (INPUT_ADDR, OUTPUT_ADDR, RAM_ADDR, RAM_SIZE, STACK_TOP, UART_ADDR, EmulatorError,
                      GuestError, GuestTrap, StepLimitExceeded)
from .output import (BackendArtifacts, CountersChunkMetrics, EmuTrace, EmuTraceStart, ExecutionOutput,
                     ExecutorError, MemPlan, RomHistogram, RunnerFailed, RunnerHandleConsumed)

__all__ = [
    "BACKENDS", "execute", "load_elf", "reexecute_chunk", "verify_chunk", "verify_min_traces",
    "plan_memory", "mem_ops_from_min_traces", "mem_plans_from_min_traces", "rom_histogram_from_min_traces",
    "Program", "ExecutionOutput", "BackendArtifacts", "EmuTrace", "EmuTraceStart", "CountersChunkMetrics",
    "MemPlan", "RomHistogram", "EmulatorError", "ElfError", "GuestError", "GuestTrap", "StepLimitExceeded",
    "ExecutorError", "RunnerFailed", "RunnerHandleConsumed",
    "witness_table", "instance_table", "plan", "plan_instances", "Instance", "WITNESS_COLUMNS", "STATE_MACHINES",
    "DEFAULT_SIZES",
    "INPUT_ADDR", "OUTPUT_ADDR", "RAM_ADDR", "RAM_SIZE", "STACK_TOP", "UART_ADDR", "machine",
]

# The memory planner and the witness tables load numpy: they load on first
# use (PEP 562), so ``hetflow emulate`` starts without numpy.
_LAZY = {**dict.fromkeys(("mem_ops_from_min_traces", "mem_plans_from_min_traces", "plan_memory",
                          "rom_histogram_from_min_traces"), "memplan"),
         **dict.fromkeys(("DEFAULT_SIZES", "STATE_MACHINES", "Instance", "instance_table", "plan", "plan_instances",
                          "witness_table", "WITNESS_COLUMNS"), "witness")}


def __getattr__(name: str):
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(f"{__name__}.{home}"), "COLUMNS" if name == "WITNESS_COLUMNS" else name)
    globals()[name] = value
    return value


if TYPE_CHECKING:
    from pathlib import Path

BACKENDS = ("reference", "fast", "native")
DEFAULT_CHUNK_STEPS = 1 << 18
DEFAULT_MAX_STEPS = 1 << 32


def _program(program: Program | str | Path) -> Program:
    return program if isinstance(program, Program) else load_elf(program)


def execute(program: Program | str | Path, *, backend: str = "fast", input: bytes = b"",
            chunk_steps: int = DEFAULT_CHUNK_STEPS, max_steps: int = DEFAULT_MAX_STEPS,
            mem_plan_rows: int = 1 << 22, rom_histogram: bool = True, mem_plan_xp=None,
            runners: bool = True) -> ExecutionOutput:
    """Run a guest from its entry point and return the seed's ExecutionOutput.

    ``backend="fast"`` (and ``"native"``, the same on translated code)
    starts the MO and RH runners in threads beside the
    main execution (set ``rom_histogram=False`` for a rank without the
    ROM state machine: RH is then absent and ``await_rom_histogram``
    returns None).  ``runners=False`` starts neither runner (for a caller
    that only wants the run itself, like ``hetflow emulate``): the fast
    backend's ``await_mem_plans`` then reports its handle as consumed.

    Raises
    ------
    ElfError: a bad file.   GuestTrap: a trap with no handler.
    StepLimitExceeded: ``max_steps`` steps without an exit.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown emulator backend {backend!r}; expected one of {', '.join(BACKENDS)}")
    if chunk_steps <= 0 or max_steps <= 0:
        raise ValueError("chunk_steps and max_steps must be positive")
    program = _program(program)
    input = bytes(input)
    extra = {}
    if runners and backend != "reference":
        from .memplan import plan_memory
        if mem_plan_xp is None:
            import numpy as mem_plan_xp
    if backend == "reference":
        from . import reference
        r = reference.run(program, input, chunk_steps, max_steps)
        artifacts = BackendArtifacts.reference()
    elif backend == "native":
        mo = rh = None
        if runners:                    # the runners run on the fast backend's machine (numba) with translated code
            from . import fast, native
            image = fast.image_of(program, input, len(input))
            mo = fast.spawn(lambda: plan_memory(native.mem_ops_runner(image, program, max_steps), mem_plan_rows,
                                                mem_plan_xp))
            if rom_histogram:
                rh = fast.spawn(native.rom_histogram_runner, image, program, max_steps)
        import numpy as np

        from . import native_main
        r = native_main.run(program, input, chunk_steps, max_steps)
        # the same arrays as the other backends' (views of the main execution's buffers, not copies)
        r["traces"] = [EmuTrace(t.chunk_id, t.start_state, t.steps, np.frombuffer(t.mem_reads, dtype=np.uint64),
                                t.end) for t in r["traces"]]
        r["counts"] = np.array(r["counts"], dtype=np.int64).reshape(-1, len(r["counts"][0]))
        artifacts = BackendArtifacts("native", mo, rh)
        extra["translation"] = r["translation"]
    elif not runners:
        from . import fast
        r = fast.run(program, input, chunk_steps, max_steps)
        artifacts = BackendArtifacts.fast(None, None)
    else:
        from . import fast
        image = fast.image_of(program, input, len(input))     # shared by MT, MO and RH: each copies its memory
        mo = fast.spawn(lambda: plan_memory(fast.mem_ops_runner(image, program, max_steps), mem_plan_rows,
                                            mem_plan_xp))
        rh = None
        if rom_histogram:
            rh = fast.spawn(fast.rom_histogram_runner, image, program, max_steps)
        r = fast.run(program, input, chunk_steps, max_steps)
        artifacts = BackendArtifacts.fast(mo, rh)
    return ExecutionOutput(
        min_traces=r["traces"], counters=CountersChunkMetrics(r["counts"]), pub_outs=r["pub_outs"],
        steps=r["steps"], backend=artifacts, exit_code=r["exit_code"], stdout=r["stdout"],
        end_reason=r["end_reason"], extra={"program": program.name, "input_size": len(input),
                                           "chunk_steps": chunk_steps, "backend": backend, **extra},
    )


def reexecute_chunk(program: Program | str | Path, trace: EmuTrace, *, input_size: int = 0,
                    backend: str = "reference") -> tuple[EmuTraceStart, dict[str, int]]:
    """Re-execute one chunk from its min trace alone (no memory image).

    Returns the state after the chunk's last step and the chunk's
    counters.  The fast backend releases the GIL, so chunks re-executed
    from several threads run in parallel.
    """
    program = _program(program)
    if backend == "fast":
        from . import fast
        state, counts, _ = fast.replay_chunk(program, trace, input_size)
    elif backend == "native":
        from . import native
        state, counts, _ = native.replay_chunk(program, trace, input_size)
    elif backend == "reference":
        from . import reference
        state, counts, _ = reference.replay_chunk(program, trace, input_size)
    else:
        raise ValueError(f"unknown emulator backend {backend!r}")
    from .isa import CLASSES
    return state, {c: int(v) for c, v in zip(CLASSES, counts)}


def verify_chunk(program: Program | str | Path, min_traces: list[EmuTrace], i: int, *, input_size: int = 0,
                 backend: str = "reference") -> dict[str, int]:
    """Re-execute chunk ``i`` and check it ends in the state chunk ``i+1``
    starts from (the last chunk must end the program).  Returns its counters."""
    state, counts = reexecute_chunk(program, min_traces[i], input_size=input_size, backend=backend)
    if i + 1 < len(min_traces):
        expected = min_traces[i + 1].start_state
        if state != expected:
            fields = [f for f in ("pc", "step", "priv", "regs", "csrs", "reservation")
                      if getattr(state, f) != getattr(expected, f)]
            raise EmulatorError(f"chunk {i}: re-execution ends in a state that differs from chunk {i + 1}'s "
                                f"start in {', '.join(fields)}")
    elif not min_traces[i].end:
        raise EmulatorError(f"chunk {i} is the last min trace but does not end the program")
    return counts


def verify_min_traces(program: Program | str | Path, out: ExecutionOutput, *, input_size: int | None = None,
                      backend: str = "reference") -> None:
    """Re-execute every chunk; check the chain of states and that the
    re-executed counters equal ``out.counters`` chunk by chunk."""
    program = _program(program)
    if input_size is None:
        input_size = out.extra.get("input_size", 0)
    if sum(t.steps for t in out.min_traces) != out.steps:
        raise EmulatorError("min trace steps do not sum to the run's steps")
    for i in range(len(out.min_traces)):
        counts = verify_chunk(program, out.min_traces, i, input_size=input_size, backend=backend)
        if counts != out.counters.chunk(i):
            raise EmulatorError(f"chunk {i}: re-executed counters {counts} differ from {out.counters.chunk(i)}")
