"""Guest programs and arguments no one meant to give: segments asking for more memory than any guest has, or at
addresses past the guest's address space, a chunk larger than a trace can be held, an input larger than the input
region. Each is refused at once, exit 2, the same on every backend: never an internal error, a crash or memory
taken without bound."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from hetflow.engine.cli import emulate as cli_emulate
from hetflow.executors import emulator

GUEST = Path(__file__).resolve().parents[2] / "examples" / "guests" / "exit3.elf"
BACKENDS = ("reference", "fast", "native")


def _first_load(raw: bytes) -> int:
    """The file offset of the first PT_LOAD program header."""
    phoff, = struct.unpack_from("<Q", raw, 32)
    phentsize, phnum = struct.unpack_from("<HH", raw, 54)
    for i in range(phnum):
        at = phoff + i * phentsize
        if struct.unpack_from("<I", raw, at)[0] == 1:
            return at
    raise AssertionError("no PT_LOAD")


def _changed(tmp_path: Path, name: str, *, memsz: int | None = None, vaddr: int | None = None) -> Path:
    raw = bytearray(GUEST.read_bytes())
    at = _first_load(raw)
    if memsz is not None:
        struct.pack_into("<Q", raw, at + 40, memsz)
    if vaddr is not None:
        old, = struct.unpack_from("<Q", raw, at + 16)
        entry, = struct.unpack_from("<Q", raw, 24)
        struct.pack_into("<Q", raw, at + 16, vaddr)
        struct.pack_into("<Q", raw, 24, vaddr + (entry - old))  # the entry moves with its segment
    path = tmp_path / name
    path.write_bytes(bytes(raw))
    return path


def emulate(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", *argv], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("change, said", [
    ({"memsz": 1 << 40}, "segments take 1,099,511,627,776 bytes of guest memory (p_memsz); a guest loads at most"),
    ({"memsz": (1 << 64) - 1}, "past the guest's address space (addresses below 0x8000000000000000)"),
    ({"vaddr": 0xFFFF_FFFF_0000_0000}, "past the guest's address space (addresses below 0x8000000000000000)"),
    ({"vaddr": (1 << 64) - 8}, "past the guest's address space"),
])
def test_a_segment_past_the_guests_memory_is_refused_alike_by_every_backend(tmp_path, change, said):
    path = _changed(tmp_path, "bad.elf", **change)
    for backend in BACKENDS:
        done = emulate("--backend", backend, "--no-interpreter-start", str(path))
        assert done.returncode == 2, (backend, done.returncode, done.stderr)
        assert said in done.stderr and "internal error" not in done.stderr, (backend, done.stderr)


def test_a_chunk_too_large_to_hold_is_refused_and_the_limit_is_one(tmp_path):
    assert cli_emulate.MAX_CHUNK_STEPS == emulator.MAX_CHUNK_STEPS
    done = emulate("--backend", "native", "--no-interpreter-start", "--chunk-steps", str(1 << 40), str(GUEST))
    assert done.returncode == 2 and "--chunk-steps is at most 16777216" in done.stderr, done.stderr
    with pytest.raises(ValueError, match="chunk_steps is at most 16777216"):
        emulator.execute(str(GUEST), chunk_steps=1 << 25)


def test_an_input_larger_than_its_region_is_refused_before_it_is_read(tmp_path):
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(3 << 30)  # sparse: its size, not its bytes
    done = emulate("--input", str(big), str(GUEST))
    assert done.returncode == 2, done.stderr
    assert f"--input {big}: 3,221,225,472 bytes or more; a guest's input is at most 1,073,741,816" in done.stderr
    assert os.path.getsize(big) == 3 << 30


def _i(rd: int, rs1: int, imm: int, op: int = 0x13) -> int:
    return (imm & 0xFFF) << 20 | rs1 << 15 | rd << 7 | op


def _elf(path: Path, code: list[int]) -> None:
    """An RV64 ELF of one read-and-execute segment holding ``code`` (32-bit instruction words), its entry at the first."""
    text = b"".join(struct.pack("<I", c) for c in code)
    base, start = 0x8000_0000, 64 + 56
    header = (b"\x7fELF\x02\x01\x01" + bytes(9) + struct.pack("<HHIQQQIHHHHHH", 2, 243, 1, base + start, 64, 0, 0, 64,
                                                               56, 1, 64, 0, 0))
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, start + len(text), start + len(text), 0x1000)
    path.write_bytes(header + program + text)


def _writer_elf(path: Path, writes: int, size: int) -> None:
    """A guest that writes its input's ``size`` bytes to fd 1, ``writes`` times, then exits 0."""
    s0, s1, s2, a0, a1, a2, a7 = 8, 9, 18, 10, 11, 12, 17
    code = [0x40000 << 12 | s0 << 7 | 0x37,  # lui s0, 0x40000: the input region
            _i(s0, s0, 8),  # its bytes, after their length
            (size >> 12) << 12 | s1 << 7 | 0x37,  # lui s1, size
            _i(s2, 0, writes)]
    loop = len(code)
    code += [_i(a0, 0, 1), _i(a1, s0, 0), _i(a2, s1, 0), _i(a7, 0, 64), 0x73, _i(s2, s2, -1)]
    back = (loop - len(code)) * 4 & 0x1FFF  # bne s2, zero, loop
    code.append((back >> 12 & 1) << 31 | (back >> 5 & 0x3F) << 25 | s2 << 15 | 1 << 12 | (back >> 1 & 0xF) << 8
                | (back >> 11 & 1) << 7 | 0x63)
    code += [_i(a0, 0, 0), _i(a7, 0, 93), 0x73]
    _elf(path, code)


def test_a_guest_whose_writes_take_seconds_each_is_stopped_at_its_timeout(tmp_path):
    # one write ecall reads megabytes in one step, longer than the reference backend's steps between two looks at
    # the clock take: 25 of them ran 70 s past a 5 s limit
    guest, data = tmp_path / "writer.elf", tmp_path / "input.bin"
    _writer_elf(guest, writes=25, size=4 << 20)
    data.write_bytes(bytes(4 << 20))
    done = emulate("--backend", "reference", "--timeout", "1", "--input", str(data), str(guest))
    assert done.returncode == 1 and "time limit reached: 1 s without an exit" in done.stderr, done.stderr
    small = tmp_path / "small.bin"
    small.write_bytes(b"hello" + bytes(4091))
    _writer_elf(guest, writes=2, size=4096)
    done = emulate("--backend", "reference", "--input", str(small), str(guest))
    assert done.returncode == 0 and "guest output (8192 bytes)" in done.stdout, (done.stdout, done.stderr)


def _uart_elf(path: Path, bytes_: int) -> None:
    """A guest that stores ``bytes_`` bytes to the UART one at a time, then exits 0."""
    t0, t1, s2, a0, a7 = 5, 6, 18, 10, 17
    code = [0x50000 << 12 | t0 << 7 | 0x37,  # lui t0, 0x50000
            1 << 20 | t0 << 15 | 1 << 12 | t0 << 7 | 0x13,  # slli t0, t0, 1: 0xA0000000 (lui would sign-extend it)
            _i(t0, t0, 0x200),  # the UART
            _i(t1, 0, ord("x")),
            _i(s2, 0, bytes_)]
    loop = len(code)
    code += [(t1 << 20) | (t0 << 15) | 0x23,  # sb t1, 0(t0)
             _i(s2, s2, -1)]
    back = (loop - len(code)) * 4 & 0x1FFF
    code.append((back >> 12 & 1) << 31 | (back >> 5 & 0x3F) << 25 | s2 << 15 | 1 << 12 | (back >> 1 & 0xF) << 8
                | (back >> 11 & 1) << 7 | 0x63)
    code += [_i(a0, 0, 0), _i(a7, 0, 93), 0x73]
    _elf(path, code)


def _failures(guest: Path, data: bytes, max_output: int) -> list[tuple]:
    seen = []
    for backend in BACKENDS:
        with pytest.raises(emulator.OutputLimitExceeded) as caught:
            emulator.execute(str(guest), backend=backend, input=data, max_output=max_output)
        e = caught.value
        seen.append((backend, e.step, e.pc, e.insn, len(e.stdout), e.wanted, str(e).split(" at ")[0]))
    return seen


def test_a_guest_that_writes_past_its_output_bound_fails_at_that_write_on_every_backend(tmp_path):
    # a guest printing in a loop held every byte in memory: 200 MB of output took 3.25 GB before it ended
    guest = tmp_path / "writer.elf"
    _writer_elf(guest, writes=5, size=4096)
    data = struct.pack("<Q", 4096) + b"y" * 4096
    seen = _failures(guest, data, 3 * 4096 - 1)
    assert len({s[1:] for s in seen}) == 1, seen  # the same step, pc, instruction and output on each
    assert seen[0][4] == 2 * 4096 and seen[0][5] == 4096, seen
    assert seen[0][6] == "output limit reached: a write of 4096 more bytes would take the guest's output past 12287 bytes"
    for backend in BACKENDS:  # exactly at the bound is within it
        out = emulator.execute(str(guest), backend=backend, input=data, max_output=5 * 4096)
        assert out.exit_code == 0 and len(out.stdout) == 5 * 4096, backend


def test_a_guest_that_prints_to_the_uart_past_its_output_bound_fails_at_that_store(tmp_path):
    guest = tmp_path / "uart.elf"
    _uart_elf(guest, 1000)
    for bound in (300, 10, 0):  # 300 past the fast backend's first buffer, 10 and 0 within it
        seen = _failures(guest, b"", bound)
        assert len({s[1:] for s in seen}) == 1, seen
        assert seen[0][4] == bound and seen[0][5] == 1, seen
    for backend in BACKENDS:
        out = emulator.execute(str(guest), backend=backend, max_output=1000)
        assert out.exit_code == 0 and out.stdout == b"x" * 1000, backend


def test_the_output_bound_on_the_command_line(tmp_path):
    guest = tmp_path / "uart.elf"
    _uart_elf(guest, 1000)
    done = emulate("--max-output", "999", str(guest))
    assert done.returncode == 1, done.stderr
    assert ("output limit reached: a write of 1 more bytes would take the guest's output past 999 bytes"
            in done.stderr and "(raise it with --max-output)" in done.stderr), done.stderr
    assert emulate("--max-output", "1000", str(guest)).returncode == 0
    bad = emulate("--max-output", str((1 << 30) + 1), str(guest))
    assert bad.returncode == 2 and "--max-output is a number of bytes from 0 to 1,073,741,824" in bad.stderr
    with pytest.raises(ValueError, match="max_output is a whole number of bytes"):
        emulator.execute(str(guest), max_output=-1)


def test_an_execute_phase_fails_at_its_emulators_output_bound_and_says_so(tmp_path):
    guest = tmp_path / "uart.elf"
    _uart_elf(guest, 1000)
    manifest = tmp_path / "p.yaml"
    manifest.write_text("version: 1\nname: loud\nexecutors:\n  cpu: {vendor: cpu}\n"
                        f"emulators:\n  g: {{program: {guest}, backend: reference, max_output: 300}}\n"
                        "stages:\n  run: {phase: execute, emulator: g}\n"
                        "outputs:\n  steps: run.steps\n")
    runs = tmp_path / "runs"
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", str(runs)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert "output limit reached: a write of 1 more bytes would take the guest's output past 300 bytes" in done.stderr
    assert "Traceback" not in done.stderr
    (tmp_path / "q.yaml").write_text(manifest.read_text().replace("max_output: 300", "max_output: 2000000000"))
    bad = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "validate", str(tmp_path / "q.yaml")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "q.yaml:6:" in bad.stderr and "1073741824" in bad.stderr, bad.stderr


def _write_then_load_elf(path: Path, writes: int, size: int, loads: int) -> None:
    """A guest that writes its input's ``size`` bytes to fd 1 and then loads ``loads`` doublewords of it, ``writes``
    times, then exits 0: each write records its words in the min trace, each load one more."""
    s0, s1, s2, t0, a0, a1, a2, a7 = 8, 9, 18, 5, 10, 11, 12, 17
    code = [0x40000 << 12 | s0 << 7 | 0x37, _i(s0, s0, 8), (size >> 12) << 12 | s1 << 7 | 0x37, _i(s2, 0, writes)]
    loop = len(code)
    code += [_i(a0, 0, 1), _i(a1, s0, 0), _i(a2, s1, 0), _i(a7, 0, 64), 0x73]
    code += [_i(t0, s0, 8 * (k % 250), 0x03) | 3 << 12 for k in range(loads)]  # ld t0, 8k(s0)
    code.append(_i(s2, s2, -1))
    back = (loop - len(code)) * 4 & 0x1FFF  # bne s2, zero, loop
    code.append((back >> 12 & 1) << 31 | (back >> 5 & 0x3F) << 25 | s2 << 15 | 1 << 12 | (back >> 1 & 0xF) << 8
                | (back >> 11 & 1) << 7 | 0x63)
    code += [_i(a0, 0, 0), _i(a7, 0, 93), 0x73]
    _elf(path, code)


@pytest.mark.parametrize("chunk_steps", [7, 100, 333, 997])
def test_loads_after_a_large_write_keep_their_room_in_the_min_trace(tmp_path, chunk_steps):
    """The fast backend made room for a write's words and then ran the rest of its slice of steps into the room the
    write had taken: a heap overflow (glibc's "realloc(): invalid next size", the process aborted) or a min trace
    whose last words were garbage. In a process of its own, whose abort would not take the test run with it."""
    guest, data = tmp_path / "wl.elf", tmp_path / "input.bin"
    _write_then_load_elf(guest, writes=20, size=32 << 10, loads=300)
    data.write_bytes(bytes(range(256)) * 128)
    script = ("import sys\nfrom hetflow.executors import emulator\n"
              f"data = open({str(data)!r}, 'rb').read()\n"
              f"run = [emulator.execute({str(guest)!r}, backend=b, input=data, runners=False, chunk_steps={chunk_steps})"
              " for b in ('fast', 'reference')]\n"
              "assert run[0].exit_code == 0 and len(run[0].stdout) == 20 * 32768, (run[0].exit_code, len(run[0].stdout))\n"
              "print('differ:', run[0].same_result(run[1]))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "differ: []", done.stdout
