"""Guests that fail loudly, and the limits of a run (issue 31).

The guests here are real RV64 programs, encoded instruction by instruction
into minimal ELF files (no RISC-V compiler is needed), and run on every
backend: a nonzero exit fails an execute phase unless ``accept_exit`` lists
it; a failed guest's output, public outputs and steps reach ``hetflow
emulate`` and its ``--json``; a stack linked with ``__stack_top`` and
``__stack_size`` (as the SDK's link.ld does) has an unmapped guard at its
bottom; an ELF whose float ABI needs F/D, or compressed code under ``isa:
rv64ima``, is refused at load; ``max_steps`` has one default and a run can
have a wall-clock ``timeout``; and a plan warns when a bound passes the
machine's memory.
"""

from __future__ import annotations

import argparse
import io
import json
import struct
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.manifest import validate as mf
from hetflow.engine.manifest import phasedecl as phases
from hetflow.engine.errors import RunFailed
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute as run_pipeline
from hetflow.executors import emulator as emu
from hetflow.executors import probe
from hetflow.executors.emulator import machine as M

ROOT = Path(__file__).resolve().parents[1]
BASE = 0x8000_0000
BACKENDS = ("reference", "fast", "native")
T0, T1, SP, RA, A0, A1, A2, A7 = 5, 6, 2, 1, 10, 11, 12, 17


# --- an RV64 encoder for the few instructions these guests use ----------------------------------------------------

def _i(op, f3, rd, rs1, imm):
    return (imm & 0xFFF) << 20 | rs1 << 15 | f3 << 12 | rd << 7 | op


def addi(rd, rs1, imm):
    return _i(0x13, 0, rd, rs1, imm)


def slli(rd, rs1, shamt):
    return _i(0x13, 1, rd, rs1, shamt)


def lui(rd, imm20):
    return (imm20 & 0xFFFFF) << 12 | rd << 7 | 0x37


def auipc(rd, imm20):
    return (imm20 & 0xFFFFF) << 12 | rd << 7 | 0x17


def _s(f3, rs2, rs1, imm):
    return ((imm >> 5) & 0x7F) << 25 | rs2 << 20 | rs1 << 15 | f3 << 12 | (imm & 0x1F) << 7 | 0x23


def sw(rs2, imm, rs1):
    return _s(2, rs2, rs1, imm)


def sd(rs2, imm, rs1):
    return _s(3, rs2, rs1, imm)


def jal(rd, offset):
    o = offset & 0x1FFFFF
    return ((o >> 20) & 1) << 31 | ((o >> 1) & 0x3FF) << 21 | ((o >> 11) & 1) << 20 | ((o >> 12) & 0xFF) << 12 | rd << 7 | 0x6F


ECALL, ILLEGAL = 0x73, 0


def code(*words, tail=b""):
    return b"".join(struct.pack("<I", w) for w in words) + tail


def elf(text: bytes, *, flags=0, symbols=None) -> bytes:
    """A static RV64 executable: ``text`` as one r-x PT_LOAD at BASE, ``e_flags``, and absolute ``symbols``
    (name -> value) in a .symtab when given."""
    header, phsize = 64, 56
    body_at = header + phsize
    phdr = struct.pack("<IIQQQQQQ", 1, 5, body_at, BASE, BASE, len(text), len(text), 8)
    body = text + bytes(-len(text) % 8)
    sections = b""
    shoff, shnum, shstrndx = 0, 0, 0
    if symbols:
        strtab = b"\0"
        syms = bytes(24)                                        # the null symbol
        for name, value in symbols.items():
            syms += struct.pack("<IBBHQQ", len(strtab), 0x10, 0, 0xFFF1, value, 0)   # GLOBAL NOTYPE, SHN_ABS
            strtab += name.encode() + b"\0"
        shstr = b"\0.symtab\0.strtab\0.shstrtab\0"
        at = body_at + len(body)
        blobs = [syms, strtab, shstr]
        offsets = []
        for b in blobs:
            offsets.append(at + len(sections))
            sections += b + bytes(-len(b) % 8)
        shoff, shnum, shstrndx = at + len(sections), 4, 3
        sections += bytes(64)
        sections += struct.pack("<IIQQQQIIQQ", 1, 2, 0, 0, offsets[0], len(syms), 2, 1, 8, 24)
        sections += struct.pack("<IIQQQQIIQQ", 9, 3, 0, 0, offsets[1], len(strtab), 0, 0, 1, 0)
        sections += struct.pack("<IIQQQQIIQQ", 17, 3, 0, 0, offsets[2], len(shstr), 0, 0, 1, 0)
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, BASE, header, shoff, flags, header, phsize, 1,
                               64 if shnum else 0, shnum, shstrndx)
    return ehdr + phdr + body + sections


def say_then(end: list[int]) -> bytes:
    """Print "hello\\n" with the write ecall, set public output 0 to 0x12345000, then run ``end``."""
    msg = b"hello\n"
    head = [auipc(A1, 0), 0, addi(A0, 0, 1), addi(A2, 0, len(msg)), addi(A7, 0, 64), ECALL,
            lui(T0, 0x50008), slli(T0, T0, 1), lui(T1, 0x12345), sw(T1, 0, T0)]
    words = head + end
    head[1] = addi(A1, A1, 4 * len(words))                     # the message follows the code
    return code(*head, *end, tail=msg)


def exit_with(n: int) -> list[int]:
    return [addi(A0, 0, n), addi(A7, 0, 93), ECALL]


# recursion without end: each level pushes 16 bytes (the stack runs down until something stops it)
RECURSE = code(addi(SP, SP, -16), sd(RA, 8, SP), sd(SP, 0, SP), jal(RA, -12))
SDK_STACK = {"__stack_top": M.STACK_TOP, "__stack_size": 0x40000}   # the SDK's link.ld defaults


@pytest.fixture
def guests(tmp_path):
    def write(name, data):
        path = tmp_path / f"{name}.elf"
        path.write_bytes(data)
        return path
    return write


def emulate(*argv):
    out, err = io.StringIO(), io.StringIO()
    code_ = cli.main(["emulate", *map(str, argv)], out=out, err=err)
    return code_, out.getvalue(), err.getvalue()


# --- a failed guest's output ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_a_trapped_guest_keeps_what_it_printed_and_its_outputs(backend, guests):
    path = guests("trap", elf(say_then([ILLEGAL])))
    with pytest.raises(emu.GuestTrap) as failed:
        emu.execute(path, backend=backend, runners=False)
    e = failed.value
    assert (e.stdout, e.pub_outs[0], e.step, e.pc) == (b"hello\n", (0, 0x12345000), 10, BASE + 40)
    code_, out, err = emulate(path, "--json", "--backend", backend, "--no-interpreter-start")
    r = json.loads(out)
    assert (code_, r["status"], r["steps"], r["stdout"], r["pub_outs"][:2]) == (1, "failed", 10, "hello\n", [0x12345000, 0])
    assert "illegal instruction" in r["error"] and "illegal instruction" in err
    # the keys every command's --json object has: the process's exit code, what standard error says
    assert (r["exit_code"], r["message"], r["ran_on"]) == (1, err.strip(), backend)
    code_, out, _ = emulate(path, "--backend", backend, "--no-interpreter-start")
    assert out.splitlines() == [f"{path}: failed after 10 steps ({backend} backend)", "public outputs: [0]=0x12345000",
                                "guest output (6 bytes):", "hello"]
    if backend == "fast":  # it failed within the interpreter's start: the reference interpreter says so
        code_, out, _ = emulate(path, "--backend", backend)
        assert out.splitlines()[0] == (f"{path}: failed after 10 steps (reference backend, in the reference "
                                       "interpreter's first 20,000 steps)")


# --- nonzero exits in a pipeline ------------------------------------------------------------------------------------

PIPELINE = """\
version: 1
name: exits
emulators:
  guest: {{program: {program}, backend: {backend}, chunk_steps: 8{extra}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: guest}}
  trace: {{phase: witness, inputs: [run]}}
  top: {{op: max, inputs: [trace], args: {{axis: 0}}}}
outputs:
  code: run.exit_code
  top: top
"""


def _pipeline(tmp_path, program, backend="reference", extra=""):
    path = tmp_path / "exits.yaml"
    path.write_text(PIPELINE.format(program=program, backend=backend, extra=extra))
    m = mf.compile_manifest(mf.load(path))
    return run_pipeline(m, make_plan(m, probe), runs_dir=str(tmp_path / "runs"), num_workers=2)


def test_a_nonzero_exit_is_the_guests_code_in_emulates_json_and_the_process_exits_1(guests):
    path = guests("exit7", elf(say_then(exit_with(7))))
    code_, out, err = emulate(path, "--json")
    r = json.loads(out)
    assert (code_, r["status"], r["exit_code"], r["guest_exit_code"]) == (1, "failed", 1, 7)
    assert r["message"] == err.strip() == f"hetflow: emulate failed: {path}: guest exited with code 7"
    code_, out, err = emulate(guests("exit0", elf(say_then(exit_with(0)))), "--json")
    r = json.loads(out)
    assert (code_, r["status"], r["exit_code"], r["guest_exit_code"], "message" in r) == (0, "ok", 0, 0, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nonzero_exit_fails_the_execute_phase_and_nothing_after_it_runs(tmp_path, guests, backend):
    path = guests("exit7", elf(say_then(exit_with(7))))
    with pytest.raises(RunFailed) as failed:
        _pipeline(tmp_path, path, backend)
    record = failed.value.record
    assert record["status"] == "failed"
    message = json.dumps(record["error"])
    assert "execute phase 'run' on emulator 'guest': the guest exited with code 7 after 13 steps" in message
    assert "accept_exit" in message and "hello" in message        # how to accept it, and what the guest printed
    assert record["phases"]["run"]["status"] == "failed" and record["phases"]["trace"]["status"] == "not run"
    assert "code" not in record.get("outputs", {}) and "top" not in record.get("outputs", {})


def test_accept_exit_lists_the_codes_a_phase_succeeds_with(tmp_path, guests):
    path = guests("exit7", elf(say_then(exit_with(7))))
    result = _pipeline(tmp_path, path, extra=", accept_exit: [0, 7]")
    assert result.status == "succeeded"
    assert result.record["outputs"]["code"]["value"] == 7 and "top" in result.record["outputs"]
    assert phases.EmulatorDecl("g", "rv64imac", "fast", "/g", 1, 1, None, accept_exit=(0, 7)).to_json()["accept_exit"] == [0, 7]
    assert "accept_exit" not in phases.EmulatorDecl("g", "rv64imac", "fast", "/g", 1, 1, None).to_json()


def test_a_negative_accept_exit_is_a0_read_as_a_signed_number(tmp_path, guests):
    path = guests("exitm1", elf(say_then(exit_with(-1))))
    with pytest.raises(RunFailed) as failed:
        _pipeline(tmp_path, path)
    assert "exited with code 18446744073709551615 (-1 as a signed number)" in json.dumps(failed.value.record["error"])
    (tmp_path / "runs").rename(tmp_path / "failed")
    result = _pipeline(tmp_path, path, extra=", accept_exit: [-1]")
    assert result.status == "succeeded" and result.record["outputs"]["code"]["value"] == (1 << 64) - 1


def test_a_phase_timeout_fails_the_run_with_the_steps_done(tmp_path, guests):
    path = guests("spin", elf(code(jal(0, 0))))
    with pytest.raises(RunFailed) as failed:
        _pipeline(tmp_path, path, extra=", timeout: 0.3")
    message = json.dumps(failed.value.record["error"])
    assert "execute phase 'run' on emulator 'guest': time limit reached: 0.3 s without an exit" in message
    assert "steps done" in message


# --- the stack's guard ----------------------------------------------------------------------------------------------

def test_a_deep_recursion_traps_in_the_stack_guard_on_every_backend(guests):
    path = guests("recurse", elf(RECURSE, symbols=SDK_STACK))
    low = M.STACK_TOP - 0x40000
    seen = []
    for backend in BACKENDS:
        with pytest.raises(M.StackOverflow) as failed:
            emu.execute(path, backend=backend, runners=False)
        e = failed.value
        assert str(e).startswith(f"stack overflow: store at {low + M.STACK_GUARD - 8:#x} in the stack's guard "
                                 f"[{low:#x}, {low + M.STACK_GUARD:#x}) (stack {low + M.STACK_GUARD:#x}-{M.STACK_TOP:#x}")
        assert e.pub_outs == [(i, 0) for i in range(64)]         # the stack stopped above the heap and the outputs
        seen.append((e.pc, e.step, e.tval, str(e)))
    assert seen[0] == seen[1] == seen[2]
    code_, _, err = emulate(path, "--backend", "native")
    assert code_ == 1 and "stack overflow: store at" in err


def test_without_linked_stack_symbols_the_stack_runs_through_ram(guests):
    # what the guard prevents: the same recursion overwrites the public outputs before it leaves RAM
    path = guests("recurse_bare", elf(RECURSE))
    with pytest.raises(emu.GuestTrap) as failed:
        emu.execute(path, backend="fast", runners=False)
    assert not isinstance(failed.value, M.StackOverflow)
    assert failed.value.tval == M.RAM_ADDR - 8 and any(v for _, v in failed.value.pub_outs)


def test_the_sdk_guest_gets_the_guard_and_runs_as_before():
    program = emu.load_elf(ROOT / "examples" / "guests" / "sdk" / "hello.elf")
    assert program.stack == (M.STACK_TOP - 0x40000, M.STACK_TOP)
    names = [r.name for r in M.build_regions(program, 0)]
    assert names[-2:] == ["ram", "stack"]
    outs = [emu.execute(program, backend=b, runners=False) for b in BACKENDS]
    assert outs[0].exit_code == 0 and not outs[0].same_result(outs[1]) and not outs[0].same_result(outs[2])


# --- refused at load ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags, abi", [(0x4, "lp64d"), (0x5, "lp64d"), (0x2, "lp64f")])
def test_an_elf_with_a_float_abi_is_refused_with_the_reason(guests, flags, abi):
    path = guests("float", elf(code(*exit_with(0)), flags=flags))
    with pytest.raises(emu.ElfError) as failed:
        emu.load_elf(path)
    assert str(failed.value) == (f"{path}: this ELF uses the {abi} float ABI (e_flags {flags:#x}): hetflow's emulator "
                                 f"runs rv64ima[c] without F/D; build with -march=rv64imac -mabi=lp64")
    code_, out, err = emulate(path)
    assert (code_, out) == (2, "") and f"{abi} float ABI" in err


def test_rvc_under_rv64ima_is_refused_at_load():
    rvc = ROOT / "examples" / "guests" / "sort_rvc.elf"
    assert emu.load_elf(rvc).entry == BASE                       # rv64imac (the default) runs it
    with pytest.raises(emu.ElfError, match="uses compressed instructions .* but its isa is rv64ima"):
        emu.load_elf(rvc, isa="rv64ima")
    assert emu.load_elf(ROOT / "examples" / "guests" / "sort.elf", isa="rv64ima").entry == BASE
    code_, _, err = emulate(rvc, "--isa", "rv64ima")
    assert code_ == 2 and "its isa is rv64ima" in err


def test_a_manifest_with_isa_rv64ima_refuses_an_rvc_program(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(PIPELINE.format(program=ROOT / "examples" / "guests" / "sort_rvc.elf", backend="fast",
                                    extra=", isa: rv64ima"))
    with pytest.raises(Exception, match="its isa is rv64ima"):
        mf.compile_manifest(mf.load(path))


@pytest.mark.parametrize("isa", ["rv32i", "5"])
def test_an_isa_no_emulator_has_is_an_error_at_its_line_not_an_internal_error(tmp_path, isa):
    """The program was read with the isa the schema had refused: a ValueError, exit 3."""
    path = tmp_path / "m.yaml"
    path.write_text(PIPELINE.format(program=ROOT / "examples" / "guests" / "sort.elf", backend="fast",
                                    extra=f", isa: {isa}"))
    from hetflow.engine.errors import ManifestError

    with pytest.raises(ManifestError) as e:
        mf.compile_manifest(mf.load(path))
    (said,) = [str(d) for d in e.value.diagnostics]
    assert said.startswith(f"{path}:") and "error: emulators.guest.isa must be one of rv64imac, rv64ima; found" in said


# --- limits ---------------------------------------------------------------------------------------------------------

def test_one_default_max_steps(guests):
    schema = json.loads((ROOT / "schemas" / "pipeline.base.json").read_text())
    assert schema["$defs"]["emulator"]["properties"]["max_steps"]["default"] == emu.DEFAULT_MAX_STEPS == 1 << 28
    assert emu.execute.__kwdefaults__["max_steps"] == emu.DEFAULT_MAX_STEPS
    parser = cli._parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["emulate"]
    option = next(a for a in sub._actions if "--max-steps" in a.option_strings)
    assert option.default is None and f"2^{emu.DEFAULT_MAX_STEPS.bit_length() - 1}" in option.help
    # the command resolves it to the emulator's default (native: 2^28 steps take a fraction of a second)
    code_, _, err = emulate(guests("spin", elf(code(jal(0, 0)))), "--backend", "native")
    assert code_ == 1 and f"step limit reached: {emu.DEFAULT_MAX_STEPS} steps without an exit" in err
    m_path = guests("fib", (ROOT / "examples" / "guests" / "fib.elf").read_bytes()).with_suffix(".yaml")
    m_path.write_text(PIPELINE.format(program=ROOT / "examples" / "guests" / "fib.elf", backend="fast", extra=""))
    assert mf.compile_manifest(mf.load(m_path)).emulators["guest"].max_steps == emu.DEFAULT_MAX_STEPS


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timeout_ends_a_guest_that_never_exits(backend, guests):
    path = guests("spin", elf(code(jal(0, 0))))
    with pytest.raises(emu.TimeLimitExceeded) as failed:
        # a step limit no backend reaches in the time: only the clock can end the run
        emu.execute(path, backend=backend, runners=False, max_steps=1 << 62, timeout=0.5)
    e = failed.value
    assert e.step > 0 and str(e).startswith(f"time limit reached: 0.5 s without an exit, {e.step} steps done")
    code_, out, err = emulate(path, "--backend", backend, "--timeout", "0.5", "--max-steps", 1 << 62, "--json")
    r = json.loads(out)
    assert code_ == 1 and r["status"] == "failed" and r["steps"] > 0
    assert "time limit reached: 0.5 s" in err and "(raise it with --timeout)" in err


def test_a_plan_warns_when_a_bound_exceeds_the_machines_memory(tmp_path):
    path = tmp_path / "big.yaml"
    # 2^40 steps: a witness bound of 128 TiB, beyond any machine's memory
    path.write_text(PIPELINE.format(program=ROOT / "examples" / "guests" / "fib.elf", backend="fast",
                                    extra=f", max_steps: {1 << 40}"))
    m = mf.compile_manifest(mf.load(path))
    warnings = [w for w in make_plan(m, probe).warnings if w.kind == "memory-bound"]
    assert len(warnings) == 1
    assert "witness phase 'trace' may hold up to 128.0 TiB (1099511627776 rows" in warnings[0].message
    assert "set max_steps on emulator 'guest'" in warnings[0].message
    small = tmp_path / "small.yaml"
    small.write_text(PIPELINE.format(program=ROOT / "examples" / "guests" / "fib.elf", backend="fast",
                                     extra=", max_steps: 100000"))
    m = mf.compile_manifest(mf.load(small))
    assert not [w for w in make_plan(m, probe).warnings if w.kind == "memory-bound"]


@pytest.mark.parametrize("backend", ["fast", "native"])
def test_the_runners_beside_the_execution_stop_at_its_deadline(backend, guests):
    # the MO and RH runners replay the whole guest: under a timeout they end too, instead of spinning on
    path = guests("spin", elf(code(jal(0, 0))))
    with pytest.raises(emu.TimeLimitExceeded):
        emu.execute(path, backend=backend, max_steps=1 << 62, timeout=0.5)
    out = emu.execute(guests("exit0", elf(say_then(exit_with(0)))), backend=backend, timeout=30)
    assert out.backend.await_mem_plans()[0] and out.backend.await_rom_histogram().steps == out.steps == 13
    runner = (emu.fast if backend == "fast" else __import__("hetflow.executors.emulator.native", fromlist=["x"]))
    image = emu.fast.image_of(emu.load_elf(path), b"", 0)
    with pytest.raises(emu.TimeLimitExceeded):
        runner.rom_histogram_runner(image, emu.load_elf(path), 1 << 62, deadline=__import__("time").monotonic() + 0.3,
                                    timeout=0.3)


def test_a_timeout_counts_the_guests_time_not_what_came_before_its_first_step(guests, monkeypatch):
    """Under load the fast backend took longer than a 0.5 s timeout to reach its first step (its interpreter
    loaded, the program's memory made), and the guest "timed out" with 0 steps done."""
    import time

    from hetflow.executors.emulator import fast

    path = guests("spin", elf(code(jal(0, 0))))
    real = fast.image_of

    def slow_image_of(*args, **kwargs):
        time.sleep(0.6)
        return real(*args, **kwargs)

    monkeypatch.setattr(fast, "image_of", slow_image_of)
    with pytest.raises(emu.TimeLimitExceeded) as failed:
        emu.execute(path, backend="fast", runners=False, max_steps=1 << 62, timeout=0.5)
    assert failed.value.step > 0


def test_a_segment_that_collides_with_ram_is_refused_before_its_bytes_are_made():
    """A 256 MiB .bss over the machine's RAM cost its size in memory before the collision was seen."""
    import tracemalloc

    text = code(*exit_with(0))
    header, phsize = 64, 56
    body_at = header + 2 * phsize
    phdrs = (struct.pack("<IIQQQQQQ", 1, 5, body_at, BASE, BASE, len(text), len(text), 8)
             + struct.pack("<IIQQQQQQ", 1, 6, body_at, M.RAM_ADDR, M.RAM_ADDR, 0, 256 << 20, 8))
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    ehdr = ident + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, BASE, header, 0, 0, header, phsize, 2, 0, 0, 0)
    tracemalloc.start()
    try:
        with pytest.raises(emu.ElfError, match=r"memory regions collide: segment1\[rw-\] .* and ram "):
            emu.load_elf(ehdr + phdrs + text, "bss.elf")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak:,} bytes allocated before the refusal"
