"""The reference interpreter's memory ports.

Memory goes through a *port*.  :class:`LivePort` owns the memory image
and appends every word it reads to ``reads`` (the min trace).
:class:`ReplayPort` owns no writable memory: it pops the words a chunk
read from its min trace, so a chunk re-executes alone.  Both ports can
also log memory operations (for the memory planner) and instruction
addresses (for the ROM histogram).  A fault raises :class:`Trap`, which
:func:`hetflow.executors.emulator.reference.step` takes.
"""

from __future__ import annotations

from . import machine as M
from .elf import PERM_R, PERM_W, PERM_X

__all__ = ["Trap", "LivePort", "ReplayPort", "MASK64", "MASK32"]

MASK64 = (1 << 64) - 1
MASK32 = (1 << 32) - 1


class Trap(Exception):
    """A synchronous exception raised while executing a step."""

    def __init__(self, cause: int, tval: int = 0):
        self.cause, self.tval = cause, tval & MASK64


def _words(addr: int, size: int) -> list[int]:
    """Aligned 8-byte word addresses an access of ``size`` bytes touches."""
    first = addr & ~7
    last = (addr + size - 1) & ~7
    return [first] if first == last else [first, last]


def _extract(words: list[int], addr: int, size: int) -> int:
    """The ``size`` bytes at ``addr`` out of the words that hold them."""
    joined = words[0] | (words[1] << 64 if len(words) > 1 else 0)
    return (joined >> ((addr & 7) * 8)) & ((1 << (8 * size)) - 1)


class _Port:
    def __init__(self, regions: tuple[M.Region, ...], log_ops: bool = False, log_pcs: bool = False,
                 fetch: str = "executable"):
        self.regions = regions
        self.fetch_perm = M.fetch_permission(fetch)
        self.ops: list[tuple[int, int, int]] | None = [] if log_ops else None   # (word addr, step, is_write)
        self.pcs: list[int] | None = [] if log_pcs else None
        self.step = 0
        # the data access of the current step, for witness rows: [flags, width, address, read, written]
        self.access: list[int] | None = None

    def region(self, addr: int, size: int, perm: int) -> int | None:
        """Index of the region holding all of [addr, addr+size) with ``perm``."""
        for i, r in enumerate(self.regions):
            if r.base <= addr and addr + size <= r.end:
                return i if r.perm & perm == perm else None
        return None

    def _log(self, addr: int, size: int, is_write: int) -> None:
        if self.ops is not None:
            for w in _words(addr, size):
                self.ops.append((w, self.step, is_write))

    def _code_word(self, addr: int) -> int:
        """The aligned 8-byte word holding the parcel at ``addr``.

        "For instruction-fetch access faults on RISC-V systems with
        variable-length instructions, mtval will point to the portion of
        the instruction that caused the fault, while mepc will point to the
        beginning of the instruction."  (privileged ISA, mtval)
        """
        i = self.region(addr, 2, self.fetch_perm)
        if i is None:
            raise Trap(1, addr)
        r, w = self.regions[i], addr & ~7
        if r.perm & (PERM_W | PERM_X) == PERM_X:   # the program's read-only code: not a recorded read
            return int.from_bytes(r.data[w - r.base:w - r.base + 8], "little")
        self._log(w, 8, 0)
        return self.read_words(w, 8)[0]

    def fetch(self, pc: int) -> int:
        """The instruction at pc: a 16-bit parcel, or 32 bits when the
        first parcel's low bits are 11 (which may span two words)."""
        w0 = self._code_word(pc)
        if self.pcs is not None:
            self.pcs.append(pc)
        shift = (pc & 7) * 8
        if (w0 >> shift) & 3 != 3:
            return (w0 >> shift) & 0xFFFF
        if pc & 7 != 6:
            return (w0 >> shift) & MASK32
        return (w0 >> 48) | (self._code_word(pc + 2) & 0xFFFF) << 16

    def load(self, addr: int, size: int, fault: int = 5, perm: int = PERM_R) -> int:
        if self.region(addr, size, perm) is None:
            raise Trap(fault, addr)
        self._log(addr, size, 0)
        value = _extract(self.read_words(addr, size), addr, size)
        if self.access is not None:
            self.access[0:4] = [self.access[0] | 1, size, addr, value]
        return value

    def store(self, addr: int, size: int, value: int) -> None:
        i = self.region(addr, size, PERM_W)
        if i is None:
            raise Trap(7, addr)
        self._log(addr, size, 1)
        if self.access is not None:
            self.access[0:3] = [self.access[0] | 2, size, addr]
            self.access[4] = value & ((1 << (8 * size)) - 1)
        self.write_bytes(i, addr, (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little"))

    def read_buffer(self, addr: int, size: int) -> bytes | None:
        """The bytes of a syscall buffer, or None if not all readable."""
        if size == 0:
            return b""
        if self.region(addr, size, PERM_R) is None:
            return None
        first, last = addr & ~7, (addr + size - 1) & ~7
        out = bytearray()
        for w in range(first, last + 8, 8):
            if self.ops is not None:
                self.ops.append((w, self.step, 0))
            out += self.read_words(w, 8)[0].to_bytes(8, "little")
        return bytes(out[addr - first:addr - first + size])

    def read_words(self, addr: int, size: int) -> list[int]:
        raise NotImplementedError

    def write_bytes(self, region: int, addr: int, data: bytes) -> None:
        raise NotImplementedError


class LivePort(_Port):
    """Owns the memory image; records every word read into ``reads``."""

    def __init__(self, regions, log_ops=False, log_pcs=False, fetch="executable"):
        super().__init__(regions, log_ops, log_pcs, fetch)
        self.mem = [bytearray(r.data) for r in regions]
        self.reads: list[int] = []

    def _word(self, w: int) -> int:
        for r, buf in zip(self.regions, self.mem):
            if r.base <= w < r.end:
                return int.from_bytes(buf[w - r.base:w - r.base + 8], "little")
        raise AssertionError(f"word {w:#x} unmapped")

    def read_words(self, addr, size):
        words = [self._word(w) for w in _words(addr, size)]
        self.reads.extend(words)
        return words

    def write_bytes(self, region, addr, data):
        r = self.regions[region]
        self.mem[region][addr - r.base:addr - r.base + len(data)] = data

    def peek_insn(self, pc: int) -> int | None:
        """The instruction at pc (None if pc is not fetchable), unrecorded."""
        i = self.region(pc, 2, self.fetch_perm)
        if i is None:
            return None
        off = pc - self.regions[i].base
        lo = int.from_bytes(self.mem[i][off:off + 2], "little")
        if lo & 3 != 3:
            return lo
        j = self.region(pc + 2, 2, self.fetch_perm)
        if j is None:
            return None
        off = pc + 2 - self.regions[j].base
        return lo | int.from_bytes(self.mem[j][off:off + 2], "little") << 16

    def peek(self, addr: int, size: int) -> int:
        """Read without recording (for the public outputs at the end)."""
        for r, buf in zip(self.regions, self.mem):
            if r.base <= addr and addr + size <= r.end:
                return int.from_bytes(buf[addr - r.base:addr - r.base + size], "little")
        raise AssertionError(f"{addr:#x} unmapped")


class ReplayPort(_Port):
    """No writable memory: reads come from a min trace, stores only check."""

    def __init__(self, regions, reads, log_ops=False, log_pcs=False, fetch="executable"):
        super().__init__(regions, log_ops, log_pcs, fetch)
        self.reads = [int(v) for v in reads]
        self.pos = 0

    def read_words(self, addr, size):
        n = len(_words(addr, size))
        if self.pos + n > len(self.reads):
            raise M.EmulatorError(f"min trace exhausted: chunk needs more than {len(self.reads)} memory reads")
        words = self.reads[self.pos:self.pos + n]
        self.pos += n
        return words

    def write_bytes(self, region, addr, data):
        pass
