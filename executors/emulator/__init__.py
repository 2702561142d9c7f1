"""hetflow's RV64IMA emulator: two backends, one output (issue 5, seed 002).

Public API (the engine's emulator phases call these)::

    program = load_elf("guest.elf")                        # ElfError on a bad file
    out = execute(program, backend="fast", input=b"...",   # or "reference"
                  chunk_steps=1 << 18, max_steps=1 << 28,  # GuestError on a failed run,
                  timeout=None)                            # TimeLimitExceeded past it (seconds)
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

import os
import sys

TYPE_CHECKING = False       # typing itself costs ``hetflow emulate`` 3 ms of its start

from .cache import cache_root  # noqa: E402 (where every compiled thing goes: the numba setting below needs it)

# numba's cache=True writes beside the module by default: into an installed
# package's folder (shared by every user, often read-only) or the checkout.
# Its locator reads the setting when a kernel is decorated, so this runs
# before fast_kernel can import numba; a user's own NUMBA_CACHE_DIR wins.
if not os.environ.get("NUMBA_CACHE_DIR"):
    os.environ["NUMBA_CACHE_DIR"] = os.path.join(cache_root(), "numba")
    if "numba" in sys.modules:          # imported before hetflow: its config has already read the environment
        sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]

from . import machine
from .elf import ElfError, Program, load_elf
from .machine import (DEFAULT_MAX_OUTPUT, DEFAULT_MAX_STEPS, INPUT_ADDR, MAX_OUTPUT_LIMIT, OUTPUT_ADDR, RAM_ADDR,
                      RAM_SIZE, STACK_TOP, UART_ADDR, EmulatorError, GuestError, GuestTrap, OutputLimitExceeded,
                      StepLimitExceeded, TimeLimitExceeded)
from .output import (BackendArtifacts, CountersChunkMetrics, EmuTrace, EmuTraceStart, ExecutionOutput,
                     ExecutorError, MemPlan, RomHistogram, RunnerFailed, RunnerHandleConsumed)

__all__ = [
    "AUTO", "BACKENDS", "auto_backend", "cache_root", "execute", "fast_compile_needed", "resolve_backend", "load_elf", "reexecute_chunk", "verify_chunk", "verify_min_traces",
    "plan_memory", "mem_ops_from_min_traces", "mem_plans_from_min_traces", "rom_histogram_from_min_traces",
    "Program", "ExecutionOutput", "BackendArtifacts", "EmuTrace", "EmuTraceStart", "CountersChunkMetrics",
    "MemPlan", "RomHistogram", "EmulatorError", "ElfError", "GuestError", "GuestTrap", "StepLimitExceeded", "TimeLimitExceeded",
    "OutputLimitExceeded", "ExecutorError", "RunnerFailed", "RunnerHandleConsumed",
    "witness_table", "instance_table", "plan", "plan_instances", "Instance", "WITNESS_COLUMNS", "STATE_MACHINES",
    "DEFAULT_SIZES", "DEFAULT_CHUNK_STEPS", "DEFAULT_MAX_STEPS", "DEFAULT_MAX_OUTPUT", "MAX_OUTPUT_LIMIT",
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
#: the default backend choice: :func:`auto_backend` picks one of BACKENDS
AUTO = "auto"


def auto_backend() -> tuple[str, str]:
    """The backend ``auto`` stands for on this machine, and why.

    Native where llvmlite is installed: translated code runs a guest about
    ten times the fast backend's rate and loads from the disk cache in
    milliseconds.  Its first translation of a program costs 0.4-9 s with
    the program's code (measured on the example guests), less than numba's
    first compile of the fast backend (15-60 s, once a machine) but more
    than loading numba's cached one (0.5-0.8 s), so one run of an uncached
    program can be slower than the fast backend's and every later run far
    faster; the emulate command's first 20,000 steps in the reference
    interpreter spare a short guest either cost.  Else the fast
    backend where numba is (numba itself needs llvmlite, so in practice
    where llvmlite is missing this is the reference), else the reference
    interpreter.  Looks for the packages without importing them (llvmlite's
    import costs 0.1 s, numba's 0.5 s)."""
    if _installed("llvmlite"):
        return "native", "llvmlite is installed"
    if _installed("numba"):
        return "fast", "numba is installed, llvmlite is not"
    return "reference", "neither llvmlite nor numba is installed"


def _installed(name: str) -> bool:
    """Whether the top-level package ``name`` would import: what ``importlib.util.find_spec`` asks the import
    system's finders, without importing importlib.util and contextlib (1 ms of ``hetflow emulate``)."""
    if name in sys.modules:
        return sys.modules[name] is not None          # None: marked absent, as find_spec reads it
    return any(f.find_spec(name, None) is not None for f in sys.meta_path if hasattr(f, "find_spec"))


def resolve_backend(backend: str) -> tuple[str, str]:
    """``(backend, reason)``: ``auto`` resolved by :func:`auto_backend`, any other name as given."""
    if backend == AUTO:
        return auto_backend()
    if backend not in BACKENDS:
        raise ValueError(f"unknown emulator backend {backend!r}; expected auto or one of {', '.join(BACKENDS)}")
    return backend, "chosen explicitly"


def fast_compile_needed() -> bool:
    """Whether the fast backend's interpreter must be compiled in this
    process (numba's disk cache holds no copy for this machine's CPU and
    the current source) rather than loaded.  Reads the cache index numba
    itself consults (about 0.1 ms); imports numba (0.5 s)."""
    from .fast_kernel import _run

    if _run.overloads:                               # already compiled or loaded in this process
        return False
    try:
        # the index is keyed by signature and target (CPU name and features); a stale
        # source stamp makes numba's own loader return an empty index
        target = _run.targetctx.codegen().magic_tuple()
        return not any(key[1] == target for key in _run._cache._cache_file._load_index())
    except AttributeError:          # numba's internals moved: whether an index file is there at all
        import glob

        pattern = os.path.join(glob.escape(os.environ.get("NUMBA_CACHE_DIR", "")), "**", "fast_kernel._run-*.nbi")
        return not glob.glob(pattern, recursive=True)


def _program(program: Program | str | Path) -> Program:
    return program if isinstance(program, Program) else load_elf(program)


def _main_run(run, *runners):
    """The main execution; when it fails, its runners are stopped (no one will await them)."""
    try:
        return run()
    except BaseException:
        for handle in runners:
            if handle is not None:
                handle.stop()
        raise


#: the most steps a chunk may take: its min trace (three words a step, on the native backend mapped at once) is
#: held whole, and the native backend reads the clock only between chunks
MAX_CHUNK_STEPS = 1 << 24


def execute(program: Program | str | Path, *, backend: str = "fast", input: bytes = b"",
            chunk_steps: int = DEFAULT_CHUNK_STEPS, max_steps: int = DEFAULT_MAX_STEPS,
            mem_plan_rows: int = 1 << 22, rom_histogram: bool = True, mem_plan_xp=None,
            runners: bool = True, timeout: float | None = None,
            max_output: int = DEFAULT_MAX_OUTPUT) -> ExecutionOutput:
    """Run a guest from its entry point and return the seed's ExecutionOutput.

    ``backend="auto"`` runs the one :func:`auto_backend` names (the CLI's
    and manifests' default); ``extra["backend"]`` and
    ``extra["backend_reason"]`` say which ran and why.

    ``backend="fast"`` (and ``"native"``, the same on translated code)
    starts the MO and RH runners in threads beside the
    main execution (set ``rom_histogram=False`` for a rank without the
    ROM state machine: RH is then absent and ``await_rom_histogram``
    returns None).  ``runners=False`` starts neither runner (for a caller
    that only wants the run itself, like ``hetflow emulate``): the fast
    backend's ``await_mem_plans`` then reports its handle as consumed.
    Runners no one awaits are stopped: by ``out.backend.stop()``, when
    the main execution fails, and at the process's exit at the latest
    (:mod:`.background`).
    ``timeout`` bounds the main execution's wall-clock time in seconds,
    from when the guest starts (the fast backend's interpreter compiled
    or loaded first, and its first slice of steps run whatever the clock says);
    ``max_output`` the bytes the guest may write (at most
    :data:`MAX_OUTPUT_LIMIT`).

    Raises
    ------
    ElfError: a bad file.   GuestTrap: a trap with no handler.
    StepLimitExceeded: ``max_steps`` steps without an exit.
    TimeLimitExceeded: ``timeout`` seconds without an exit.
    OutputLimitExceeded: a write that would take the output past ``max_output`` bytes.
    Each :class:`GuestError` holds the guest's ``stdout`` and ``pub_outs``
    as they were when it failed.
    """
    backend, backend_reason = resolve_backend(backend)
    if chunk_steps <= 0 or max_steps <= 0:
        raise ValueError("chunk_steps and max_steps must be positive")
    if chunk_steps > MAX_CHUNK_STEPS:
        raise ValueError(f"chunk_steps is at most {MAX_CHUNK_STEPS} (a chunk's trace is held whole), not {chunk_steps}")
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    if isinstance(max_output, bool) or not isinstance(max_output, int) or not 0 <= max_output <= MAX_OUTPUT_LIMIT:
        raise ValueError(f"max_output is a whole number of bytes from 0 to {MAX_OUTPUT_LIMIT}, not {max_output!r}")
    import time
    limits = {"deadline": None, "timeout": timeout, "max_output": max_output}

    def clock_starts() -> None:
        # the guest's time: after the program is read and the interpreter compiled or loaded from numba's cache
        # (a cold compile took minutes under load, and a run with a short timeout then ended with no step done)
        if timeout is not None:
            limits["deadline"] = time.monotonic() + timeout

    program = _program(program)
    input = bytes(input)
    extra = {}
    if runners and backend != "reference":
        from .memplan import plan_memory
        if mem_plan_xp is None:
            import numpy as mem_plan_xp
    if backend == "reference":
        from . import reference
        clock_starts()
        r = reference.run(program, input, chunk_steps, max_steps, **limits)
        artifacts = BackendArtifacts.reference()
    elif backend == "native":
        mo = rh = None
        clock_starts()  # its runners' too
        if runners:                    # translated code and the reference interpreter: no numba
            from . import native_runners
            image = native_runners.image_of(program, input, len(input))
            mo = native_runners.spawn(lambda: plan_memory(native_runners.mem_ops_runner(image, program, max_steps,
                                                                                        **limits),
                                                          mem_plan_rows, mem_plan_xp), name="MO")
            if rom_histogram:
                rh = native_runners.spawn(lambda: native_runners.rom_histogram_runner(image, program, max_steps,
                                                                                      **limits), name="RH")
        import numpy as np

        from . import native_main
        r = _main_run(lambda: native_main.run(program, input, chunk_steps, max_steps, **limits), mo, rh)
        # the same arrays as the other backends' (views of the main execution's buffers, not copies)
        r["traces"] = [EmuTrace(t.chunk_id, t.start_state, t.steps, np.frombuffer(t.mem_reads, dtype=np.uint64),
                                t.end) for t in r["traces"]]
        r["counts"] = np.array(r["counts"], dtype=np.int64).reshape(-1, len(r["counts"][0]))
        artifacts = BackendArtifacts("native", mo, rh)
        extra["translation"] = r["translation"]
    elif not runners:
        from . import fast
        fast.warm_up()
        clock_starts()
        r = fast.run(program, input, chunk_steps, max_steps, **limits)
        artifacts = BackendArtifacts.fast(None, None)
    else:
        from . import fast
        fast.warm_up()
        clock_starts()
        image = fast.image_of(program, input, len(input))     # shared by MT, MO and RH: each copies its memory
        mo = fast.spawn(lambda: plan_memory(fast.mem_ops_runner(image, program, max_steps, **limits), mem_plan_rows,
                                            mem_plan_xp), name="MO")
        rh = None
        if rom_histogram:
            rh = fast.spawn(lambda: fast.rom_histogram_runner(image, program, max_steps, **limits), name="RH")
        r = _main_run(lambda: fast.run(program, input, chunk_steps, max_steps, **limits), mo, rh)
        artifacts = BackendArtifacts.fast(mo, rh)
    return ExecutionOutput(
        min_traces=r["traces"], counters=CountersChunkMetrics(r["counts"]), pub_outs=r["pub_outs"],
        steps=r["steps"], backend=artifacts, exit_code=r["exit_code"], stdout=r["stdout"],
        end_reason=r["end_reason"], extra={"program": program.name, "input_size": len(input),
                                           "chunk_steps": chunk_steps, "backend": backend,
                                           "backend_reason": backend_reason, **extra},
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
