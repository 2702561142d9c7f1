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
