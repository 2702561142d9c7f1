"""Emulator phases in a run: how a run executes them, in two rounds.

What each phase takes and yields, and what the plan knows of it, are
declared in :mod:`hetflow.engine.manifest.phasedecl`.

Witness table
-------------
The activation a ``witness`` phase hands to executor stages is its table
itself: int64, shape ``(rows, 16)``, one row per step and the columns of
``witness.COLUMNS`` (64-bit register and memory values as their
two's-complement bit patterns; ``view(np.uint64)`` reads them unsigned),
128 bytes a step. The table is allocated once, when the chunk count is
known, and each chunk's task writes its rows into its own slice of it
(:func:`hetflow.executors.emulator.witness_table` with ``out=``), so
nothing assembles it: the ``phase:ID`` task hands a read-only view of the
table's bytes to the bridge, and a CPU executor imports it without a copy.

Rounds
------
A Dask graph is static, and the number of chunks is known only after
``execute`` has run.  A run therefore executes in two rounds on the same
thread pool: round 1 is one task per ``execute`` phase; round 2 is the
rest of the pipeline, lowered once the chunk counts are known: the other
phases (``phase:ID``), ``witness:ID:I`` per chunk with ``phase:ID``
handing on the table they filled, and the executor graph, whose bridges from a
phase (kind ``emulator output import``) import ``phase:ID``'s portable
activation on the consuming executor.  Phase results are host data held
by the run, never executor handles, so the handle refcounts and the
zero-live-activations guarantee are the executor graph's, unchanged.
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from typing import Any, Callable, Mapping

import numpy as np

from hetflow.engine.errors import StageFailure
from hetflow.engine.manifest.phasedecl import ARRAY_PHASE, PHASES, EmulatorDecl, PhaseDecl, article, execution_order
from hetflow.executors.base import Dtype, PortableActivation

__all__ = ["PhaseRunner", "witness_activation", "GuestExit", "phase_status"]


_compile_lock = threading.Lock()


def _translation_missing(program, data: bytes) -> bool:
    """Whether the native backend's disk cache lacks this program's translation
    (a look that loads the cached one if there, in milliseconds, without llvmlite)."""
    from hetflow.executors.emulator import native_main

    return native_main.MainRun(program, data, translate=False).code is None


def _announce_fast_compile() -> None:
    """Load the fast backend's interpreter before an execute phase runs it,
    saying on stderr when numba must compile it (27-58 s, once a machine):
    a pipeline silent for a minute looks hung.  Phases that run at the same
    time wait on one compile and one message."""
    from hetflow.executors.emulator import fast_compile_needed

    with _compile_lock:
        if not fast_compile_needed():
            return
        print("hetflow: compiling the fast backend's interpreter (first run on this machine; cached for later "
              "runs)...", file=sys.stderr, flush=True)
        from hetflow.executors.emulator import fast

        t0 = time.perf_counter()
        fast.warm_up()
        print(f"hetflow: compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)


def witness_activation(table: np.ndarray) -> PortableActivation:
    """The portable activation of a phase's int64 array (a witness table, an array field): a read-only view of its
    bytes, no copy.

    The table is made read-only too: the activation and every executor that
    adopts its bytes share them.

    >>> t = np.arange(32, dtype=np.int64).reshape(2, 16)
    >>> a = witness_activation(t)
    >>> a.dtype.value, a.shape.dims, np.shares_memory(a.to_array(), t) or a.bytes.obj is not None, t.flags.writeable
    ('int64', (2, 16), True, False)
    """
    from hetflow.executors.base import portable_of_own

    table = np.ascontiguousarray(table, dtype=np.int64)
    table.flags.writeable = False
    return portable_of_own(tuple(int(d) for d in table.shape), Dtype.int64, memoryview(table.reshape(-1).view(np.uint8)))


class GuestExit(ValueError):
    """An execute phase's guest exited with a code its emulator does not accept (``accept_exit``)."""

    def __init__(self, pid: str, emulator: str, out: Any, accepted: tuple[int, ...]):
        self.out = out
        signed = out.exit_code - (1 << 64) if out.exit_code >= 1 << 63 else None
        super().__init__(f"execute phase {pid!r} on emulator {emulator!r}: the guest exited with code "
                         f"{out.exit_code}" + (f" ({signed} as a signed number)" if signed is not None else "")
                         + f" after {out.steps} steps (accepted: "
                         f"{', '.join(map(str, accepted))}; list the codes it may exit with under "
                         f"`accept_exit:` on the emulator)" + _output_tail(out.stdout))


def _output_tail(stdout: bytes, limit: int = 400) -> str:
    """The end of what a failed guest printed, for its error message: often why it failed."""
    if not stdout:
        return ""
    text = stdout[-limit:].decode("utf-8", "replace").rstrip("\n")
    return f"; its output {'ends' if len(stdout) > limit else 'was'}: {text!r}"


def _read_input(decl: EmulatorDecl) -> bytes:
    if decl.input is None:
        return b""
    with open(decl.input, "rb") as f:
        return f.read()


class PhaseRunner:
    """Runs a manifest's phases for one run; results are host data keyed by phase id.

    ``event(kind, id, where, start, status, **extra)`` records a task
    (the executor runtime's event recorder, so phase tasks appear in the
    record's ``tasks`` like partitions do).
    """

    def __init__(self, emulators: Mapping[str, EmulatorDecl], phases: Mapping[str, PhaseDecl],
                 event: Callable[..., None]) -> None:
        self.emulators = dict(emulators)
        self.phases = dict(phases)
        self.event = event
        self.results: dict[str, Any] = {}
        self._programs: dict[str, Any] = {}
        self._inputs: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._tables: dict[str, np.ndarray] = {}  # witness phase -> the table its chunks fill
        self._arrays: dict[tuple[str, str], np.ndarray] = {}  # (phase, array field) -> its table, built once

    def close(self) -> None:
        """Stop the emulator runners whose plans or histogram no phase took: the run failed or was cancelled
        before their phases ran, and a runner left going would replay the whole program for no one."""
        for p in self.phases.values():
            out = self.results.get(p.id) if p.phase == "execute" else None
            if out is not None and hasattr(out, "backend"):
                out.backend.stop()

    def _program(self, emulator: str):
        from hetflow.executors.emulator import load_elf
        with self._lock:
            if emulator not in self._programs:
                decl = self.emulators[emulator]
                self._programs[emulator] = load_elf(decl.program, fetch=decl.fetch, isa=decl.isa, memory=decl.memory)
                self._inputs[emulator] = _read_input(self.emulators[emulator])
            return self._programs[emulator], self._inputs[emulator]

    def round1(self) -> dict:
        """The ``execute`` phases: a Dask graph of one task each."""
        return {f"phase:{p.id}": (self._run, p.id) for p in self.phases.values() if p.phase == "execute"}

    def round2(self) -> dict:
        """Every other phase, lowered now that each execute's chunk count is known."""
        dsk: dict[str, tuple] = {}
        for p in self.phases.values():
            if p.phase == "execute":
                continue
            if p.phase == "witness":
                from hetflow.executors.emulator import WITNESS_COLUMNS

                traces = self.results[p.inputs[0]].min_traces
                # the whole table, its pages untouched until each chunk's task writes its own rows
                self._tables[p.id] = np.empty((sum(int(t.steps) for t in traces), len(WITNESS_COLUMNS)), np.int64)
                keys = [f"witness:{p.id}:{i}" for i in range(len(traces))]
                row = 0
                for i, key in enumerate(keys):
                    dsk[key] = (self._witness_chunk, p.id, i, row)
                    row += int(traces[i].steps)
                dsk[f"phase:{p.id}"] = (self._witness_gather, p.id, keys)
            elif p.phase == ARRAY_PHASE:
                source = p.inputs[0]
                # its phase ran in round 1 (execute) or is a task of this round, which it waits for
                after = () if self.phases[source].phase == "execute" else (f"phase:{source}",)
                dsk[f"phase:{p.id}"] = (self._run_array, p.id, *after)
            else:
                dsk[f"phase:{p.id}"] = (self._run, p.id)
        return dsk

    def _run_array(self, pid: str, *_after: Any) -> PortableActivation:
        """An array field's node: the field's table built from its phase's result, handed to its bridges."""
        source, field = self.phases[pid].inputs[0], self.phases[pid].args["field"]
        portable = self._timed("phase", pid, pid, lambda: witness_activation(self.array(source, field)))
        self.results[pid] = {"portable": portable}
        return portable

    def array(self, pid: str, field: str) -> np.ndarray:
        """Array field ``field`` of phase ``pid`` (int64, C-contiguous, its columns those of :data:`PHASES`);
        built once, and shared by the stages that read it and an ``outputs:`` entry that persists it."""
        with self._lock:
            table = self._arrays.get((pid, field))
        if table is not None:
            return table
        p, value = self.phases[pid], self.results[pid]
        if (p.phase, field) == ("execute", "registers"):
            from hetflow.executors.emulator.output import registers_array
            end = self._end_state(p, value)
            table = registers_array(end.pc, end.regs)
        elif p.phase == "execute":
            from hetflow.executors.emulator.output import min_trace_array
            words, index = min_trace_array(value.min_traces)
            with self._lock:  # one build serves both fields; a second thread's build is dropped
                words = self._arrays.setdefault((pid, "min_trace"), words)
                index = self._arrays.setdefault((pid, "min_trace_index"), index)
            table = words if field == "min_trace" else index
        elif (p.phase, field) == ("mem-plans", "table"):
            from hetflow.executors.emulator.memplan import mem_plan_table
            table = mem_plan_table(value)
        elif (p.phase, field) == ("mem-plans", "rows"):
            from hetflow.executors.emulator.memplan import mem_rows
            table = mem_rows(self._mem_ops(p))
        elif (p.phase, field) == ("plan", "instances_table"):
            from hetflow.executors.emulator.output import instances_array
            table = instances_array(value)
        else:
            raise KeyError(f"{p.phase} phase {pid!r} has no array field {field!r}")
        with self._lock:
            return self._arrays.setdefault((pid, field), np.ascontiguousarray(table, dtype=np.int64))

    def _fail(self, pid: str, message: str) -> Exception:
        return StageFailure(f"phase:{pid}", pid, message)

    def _message(self, pid: str, e: Exception) -> str:
        """A phase's error, with what its guest printed and the steps it ran when the guest failed."""
        from hetflow.executors.emulator import GuestError
        if not isinstance(e, GuestError):
            return str(e)
        p = self.phases[pid]
        return (f"{p.phase} phase {pid!r} on emulator {p.emulator!r}: {e} (steps done: {e.step})"
                + _output_tail(e.stdout))

    def _timed(self, kind: str, id: str, pid: str, call: Callable[[], Any], **extra: Any) -> Any:
        from hetflow.executors.emulator import EmulatorError
        where = f"emulator:{self.phases[pid].emulator}"
        start = time.time()
        self.event(kind, id, where, start, "started")
        try:
            value = call()
        except (EmulatorError, ValueError, OSError) as e:
            message = self._message(pid, e)
            self.event(kind, id, where, start, "failed", node=pid, error=message)
            raise self._fail(pid, message) from None
        self.event(kind, id, where, start, "succeeded", nodes=[pid], phase=self.phases[pid].phase, **extra)
        return value

    def _run(self, pid: str) -> str:
        p = self.phases[pid]
        value = self._timed("phase", pid, pid, lambda: getattr(self, "_" + p.phase.replace("-", "_"))(p))
        self.results[pid] = value
        return pid

    def _consumers(self, pid: str, phase: str) -> list[PhaseDecl]:
        return [q for q in self.phases.values() if q.phase == phase and pid in q.inputs]

    def _execute(self, p: PhaseDecl):
        from hetflow.executors.emulator import execute
        decl = self.emulators[p.emulator]
        program, data = self._program(p.emulator)
        plans = self._consumers(p.id, "mem-plans")
        rows = int(plans[0].args.get("rows_per_plan", 1 << 22)) if plans else 1 << 22
        runners = bool(plans or self._consumers(p.id, "rom-histogram"))
        if decl.backend == "fast":      # native's runners and replay run translated code, without numba
            _announce_fast_compile()
        translating = decl.backend == "native" and _translation_missing(program, data)
        if translating:
            print(f"hetflow: translating {program.name}'s code to host code with LLVM (not in the disk cache; "
                  "cached for later runs)...", file=sys.stderr, flush=True)
        out = execute(program, backend=decl.backend, input=data, chunk_steps=decl.chunk_steps,
                      max_steps=decl.max_steps, mem_plan_rows=rows,
                      rom_histogram=bool(self._consumers(p.id, "rom-histogram")),
                      runners=runners, timeout=decl.timeout, max_output=decl.max_output)
        if translating:
            print(f"hetflow: translated in {out.extra['translation']['seconds']:.2f} s", file=sys.stderr, flush=True)
        # a0 is unsigned: a negative code accepts the exit of that signed number (-1: exit(-1))
        if out.exit_code not in {code % (1 << 64) for code in decl.accept_exit}:
            # a guest that exits nonzero failed: its witness would prove a failed run, so nothing after it runs,
            # and its runners' plans and histogram will not be awaited
            out.backend.stop()
            raise GuestExit(p.id, decl.name, out, decl.accept_exit)
        return out

    def _mem_plans(self, p: PhaseDecl):
        from hetflow.executors.emulator import mem_plans_from_min_traces
        out = self.results[p.inputs[0]]
        rows = int(p.args.get("rows_per_plan", 1 << 22))
        if self.emulators[p.emulator].backend in ("fast", "native"):
            plans, _ = out.backend.await_mem_plans()
        else:
            program, data = self._program(p.emulator)
            plans, _ = mem_plans_from_min_traces(program, out.min_traces, len(data), rows)
        return plans

    def _rom_histogram(self, p: PhaseDecl):
        from hetflow.executors.emulator import rom_histogram_from_min_traces
        out = self.results[p.inputs[0]]
        if self.emulators[p.emulator].backend in ("fast", "native"):
            return out.backend.await_rom_histogram()
        program, data = self._program(p.emulator)
        return rom_histogram_from_min_traces(program, out.min_traces, len(data))

    def _plan(self, p: PhaseDecl):
        from hetflow.executors.emulator import DEFAULT_SIZES, plan_instances
        sizes = p.args.get("sizes") or DEFAULT_SIZES
        return plan_instances(self.results[p.inputs[0]].counters, {k: int(v) for k, v in sizes.items()})

    def _witness_chunk(self, pid: str, i: int, row: int | None = None) -> np.ndarray:
        """Chunk ``i``'s rows, written into the run's table from ``row`` on (a table of its own without one)."""
        from hetflow.executors.emulator import witness_table
        p = self.phases[pid]
        program, data = self._program(p.emulator)
        trace = self.results[p.inputs[0]].min_traces[i]
        table = self._tables.get(pid)
        out = None if table is None or row is None else table[row:row + int(trace.steps)]
        return self._timed("witness", f"{pid}:{i}", pid, lambda: witness_table(
            program, trace, input_size=len(data), backend=self.emulators[p.emulator].backend, out=out), chunk=i)

    def _witness_gather(self, pid: str, tables: list[np.ndarray]) -> PortableActivation:
        """The witness phase's activation: the table its chunks filled in place, or, from chunks that ran in
        other processes (a cluster), their tables copied into one; a task of the record either way."""
        return self._timed("phase", pid, pid, lambda: self._assemble(pid, tables))

    def _assemble(self, pid: str, tables: list[np.ndarray]) -> PortableActivation:
        from hetflow.executors.emulator import WITNESS_COLUMNS
        table = self._tables.pop(pid, None)
        if table is None or not all(t.base is table for t in tables):
            rows = sum(len(t) for t in tables)
            if table is None or len(table) != rows:
                table = np.empty((rows, len(WITNESS_COLUMNS)), np.int64)
            row = 0
            for t in tables:
                table[row:row + len(t)] = t
                row += len(t)
        portable = witness_activation(table)
        self.results[pid] = {"rows": int(table.shape[0]), "chunks": len(tables), "portable": portable}
        return portable

    def fields(self, pid: str) -> dict[str, Any]:
        """A phase's JSON fields (its array fields are :meth:`array`'s)."""
        p = self.phases[pid]
        v = self.results[pid]
        if p.phase == "execute":
            return {"steps": int(v.steps), "exit_code": int(v.exit_code),
                    "pub_outs": [[int(i), int(x)] for i, x in v.pub_outs],
                    "stdout": v.stdout.decode("utf-8", "replace"), "chunks": len(v.min_traces),
                    "end_reason": v.end_reason, "counters": v.counters.totals()}
        if p.phase == "mem-plans":
            return {"plans": [{"segment_id": m.segment_id, "first_row": m.first_row, "count": m.count,
                               "first": list(m.first), "last": list(m.last), "is_last": m.is_last} for m in v],
                    "count": len(v)}
        if p.phase == "rom-histogram":
            return {"steps": int(v.steps), "pcs": [int(x) for x in v.pcs], "counts": [int(x) for x in v.counts]}
        if p.phase == "plan":
            return {"instances": [i.to_json() for i in v], "count": len(v)}
        return {"rows": v["rows"], "chunks": v["chunks"]}

    def _mem_ops(self, p: PhaseDecl) -> np.ndarray:
        """The run's memory operations in execution order, logged anew: the MO runner keeps only the plans.

        Fast and native run their MO runner once more (as fast as their
        ``execute``, up to the steps the guest ran); the reference path
        replays every chunk from its min trace, as its plans do.
        """
        program, data = self._program(p.emulator)
        out = self.results[p.inputs[0]]
        backend = self.emulators[p.emulator].backend
        if backend == "reference":
            from hetflow.executors.emulator import mem_ops_from_min_traces
            return mem_ops_from_min_traces(program, out.min_traces, len(data))
        if backend == "native":
            from hetflow.executors.emulator import native_runners as running
        else:
            from hetflow.executors.emulator import fast as running
        return running.mem_ops_runner(running.image_of(program, data, len(data)), program, int(out.steps),
                                      max_output=self.emulators[p.emulator].max_output)

    def _end_state(self, p: PhaseDecl, out: Any) -> Any:
        """The guest's state when it ended (pc, x0..x31, priv), from a replay of its last chunk (no backend keeps
        it; the replay costs at most ``chunk_steps`` steps)."""
        program, data = self._program(p.emulator)
        last = out.min_traces[-1]
        backend = self.emulators[p.emulator].backend
        if backend == "reference":
            from hetflow.executors.emulator import reference as replaying
        elif backend == "native":   # translated code: a native run never loads numba for its registers
            from hetflow.executors.emulator import native as replaying
        else:
            from hetflow.executors.emulator import fast as replaying
        end, _, _ = replaying.replay_chunk(program, last, len(data))
        return end

    def output(self, pid: str, fieldname: str | None) -> tuple[Any, str]:
        """The JSON value an ``outputs:`` entry persists and its digest."""
        data = self.fields(pid)
        value = data if fieldname is None else data[fieldname]
        text = json.dumps(value, sort_keys=True, separators=(",", ":"))
        return value, "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def phase_status(runner: "PhaseRunner", events: list[dict]) -> dict[str, dict]:
    """Each phase's entry in the run record: status, emulator, its tasks, the error of a failed one."""
    out: dict[str, dict] = {}
    for pid, p in runner.phases.items():
        mine = [e for e in events if e["kind"] in ("phase", "witness") and (e.get("node") == pid or pid in e.get("nodes", ()))]
        bad = next((e for e in mine if e["status"] == "failed"), None)
        status = "failed" if bad is not None else "succeeded" if pid in runner.results else "not run"
        out[pid] = {"phase": p.phase, "emulator": p.emulator, "status": status, "tasks": len(mine),
                    **({"error": bad.get("error")} if bad is not None else {})}
    return out
