"""Witness tables (one chunk re-executed from its min trace into rows) and
instance planning (ZisK's plan(counts, size))."""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hetflow.executors.emulator import EmulatorError, fast, isa
from hetflow.executors.emulator.witness import (COLUMNS, DEFAULT_SIZES, STATE_MACHINES, instance_table, plan,
                                                plan_instances, witness_table)

from _guests import ISA_TESTS, guest, run

C = {name: i for i, name in enumerate(COLUMNS)}
GUESTS_WITH_INPUT = [("fib", b""), ("sha256", b"witness me" * 9), ("sort", b"")] + [(n, b"") for n in ISA_TESTS]


def tables(name, backend, data=b"", chunk_steps=97):
    out = run(name, backend, input=data, chunk_steps=chunk_steps)
    p = guest(name)
    return out, [witness_table(p, t, input_size=len(data), backend=backend) for t in out.min_traces]


@pytest.mark.parametrize("name, data", GUESTS_WITH_INPUT)
def test_both_backends_give_identical_tables(name, data):
    chunk = 50_000 if name == "sort" else 97
    _, ref = tables(name, "reference", data, chunk)
    _, fst = tables(name, "fast", data, chunk)
    assert len(ref) == len(fst) > 1
    for i, (a, b) in enumerate(zip(ref, fst)):
        assert a.dtype == b.dtype == np.int64 and a.shape == b.shape == (len(a), len(COLUMNS))
        assert np.array_equal(a, b), f"chunk {i} differs"


@pytest.mark.parametrize("name", ["fib", "isa_smc", "isa_trap", "isa_amo", "isa_mem"])
def test_chunked_tables_reproduce_the_sequential_trace(backend, name):
    out, chunked = tables(name, backend)
    whole_out = run(name, backend, chunk_steps=1 << 20)
    assert len(whole_out.min_traces) == 1
    (whole,) = [witness_table(guest(name), whole_out.min_traces[0], backend=backend)]
    joined = np.concatenate(chunked)
    assert np.array_equal(joined, whole)
    assert np.array_equal(joined[:, C["step"]], np.arange(out.steps))
    assert np.array_equal(joined[:-1, C["next_pc"]], joined[1:, C["pc"]])
    for i, t in enumerate(chunked):
        assert np.array_equal(np.bincount(t[:, C["cls"]], minlength=len(isa.CLASSES)), out.counters.table[i])


def test_columns_mean_what_the_docstring_says():
    _, ts = tables("isa_amo", "reference")
    t = np.concatenate(ts)
    op = t[:, C["op"]]
    amo = op == isa.BY_NAME["amoadd.d"]
    assert amo.any() and (t[amo, C["mem_op"]] == 3).all() and (t[amo, C["mem_width"]] == 8).all()
    assert np.array_equal(t[amo, C["mem_write"]], t[amo, C["mem_read"]] + t[amo, C["rs2_value"]])
    sd = op == isa.BY_NAME["sd"]
    assert (t[sd, C["mem_op"]] == 2).all() and (t[sd, C["rd"]] == 0).all()
    assert np.array_equal(t[sd, C["mem_write"]], t[sd, C["rs2_value"]])
    assert np.array_equal(t[sd, C["mem_addr"]], t[sd, C["rs1_value"]] + [isa.decode(int(w) & 0xFFFFFFFF).imm
                                                                            for w in t[sd, C["insn"]]])
    sc = (op == isa.BY_NAME["sc.d"]) | (op == isa.BY_NAME["sc.w"])
    failed = sc & (t[:, C["rd_value"]] != 0)
    assert failed.any() and (t[failed, C["mem_op"]] == 0).all()
    assert (t[sc & ~failed & (t[:, C["rd"]] != 0), C["mem_op"]] == 2).all()


def test_trapped_steps_record_the_cause_and_no_effects():
    _, ts = tables("isa_trap", "fast")
    t = np.concatenate(ts)
    trapped = t[:, C["trap"]] >= 0
    assert set(t[trapped, C["trap"]]) >= {2, 3, 11}
    assert (t[trapped, C["rd"]] == 0).all() and (t[trapped, C["mem_op"]] == 0).all()
    assert (t[~trapped, C["trap"]] == -1).all()


def test_sha256_reads_its_input_from_the_input_region():
    data = b"witness me" * 9
    _, ts = tables("sha256", "fast", data, 97)
    t = np.concatenate(ts)
    reads = t[(t[:, C["mem_op"]] == 1) & (t[:, C["mem_addr"]] >= 0x4000_0008)
              & (t[:, C["mem_addr"]] < 0x4000_0008 + len(data)) & (t[:, C["mem_width"]] == 1)]
    got = {int(a) - 0x4000_0008: int(v) for a, v in reads[:, [C["mem_addr"], C["mem_read"]]]}
    assert got and all(data[i] == v for i, v in got.items())


def test_tampered_trace_is_rejected(backend):
    out = run("fib", backend)
    t = out.min_traces[0]
    bad = type(t)(t.chunk_id, t.start_state, t.steps, np.append(t.mem_reads, np.uint64(0)), t.end)
    with pytest.raises(EmulatorError):
        witness_table(guest("fib"), bad, backend=backend)


def test_tables_from_two_threads_match_one():
    out = run("sort", "fast", chunk_steps=50_000)
    p = guest("sort")
    image = fast.Image(p, None, 0)
    with ThreadPoolExecutor(2) as pool:
        two = list(pool.map(lambda t: witness_table(p, t, _image=image), out.min_traces))
    one = [witness_table(p, t) for t in out.min_traces]
    assert all(np.array_equal(a, b) for a, b in zip(one, two))


# ---- planning

def test_plan_packs_and_splits_chunks():
    assert plan([5, 3, 0, 7], 6) == [((0, 0, 5), (1, 0, 1)), ((1, 1, 2), (3, 0, 4)), ((3, 4, 3),)]
    assert plan([10], 4) == [((0, 0, 4),), ((0, 4, 4),), ((0, 8, 2),)]
    assert plan([0, 0], 4) == []
    with pytest.raises(ValueError, match="instance size must be positive, got 0"):
        plan([1], 0)
    with pytest.raises(ValueError, match="chunk 1: negative count -2"):
        plan([1, -2], 3)


@pytest.mark.parametrize("size", [1, 7, 64, 1000, 1 << 20])
def test_plan_conserves_rows(size):
    counts = np.random.default_rng(size).integers(0, 300, 40)
    instances = plan(counts, size)
    assert all(sum(c for _, _, c in inst) == size for inst in instances[:-1])
    per_chunk = np.zeros(len(counts), dtype=np.int64)
    for inst in instances:
        for chunk, skip, count in inst:
            assert skip == per_chunk[chunk] and count > 0
            per_chunk[chunk] += count
    assert np.array_equal(per_chunk, counts)


def test_plan_instances_and_instance_tables_cover_every_row():
    out, ts = tables("sha256", "fast", b"abc" * 40, 500)
    sizes = {"main": 2048, "binary": 1000, "arith": 64, "mem": 300}
    instances = plan_instances(out.counters, sizes)
    assert {i.machine for i in instances} == {"main", "binary", "mem"}     # sha256 does no mul/div
    whole = np.concatenate(ts)
    for machine, classes in STATE_MACHINES.items():
        mine = [i for i in instances if i.machine == machine]
        assert [i.segment_id for i in mine] == list(range(len(mine)))
        assert [i.is_last for i in mine] == [False] * (len(mine) - 1) + [True] * bool(mine)
        rows = [instance_table(i, ts) for i in mine]
        assert all(len(r) == i.rows for r, i in zip(rows, mine))
        assert all(i.rows == sizes[machine] for i in mine[:-1])
        cls_ids = [isa.CLASSES.index(c) for c in classes]
        expected = whole[np.isin(whole[:, C["cls"]], cls_ids)]
        got = np.concatenate(rows) if rows else np.zeros((0, len(COLUMNS)), dtype=np.int64)
        assert np.array_equal(got, expected), machine
    assert plan_instances(out.counters)[0].to_json()["size"] == DEFAULT_SIZES["main"]
    with pytest.raises(ValueError, match="unknown state machine 'rom'"):
        plan_instances(out.counters, {"rom": 10})


@pytest.mark.parametrize("module", ["hetflow.executors.emulator.witness", "hetflow.executors.emulator.isa"])
def test_docstring_examples(module):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(module))
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize("backend", ["reference", "fast", "native"])
def test_a_chunk_that_ends_the_guest_leaves_nothing_holding_the_table_it_filled(tmp_path, backend):
    """A cluster's witness batch fills its rows in a shared mapping and closes it. The rows stayed referenced
    until a garbage collection: on the reference backend by the exit's exception, kept by the hart with its
    traceback (its frames' locals), on the native one by a runner and its port in a cycle; closing the mapping
    raised BufferError and the run failed (every time on Python 3.13, whose collector ran later)."""
    import gc
    import mmap

    out = run("sha256", backend, input=b"witness me", chunk_steps=97)
    last = out.min_traces[-1]
    assert last.end
    size = int(last.steps) * len(COLUMNS) * 8
    path = tmp_path / "table"
    path.write_bytes(bytes(size))
    with open(path, "r+b") as f:
        view = mmap.mmap(f.fileno(), size, flags=mmap.MAP_SHARED)
    enabled = gc.isenabled()
    gc.disable()  # the collector's timing must not decide it
    try:
        table = np.frombuffer(view, np.int64).reshape(-1, len(COLUMNS))
        witness_table(guest("sha256"), last, input_size=10, backend=backend, out=table)
        expected = witness_table(guest("sha256"), last, input_size=10, backend=backend)
        assert np.array_equal(table, expected)
        del table
        view.close()
    finally:
        if enabled:
            gc.enable()
