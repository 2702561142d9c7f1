"""``MainRun.run(reads=False)``, what ``hetflow emulate`` runs: the min
traces' reads stay in the run's buffer, and everything else is the run
with its reads, field for field (chunk boundaries, start states, counters,
outputs), including chunks that end in the interpreter and on a
step-limit failure."""

import numpy as np
import pytest

from hetflow.executors.emulator import StepLimitExceeded, load_elf, native_main

from _guests import GUESTS

pytest.importorskip("llvmlite", reason="llvmlite is not installed (the native backend)")


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path_factory.getbasetemp() / "native-reads-cache"))


@pytest.mark.parametrize("name,data,chunk", [("sha256", bytes(range(256)) * 8, 1000), ("sort", b"", 97),
                                             ("isa_amo", b"", 13), ("isa_smc", b"", 50),
                                             ("sha256", bytes(range(256)) * 64, 1 << 16)],
                         ids=["sha256-1000", "sort-97", "isa_amo-13", "isa_smc-50", "sha256-65536"])
def test_a_run_without_reads_is_the_run_with_them_less_the_reads(name, data, chunk):
    prog = load_elf(GUESTS / f"{name}.elf")
    full = native_main.MainRun(prog, data).run(chunk, 1 << 30)
    bare = native_main.MainRun(prog, data).run(chunk, 1 << 30, reads=False)
    for k in ("steps", "exit_code", "end_reason", "stdout", "pub_outs"):
        assert bare[k] == full[k], k
    assert np.array_equal(np.asarray(bare["counts"]), np.asarray(full["counts"]))
    assert len(bare["traces"]) == len(full["traces"]) > 1
    for b, f in zip(bare["traces"], full["traces"]):
        assert (b.chunk_id, b.start_state, b.steps, b.end) == (f.chunk_id, f.start_state, f.steps, f.end)
        assert b.mem_reads is None
    assert sum(len(f.mem_reads) for f in full["traces"]) > 0     # the run with reads had some to leave out


def test_a_failed_run_without_reads_fails_the_same_way():
    prog = load_elf(GUESTS / "sort.elf")
    with pytest.raises(StepLimitExceeded) as full:
        native_main.MainRun(prog, b"").run(97, 5000)
    with pytest.raises(StepLimitExceeded) as bare:
        native_main.MainRun(prog, b"").run(97, 5000, reads=False)
    assert str(bare.value) == str(full.value)
    assert (bare.value.step, bare.value.pc) == (full.value.step, full.value.pc)
