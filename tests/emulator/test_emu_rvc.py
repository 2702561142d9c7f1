"""The C extension: compiled ``-march=rv64imac`` guests identical on both
backends and against Unicorn (an independent emulator, skipped where it
does not install), and fetch rules of 4-byte instructions at 2-aligned
addresses.  The hand-written edge cases are ``isa_rvc.S``, one of the
ISA tests of the conformance suite."""

import hashlib
import importlib.util
from pathlib import Path

import pytest

from hetflow.executors.emulator import GuestTrap, execute, reexecute_chunk, verify_min_traces
from hetflow.executors.emulator.elf import PERM_R, PERM_X, Program, Segment

from _guests import guest, run

BASE = 0x8000_0000
_BENCH = Path(__file__).resolve().parents[2] / "bench" / "unicorn_guest.py"


def _unicorn():
    pytest.importorskip("unicorn", reason="Unicorn is not installed (pip install unicorn)")
    spec = importlib.util.spec_from_file_location("unicorn_guest", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _parcels_off_4(out) -> int:
    """Executed instructions at addresses that are 2 mod 4 (only C code has them)."""
    hist = out.backend.await_rom_histogram()
    return int(sum(n for pc, n in zip(hist.pcs, hist.counts) if pc % 4 == 2))


@pytest.mark.parametrize("name, data", [("sort_rvc", b""), ("sha256_rvc", b"abc" * 50)])
def test_compiled_rvc_guest_identical_on_both_backends(name, data):
    ref, fst = run(name, "reference", input=data, chunk_steps=50_000), run(name, "fast", input=data, chunk_steps=50_000)
    assert ref.same_result(fst) == []
    # the same program built without C gives the same results
    plain = run(name.removesuffix("_rvc"), "fast", input=data, chunk_steps=50_000)
    assert (fst.pub_outs, fst.stdout, fst.exit_code) == (plain.pub_outs, plain.stdout, plain.exit_code)
    out = execute(guest(name), backend="fast", input=data)
    assert _parcels_off_4(out) > 0
    verify_min_traces(guest(name), fst, backend="fast")


def test_sha256_rvc_digest():
    data = bytes(range(200))
    out = run("sha256_rvc", "fast", input=data, chunk_steps=1 << 18)
    assert b"".join(v.to_bytes(4, "big") for _, v in out.pub_outs[:8]).hex() == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize("name, data", [("sort_rvc", b""), ("sha256_rvc", b"abc" * 50), ("fib", b""),
                                        ("sort", b"")])
def test_against_unicorn(backend, name, data):
    uni = _unicorn().run(guest_bytes(name), data)
    out = run(name, backend, input=data, chunk_steps=50_000)
    assert (out.exit_code, out.stdout, out.pub_outs) == (uni["exit_code"], uni["stdout"], uni["pub_outs"])
    end, _ = reexecute_chunk(guest(name), out.min_traces[-1], input_size=len(data), backend=backend)
    assert list(end.regs) == uni["regs"]


def guest_bytes(name):
    from _guests import GUESTS
    return (GUESTS / f"{name}.elf").read_bytes()


def _program(code: bytes, fetch="executable") -> Program:
    return Program("rvc", BASE, (Segment(BASE, code, PERM_R | PERM_X),), None, fetch)


def test_second_parcel_fetch_fault_names_pc_plus_2(backend):
    # three c.nop, then the first half of a 4-byte addi at the segment's last 2 bytes
    code = (0x0001).to_bytes(2, "little") * 3 + (0x0513).to_bytes(2, "little")
    with pytest.raises(GuestTrap) as e:
        execute(_program(code), backend=backend, runners=False)
    assert (e.value.cause, e.value.tval, e.value.pc, e.value.insn) == (1, BASE + 8, BASE + 6, None)


def test_compressed_parcel_in_last_two_bytes_runs(backend):
    # li a7, 93; c.li a0, 5; c.j 1f; 2: ecall; c.nop; 1: c.j 2b  (the c.j back ends the segment)
    code = bytes.fromhex("9308d005154521a0730000000100edbf")
    out = execute(_program(code), backend=backend, runners=False)
    assert (out.exit_code, out.steps) == (5, 5)
