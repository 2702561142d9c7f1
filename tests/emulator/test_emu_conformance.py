"""One conformance suite for the emulator-backend contract (seed 002):
every test runs on every backend (the ``backend`` fixture)."""

import hashlib
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pytest

from hetflow.executors.emulator import (BackendArtifacts, EmulatorError, GuestTrap, StepLimitExceeded, execute,
                                        mem_plans_from_min_traces, reexecute_chunk, rom_histogram_from_min_traces,
                                        verify_min_traces)
from hetflow.executors.emulator.isa import CLASSES

from _guests import ISA_TESTS, guest, run

ALL = ["fib", "sort", "sha256"] + ISA_TESTS


@pytest.mark.parametrize("name", ISA_TESTS)
def test_isa_programs_pass(backend, name):
    out = run(name, backend)
    assert (out.end_reason, out.exit_code) == ("tohost", 0), f"{name}: test {out.exit_code >> 0} failed"


def test_fib(backend):
    out = run("fib", backend)
    a, b = 0, 1
    for _ in range(90):
        a, b = b, a + b
    assert out.pub_outs[0][1] | out.pub_outs[1][1] << 32 == a % 2**64
    assert out.exit_code == 0 and out.end_reason == "exit"
    assert out.stdout == b"fib done\n"
    assert [i for i, _ in out.pub_outs] == list(range(64))


def test_fib_input(backend):
    out = run("fib", backend, input=bytes([10]))
    assert out.pub_outs[0][1] == 55


def test_sort(backend):
    out = run("sort", backend, chunk_steps=50_000)
    assert out.exit_code == 0 and out.pub_outs[0][1] == 1


@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(55)), bytes(range(56)), bytes(range(64)), b"x" * 200])
def test_sha256_matches_hashlib(backend, data):
    out = run("sha256", backend, input=data, chunk_steps=1000)
    digest = b"".join(v.to_bytes(4, "big") for _, v in out.pub_outs[:8])
    assert digest.hex() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("other", ["fast", "native"])
@pytest.mark.parametrize("name", ALL)
def test_backends_identical(name, other):
    chunk = 50_000 if name == "sort" else 97
    ref, fst = run(name, "reference", chunk_steps=chunk), run(name, other, chunk_steps=chunk)
    assert ref.same_result(fst) == []
    assert len(ref.min_traces) > 1


@pytest.mark.parametrize("name", ["fib", "isa_smc", "isa_trap", "isa_amo", "isa_mem", "isa_rvc"])
def test_min_traces_reexecute(backend, name):
    out = run(name, backend)
    for replay in ("reference", "fast", "native"):
        verify_min_traces(guest(name), out, backend=replay)
    assert out.counters.table.sum() == out.steps
    assert sum(t.steps for t in out.min_traces) == out.steps
    assert [t.end for t in out.min_traces] == [False] * (len(out.min_traces) - 1) + [True]
    assert set(out.counters.totals()) == set(CLASSES)


def test_writable_code_fetches_are_recorded(backend):
    # isa_smc runs from a writable segment: every fetch is a recorded read
    out = run("isa_smc", backend)
    assert sum(len(t.mem_reads) for t in out.min_traces) >= out.steps


def test_tampered_min_trace_is_detected(backend):
    out = run("fib", backend)
    t = out.min_traces[0]
    short = type(t)(t.chunk_id, t.start_state, t.steps, t.mem_reads[:-1], t.end) if len(t.mem_reads) else None
    bad = type(t)(t.chunk_id, t.start_state, t.steps, np.append(t.mem_reads, np.uint64(0)), t.end)
    for replay in ("reference", "fast", "native"):
        with pytest.raises(EmulatorError):
            reexecute_chunk(guest("fib"), bad, backend=replay)
        if short is not None:
            with pytest.raises(EmulatorError):
                reexecute_chunk(guest("fib"), short, backend=replay)


def test_parallel_reexecution_in_threads():
    out = run("sort", "fast", chunk_steps=50_000)
    p = guest("sort")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda t: reexecute_chunk(p, t, backend="fast"), out.min_traces))
    for i, (state, counts) in enumerate(results[:-1]):
        assert state == out.min_traces[i + 1].start_state
        assert counts == out.counters.chunk(i)


# ---- failures

def test_store_to_read_only_segment_faults(backend):
    with pytest.raises(GuestTrap) as e:
        execute(guest("fault_store"), backend=backend)
    assert (e.value.cause, e.value.pc, e.value.insn) == (7, 0x80000008, 0x0002A023)
    assert str(e.value) == ("unhandled trap: store/AMO access fault (mcause 7, mtval 0x80000000) "
                            "at pc 0x80000008 (_start+0x8), instruction 0x0002a023 (step 2)")


def test_illegal_instruction_without_handler(backend):
    with pytest.raises(GuestTrap, match=r"illegal instruction .* at pc 0x80000004 \(_start\+0x4\), instruction 0x00000000"):
        execute(guest("illegal"), backend=backend)


def test_step_limit(backend):
    with pytest.raises(StepLimitExceeded, match="step limit reached: 5000 steps"):
        execute(guest("spin"), backend=backend, max_steps=5000, chunk_steps=1000)


# ---- BackendArtifacts: the seed's semantics

def test_reference_artifacts_are_empty_at_once():
    out = run("fib", "reference")
    for _ in range(2):
        assert out.backend.await_mem_plans() == ([], None)
        assert out.backend.await_rom_histogram() is None


def test_fast_artifacts_once_and_equal_to_reference_path():
    p = guest("isa_smc")
    out = execute(p, backend="fast", chunk_steps=97, mem_plan_rows=64)
    ref = run("isa_smc", "reference")
    plans, device_bytes = out.backend.await_mem_plans()
    assert device_bytes is None
    assert (plans, None) == mem_plans_from_min_traces(p, ref.min_traces, rows_per_plan=64)
    assert len(plans) > 1 and plans[-1].is_last and not plans[0].is_last
    assert sum(pl.count for pl in plans) == plans[-1].first_row + plans[-1].count
    keys = [pl.first for pl in plans] + [pl.last for pl in plans]
    assert all(pl.first <= pl.last for pl in plans) and sorted(keys) == sorted(keys)
    with pytest.raises(EmulatorError, match="already consumed"):
        out.backend.await_mem_plans()
    hist = out.backend.await_rom_histogram()
    assert hist == rom_histogram_from_min_traces(p, ref.min_traces)
    assert int(hist.counts.sum()) == hist.steps == out.steps
    assert out.backend.await_rom_histogram() is None


def test_fast_without_rom_histogram():
    out = execute(guest("fib"), backend="fast", rom_histogram=False)
    assert out.backend.await_rom_histogram() is None
    assert out.backend.await_mem_plans()[0]


def _done(value=None, error=None):
    f = Future()
    f.set_exception(error) if error else f.set_result(value)
    return f


def test_seed_mo_runner_error_propagates():
    b = BackendArtifacts.fast(_done(error=RuntimeError("boom")), None)
    with pytest.raises(EmulatorError) as e:
        b.await_mem_plans()
    assert "MO runner failed" in str(e.value) and "boom" in str(e.value)


def test_seed_canned_plans_and_double_take():
    b = BackendArtifacts.fast(_done(([], None)), None)
    assert b.await_mem_plans() == ([], None)
    with pytest.raises(EmulatorError, match="already consumed"):
        b.await_mem_plans()


def test_seed_rom_histogram_some_then_none_and_absent():
    b = BackendArtifacts.fast(None, _done("hist"))
    assert b.await_rom_histogram() == "hist"
    assert b.await_rom_histogram() is None
    assert BackendArtifacts.fast(None, None).await_rom_histogram() is None
    with pytest.raises(EmulatorError, match="RH runner failed: bad"):
        BackendArtifacts.fast(None, _done(error=ValueError("bad"))).await_rom_histogram()
