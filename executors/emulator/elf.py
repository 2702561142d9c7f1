"""Loading a static ELF64 RISC-V executable with pyelftools.

Only PT_LOAD program headers matter.  Each becomes a :class:`Segment`
whose permissions come from ``p_flags``: no ``PF_W`` means read-only (a
store into it is a store access fault, as in ZisK, whose program is a
ROM), no ``PF_X`` means not executable, no ``PF_R`` means not loadable
from.  A PT_LOAD whose flags are all clear is read-write-execute, because
bare-metal linkers emit that.  The ``tohost`` symbol, when the symbol
table has one, is the ISA-test end-of-run address.

Every problem with the file raises :class:`ElfError` with a message that
says what was expected and what was found.
"""

from __future__ import annotations

import io
import os
from typing import NamedTuple

__all__ = ["ElfError", "Segment", "Program", "load_elf", "read_elf", "elf_layout", "program_of", "PERM_R", "PERM_W",
           "PERM_X", "FETCH_MODES"]

PERM_R, PERM_W, PERM_X = 1, 2, 4

#: a program's fetch protection: "executable" faults on fetches outside
#: PF_X segments; "any" lets every mapped region be fetched from
FETCH_MODES = ("executable", "any")

EM_RISCV = 243
PT_LOAD = 1
PF_X, PF_W, PF_R = 1, 2, 4


class ElfError(ValueError):
    """The file is not a loadable static ELF64 RISC-V executable."""


class Segment(NamedTuple):
    vaddr: int
    data: bytes          # memsz bytes: file contents, then zeros
    perm: int            # PERM_R | PERM_W | PERM_X

    @property
    def end(self) -> int:
        return self.vaddr + len(self.data)

    def perm_text(self) -> str:
        return "".join(c if self.perm & b else "-" for c, b in (("r", PERM_R), ("w", PERM_W), ("x", PERM_X)))


class Program(NamedTuple):
    """A loaded guest: entry point, segments, the optional ``tohost``, and
    the fetch protection it runs under."""

    name: str
    entry: int
    segments: tuple[Segment, ...]
    tohost: int | None = None
    #: which memory instructions may be fetched from: "executable" (segments
    #: with PF_X only) or "any" (every mapped region, as the ISA has it); see
    #: :mod:`.machine`, "Fetch protection"
    fetch: str = "executable"


def _perm(p_flags: int) -> int:
    if p_flags & (PF_R | PF_W | PF_X) == 0:
        return PERM_R | PERM_W | PERM_X
    return (PERM_R if p_flags & PF_R else 0) | (PERM_W if p_flags & PF_W else 0) | (PERM_X if p_flags & PF_X else 0)


def load_elf(source: str | os.PathLike | bytes, name: str | None = None, *, fetch: str = "executable") -> Program:
    """Load a guest program from a path or from the file's bytes.

    ``fetch`` is the program's fetch protection (:data:`FETCH_MODES`).
    The same as :func:`read_elf`, then :func:`elf_layout`, then
    :func:`program_of`.

    Raises
    ------
    ElfError
        not an ELF file, not 64-bit, not little-endian, not RISC-V, no
        PT_LOAD segment, overlapping segments, an entry point outside every
        executable segment, or a truncated/malformed file.
    """
    _check_fetch(fetch)
    raw, label = read_elf(source, name)
    return program_of(elf_layout(raw, label), raw, label, fetch)


def _check_fetch(fetch: str) -> None:
    if fetch not in FETCH_MODES:
        raise ValueError(f"unknown fetch protection {fetch!r}; expected one of {', '.join(FETCH_MODES)}")


def read_elf(source: str | os.PathLike | bytes, name: str | None = None) -> tuple[bytes, str]:
    """The file's bytes and the label its errors name (``name``, else the path, else ``<bytes>``)."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), name or "<bytes>"
    label = name or os.fspath(source)
    try:
        with open(source, "rb") as f:
            return f.read(), label
    except OSError as e:
        raise ElfError(f"{label}: cannot read: {e.strerror or e}") from None


def elf_layout(raw: bytes, label: str) -> dict:
    """What a run needs of the file, as plain data: ``entry``, ``tohost``
    (None without the symbol) and ``segments``, each PT_LOAD with bytes to
    load as ``[vaddr, file offset, filesz, memsz, perm]`` in address order.

    Every check of the file happens here (:func:`load_elf`'s Raises), so
    a layout kept beside the file's digest stands for the file
    (:func:`hetflow.executors.emulator.native_main.load_program`).
    """
    from elftools.common.exceptions import ELFError as _PyElfError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.sections import SymbolTableSection

    if raw[:4] != b"\x7fELF":
        raise ElfError(f"{label}: not an ELF file (expected magic 7f 45 4c 46, found {raw[:4].hex(' ') or 'an empty file'})")
    if len(raw) < 6:
        raise ElfError(f"{label}: malformed ELF: truncated header")
    if raw[4] != 2:
        bits = {1: "32-bit"}.get(raw[4], f"class {raw[4]}")
        raise ElfError(f"{label}: {bits} ELF; expected a 64-bit (ELFCLASS64) RISC-V executable")
    if raw[5] != 1:
        raise ElfError(f"{label}: big-endian ELF; expected little-endian RISC-V")
    try:
        elf = ELFFile(io.BytesIO(raw))
        machine = elf["e_machine"]
        if machine not in ("EM_RISCV", EM_RISCV):
            raise ElfError(f"{label}: not a RISC-V ELF (e_machine is {machine}); expected EM_RISCV")
        if elf["e_type"] not in ("ET_EXEC",):
            raise ElfError(f"{label}: ELF type {elf['e_type']}; expected a static executable (ET_EXEC)")
        entry = int(elf["e_entry"])
        segments = []
        for seg in elf.iter_segments():
            if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
                continue
            filesz, memsz = int(seg["p_filesz"]), int(seg["p_memsz"])
            if filesz > memsz:
                raise ElfError(f"{label}: malformed PT_LOAD at {seg['p_vaddr']:#x}: p_filesz {filesz} > p_memsz {memsz}")
            data = seg.data()
            if len(data) != filesz:
                raise ElfError(f"{label}: malformed ELF: PT_LOAD at {seg['p_vaddr']:#x} is truncated")
            segments.append([int(seg["p_vaddr"]), int(seg["p_offset"]), filesz, memsz, _perm(int(seg["p_flags"]))])
        tohost = None
        symtab = elf.get_section_by_name(".symtab")
        if isinstance(symtab, SymbolTableSection):
            syms = symtab.get_symbol_by_name("tohost")
            if syms:
                tohost = int(syms[0]["st_value"])
    except ElfError:
        raise
    except (_PyElfError, ValueError, KeyError, IndexError, EOFError, OSError) as e:
        raise ElfError(f"{label}: malformed ELF: {e}") from None
    except Exception as e:  # pyelftools raises assorted errors on garbage (e.g. construct's)
        raise ElfError(f"{label}: malformed ELF: {type(e).__name__}: {e}") from None

    if not segments:
        raise ElfError(f"{label}: no PT_LOAD segment; nothing to load")
    segments.sort(key=lambda s: s[0])
    for (a, _, _, a_size, _), (b, _, _, b_size, _) in zip(segments, segments[1:]):
        if b < a + a_size:
            raise ElfError(f"{label}: PT_LOAD segments overlap: [{a:#x}, {a + a_size:#x}) and [{b:#x}, {b + b_size:#x})")
    if not any(perm & PERM_X and vaddr <= entry < vaddr + memsz for vaddr, _, _, memsz, perm in segments):
        raise ElfError(f"{label}: entry point {entry:#x} is not inside an executable PT_LOAD segment")
    if entry & 1:
        raise ElfError(f"{label}: entry point {entry:#x} is odd; instructions are 2-byte aligned")
    return {"entry": entry, "tohost": tohost, "segments": segments}


def program_of(layout: dict, raw: bytes, label: str, fetch: str = "executable") -> Program:
    """The :class:`Program` an :func:`elf_layout` of ``raw`` describes."""
    _check_fetch(fetch)
    segments = tuple(Segment(vaddr, raw[offset:offset + filesz] + bytes(memsz - filesz), perm)
                     for vaddr, offset, filesz, memsz, perm in layout["segments"])
    return Program(os.path.basename(label), layout["entry"], segments, layout["tohost"], fetch)
