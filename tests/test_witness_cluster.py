"""Where a witness phase runs on a cluster (issue 31): priced both ways, the faster picked, shown and recorded.

The choice is tested on the cost model's inputs (steps, chunks, worker
threads), never on timings; the runs are real ``LocalCluster`` runs of
real guests (loopback, worker processes), whose tables must equal the
in-process run's wherever the witness ran.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from hetflow.engine.run import clusterphases
from hetflow.engine.plan.costs import CostModel
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.plan.planner import render_text
from hetflow.engine.run.execute import execute
from hetflow.engine.run.workerside import WorkerInfo
from hetflow.executors import probe

distributed = pytest.importorskip("distributed")

from hetflow.engine.run.distributed import Cluster  # noqa: E402

GUESTS = Path(__file__).resolve().parents[1] / "examples" / "guests"

PIPELINE = """\
version: 1
name: witness-where
emulators:
  emu: {{backend: {backend}, program: {program}, input: input.bin, chunk_steps: {chunk}, max_steps: {max_steps}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: emu}}
  wit: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [wit], args: {{axis: 0}}, executor: host}}
  low: {{op: min, inputs: [wit], args: {{axis: 0}}, executor: host}}
outputs: {{top: top, low: low, trace: wit, steps: run.steps}}
"""


@pytest.fixture(scope="module")
def cluster():
    with Cluster.local(2, 1) as c:
        yield c


def _manifest(tmp_path, backend, input_bytes, chunk, max_steps=100_000_000):
    (tmp_path / "input.bin").write_bytes(bytes(range(256)) * (input_bytes // 256) + bytes(input_bytes % 256))
    path = tmp_path / "w.yaml"
    path.write_text(PIPELINE.format(backend=backend, program=GUESTS / "sha256.elf", chunk=chunk, max_steps=max_steps))
    return compile_manifest(load(path))


def _digests(record):
    return {k: v["digest"] for k, v in record["outputs"].items()}


def _placed_event(record):
    (event,) = [e for e in record["events"] if e["event"] == "witness-placed"]
    return event


def _workers(n, threads=1, host="127.0.0.1"):
    return [WorkerInfo(f"tcp://{host}:{4000 + i}", str(i), threads, {}) for i in range(n)]


def test_one_worker_never_beats_the_client_and_a_short_guest_stays_in_process():
    model = CostModel()
    for steps in (1_000, 100_000, 50_000_000):
        one = clusterphases.witness_where(model, "fast", steps, -(-steps // 1024), [1], 2, True)
        assert one["where"] == "in-process", one["why"]
    short = clusterphases.witness_where(model, "fast", 20_000, 20, [2, 2, 2, 2], 2, True)
    assert short["where"] == "in-process" and short["in_process_s"] < short["cluster_s"]


def test_a_long_guest_on_enough_workers_goes_to_the_cluster_and_the_network_is_priced():
    model = CostModel()
    steps, chunks = 50_000_000, 50_000
    here = clusterphases.witness_where(model, "fast", steps, chunks, [2, 2, 2, 2], 2, True)
    assert here["where"] == "cluster" and here["cluster_s"] < here["in_process_s"]
    assert here["batches"] == len(clusterphases.batches(chunks, 8))
    # the same cluster on other hosts ships 6.4 GB of rows back: priced, and it changes the answer
    far = clusterphases.witness_where(model, "fast", steps, chunks, [2, 2, 2, 2], 2, False)
    assert far["cluster_s"] > here["cluster_s"] and far["where"] == "in-process"
    # the reference backend holds the GIL throughout: two worker processes beat any number of client threads
    ref = clusterphases.witness_where(model, "reference", 200_000, 200, [1, 1], 8, True)
    assert ref["where"] == "cluster"


@pytest.mark.parametrize("chunks,threads", [(4551, 2), (4551, 1), (50_000, 8), (10, 2), (3, 8), (1, 1), (0, 4)])
def test_batches_cover_every_chunk_once_largest_first_and_end_small(chunks, threads):
    planned = clusterphases.batches(chunks, threads)
    firsts = [first for first, _ in planned]
    counts = [count for _, count in planned]
    assert firsts == [sum(counts[:k]) for k in range(len(counts))] and sum(counts) == chunks
    assert all(c > 0 for c in counts) and counts == sorted(counts, reverse=True)
    share = chunks / threads
    if chunks >= 16 * threads:
        # a worker that frees first can take the last batches from a slower one: each is a sixteenth of a share
        assert counts[-1] <= share / 16 + 1 and planned[0][1] <= share / 2 + 1
        # few tasks a thread, not one a chunk: Dask's milliseconds a task stay a small part of a share
        assert len(planned) <= 7 * threads


def test_a_batchs_min_traces_travel_as_a_slice_of_words_and_read_back_equal():
    # what a worker reads a batch's traces from: its slice of the word stream and its rows of the index, not the
    # run's whole stream nor pickled trace objects
    import pickle

    import numpy as np

    from hetflow.executors.emulator import execute, load_elf
    from hetflow.executors.emulator.output import min_trace_array, min_traces_from_array

    elf = load_elf(str(GUESTS / "sha256.elf"))
    traces = execute(elf, backend="reference", input=bytes(range(256)) * 2, chunk_steps=512,
                     runners=False).min_traces
    assert len(traces) > 8
    for first, count in clusterphases.batches(len(traces), 2):
        words, index = min_trace_array(traces[first:first + count])
        assert index[0, 0] == 0 and int(index[-1].sum()) == len(words)
        # pickled as a few buffers: the bytes of the arrays and little else
        assert len(pickle.dumps((words, index), protocol=5)) < words.nbytes + index.nbytes + 1024
        back = min_traces_from_array(*pickle.loads(pickle.dumps((words, index), protocol=5)))
        assert back == traces[first:first + count]
        assert all(b.mem_reads.flags.owndata for b in back)
    everything, index = min_trace_array(traces)
    assert np.array_equal(np.concatenate([min_trace_array(traces[f:f + c])[0]
                                          for f, c in clusterphases.batches(len(traces), 3)]), everything)
    with pytest.raises(ValueError, match="outside the"):
        min_traces_from_array(everything[:10], index[:1])
    # a register held as a negative int (a backend's signed reading) packs as its 64-bit pattern
    from hetflow.executors.emulator.output import EmuTrace, EmuTraceStart

    signed = EmuTrace(0, EmuTraceStart(0x1000, 0, 3, (-1,) + (0,) * 31, (0,) * 7), 5, np.array([7], np.uint64), True)
    (back,) = min_traces_from_array(*min_trace_array([signed]))
    assert back.start_state.regs[0] == (1 << 64) - 1 and back.mem_reads.tolist() == [7]


def test_the_plan_on_a_cluster_says_where_each_witness_runs_and_why(tmp_path):
    m = _manifest(tmp_path, "fast", 64, 1024, max_steps=20_000)
    short = clusterphases.place_witness(make_plan(m, probe), _workers(1))
    runs = short.to_json()["phases"]["wit"]["runs"]
    assert runs["where"] == "in-process" and runs["workers"] == 1 and runs["shared_memory"]
    assert runs["why"].startswith("in-process, the faster: ~") and " against ~" in runs["why"]
    assert "runs in-process, the faster: ~" in render_text(short)
    m = _manifest(tmp_path, "fast", 64, 1024, max_steps=200_000_000)
    long = clusterphases.place_witness(make_plan(m, probe), _workers(4, threads=2))
    runs = long.to_json()["phases"]["wit"]["runs"]
    assert runs["where"] == "cluster" and runs["threads"] == 8 and runs["cluster_s"] < runs["in_process_s"]
    assert "runs on the cluster, the faster: ~" in render_text(long)
    # a plan with no witness phase is the same plan
    plain = dataclasses.replace(make_plan(m, probe), phases={})
    assert clusterphases.place_witness(plain, _workers(2)) is plain


def test_shared_table_is_a_file_in_dev_shm_both_sides_map(tmp_path):
    table, path = clusterphases.shared_table(1000, 16)
    if path is None:
        pytest.skip("no /dev/shm with room for the table here")
    try:
        import mmap

        table[:] = 7
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0) as other:
            assert len(other) == 1000 * 16 * 8 and other[:8] == (7).to_bytes(8, "little")
    finally:
        os.unlink(path)


def test_a_worker_that_cannot_open_the_tables_file_is_sent_its_bytes(cluster, tmp_path):
    # a worker on this host without its /dev/shm (a container sharing only the network) cannot map the path
    import numpy as np

    from hetflow.engine.run.events import EventStream
    from hetflow.engine.run.phases import witness_activation

    m = _manifest(tmp_path, "fast", 64, 128)
    placed = cluster.place(make_plan(m, cluster.probe), m)
    table = np.arange(64 * 16, dtype=np.int64).reshape(64, 16)
    stream = EventStream()
    future, held = clusterphases.scatter(cluster.client, placed, "r1", stream, "phase:wit", witness_activation(table),
                                         shared=str(tmp_path / "gone"))
    assert held == [placed.executors["host"].worker]
    assert np.array_equal(future.result().to_array(), table)
    (event,) = [e for e in stream.events if e["event"] == "scattered"]
    assert "mapped" not in event and event["bytes"] == table.nbytes
    future.release()


def test_a_long_reference_guest_runs_its_witness_on_the_workers_into_the_clients_table(cluster, tmp_path):
    m = _manifest(tmp_path, "reference", 1536, 1024)
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"), use_cache=False)
    placed = cluster.place(make_plan(m, cluster.probe), m)
    shm = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
    remote = execute(m, placed, runs_dir=str(tmp_path / "remote"), cluster=cluster, use_cache=False)
    record = json.loads(Path(remote.record_path).read_text())
    assert record["status"] == "succeeded" and _digests(record) == _digests(local.record)
    placed_event = _placed_event(record)
    assert placed_event["where"] == "cluster", placed_event["why"]
    assert placed_event["chunks"] == -(-record["outputs"]["steps"]["value"] // 1024)
    chunks = [t for t in record["tasks"] if t["kind"] == "witness"]
    assert len(chunks) == placed_event["chunks"]
    assert {t["worker"] for t in chunks} <= {w.address for w in cluster.workers()}
    (ran,) = [e for e in record["events"] if e["event"] == "witness-ran"]
    assert ran["copied_batches"] == 0 and set(ran["worker_cpu_s"]) <= {w.address for w in cluster.workers()}
    # the importing worker shares this host: it was sent the table's path and mapped it, not sent its bytes
    (scattered,) = [e for e in record["events"] if e["event"] == "scattered"]
    assert scattered.get("mapped") is True and scattered["bytes"] == record["outputs"]["steps"]["value"] * 128
    if os.path.isdir("/dev/shm"):  # the table's file is gone once the rows are in: its pages go with the table
        assert not [f for f in set(os.listdir("/dev/shm")) - shm if f.startswith("hetflow-witness-")]


def test_workers_that_cannot_map_the_table_send_their_rows_back(cluster, tmp_path, monkeypatch):
    # no /dev/shm here: as for workers on other hosts, each batch returns its rows and the client copies them in
    monkeypatch.setattr(clusterphases, "_SHM", str(tmp_path / "no-shm"))
    # and an ELF over the size that travels in each batch: broadcast once, each batch depending on it
    monkeypatch.setattr(clusterphases, "_INLINE_PROGRAM_BYTES", 0)
    m = _manifest(tmp_path, "reference", 1536, 1024)
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"), use_cache=False)
    placed = cluster.place(make_plan(m, cluster.probe), m)
    remote = execute(m, placed, runs_dir=str(tmp_path / "remote"), cluster=cluster, use_cache=False)
    record = json.loads(Path(remote.record_path).read_text())
    assert _placed_event(record)["where"] == "cluster"
    assert record["status"] == "succeeded" and _digests(record) == _digests(local.record)
    (ran,) = [e for e in record["events"] if e["event"] == "witness-ran"]
    assert ran["copied_batches"] == ran["batches"] > 1
    assert "mapped" not in [e for e in record["events"] if e["event"] == "scattered"][0]


def test_a_short_guest_on_a_cluster_runs_its_witness_in_process(cluster, tmp_path):
    m = _manifest(tmp_path, "fast", 64, 128)
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"), use_cache=False)
    placed = cluster.place(make_plan(m, cluster.probe), m)
    remote = execute(m, placed, runs_dir=str(tmp_path / "remote"), cluster=cluster, use_cache=False)
    record = json.loads(Path(remote.record_path).read_text())
    assert record["status"] == "succeeded" and _digests(record) == _digests(local.record)
    event = _placed_event(record)
    assert event["where"] == "in-process" and event["in_process_s"] < event["cluster_s"], event["why"]
    chunks = [t for t in record["tasks"] if t["kind"] == "witness"]
    assert len(chunks) == event["chunks"] and not {t["worker"] for t in chunks} & {w.address for w in cluster.workers()}
    # in-process rows went into the shared file too: the importing worker maps it
    assert [e.get("mapped") for e in record["events"] if e["event"] == "scattered"] == [True]



def test_a_worker_killed_in_the_middle_of_the_batches_costs_only_its_batches(tmp_path):
    # SIGKILL a worker that hosts no executor as its first batch starts: Dask hands that batch (and any answer
    # that died with it) to the workers left, which rewrite those rows in place; the table is the in-process one
    import signal
    import threading

    m = _manifest(tmp_path, "fast", 16 * 1024, 1024)
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "local"), use_cache=False)
    with Cluster.local(3, 1) as c:
        # as after an earlier run: fresh workers would price loading the compiled interpreter and leave the
        # witness in-process
        c.client.run(_load_interpreter)
        placed = c.place(make_plan(m, c.probe), m)
        host = placed.executors["host"].worker
        pids = c.client.run(os.getpid)
        victim = sorted(set(pids) - {host})[0]
        killed = threading.Event()

        def on_event(event):
            if (not killed.is_set() and event.get("kind") == "witness" and event.get("event") == "started"
                    and event.get("worker") == victim):
                killed.set()
                os.kill(pids[victim], signal.SIGKILL)

        result = execute(m, placed, runs_dir=str(tmp_path / "remote"), cluster=c, use_cache=False,
                         on_event=on_event)
    record = json.loads(Path(result.record_path).read_text())
    assert killed.is_set(), "the victim never started a batch"
    assert _placed_event(record)["where"] == "cluster"
    assert record["status"] == "succeeded" and _digests(record) == _digests(local.record)
    # every chunk finished exactly once in the record, none of them on the dead worker
    chunks = [t for t in record["tasks"] if t["kind"] == "witness"]
    assert sorted(t["chunk"] for t in chunks) == list(range(_placed_event(record)["chunks"]))
    assert victim not in {t["worker"] for t in chunks}


def _load_interpreter() -> bool:
    from hetflow.engine.plan.costs import interpreter_loaded
    from hetflow.executors.emulator import execute as run_guest

    run_guest(str(GUESTS / "sha256.elf"), backend="fast", input=bytes(64), runners=False)
    return interpreter_loaded()


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm on this system: tables stay in the client")
def test_a_table_a_killed_run_left_in_dev_shm_is_removed_by_the_next_one():
    """A run SIGKILLed in its witness phase never reached its unlink: its table (rows x 128 bytes) stayed in the
    tmpfs until a reboot. Each table names its process; the next table made on the host removes those whose
    process is gone."""
    import subprocess

    from hetflow.engine.run import clusterphases
    from hetflow.engine.store import owner

    gone = subprocess.Popen(["true"])
    dead = owner.of(gone.pid)
    gone.wait()
    me = owner.current()
    left = f"/dev/shm/hetflow-witness-{dead['pid']}-{dead['start_ticks']}-0123"
    mine = f"/dev/shm/hetflow-witness-{me['pid']}-{me['start_ticks']}-4567"
    unnamed = "/dev/shm/hetflow-witness-89ab"
    for path in (left, mine, unnamed):
        with open(path, "wb") as f:
            f.write(b"\0" * 128)
    try:
        table, path = clusterphases.shared_table(4, 16)
        assert table.shape == (4, 16) and path is not None and f"-{me['pid']}-{me['start_ticks']}-" in path
        os.unlink(path)
        assert not os.path.exists(left) and os.path.exists(mine) and os.path.exists(unnamed)
    finally:
        for path in (left, mine, unnamed):
            if os.path.exists(path):
                os.unlink(path)
