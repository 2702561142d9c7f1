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
import re
import struct
import os
import stat
from .tuples import FieldTuple, getters

__all__ = ["ElfError", "Segment", "Program", "load_elf", "read_elf", "elf_layout", "program_of", "PERM_R", "PERM_W",
           "PERM_X", "FETCH_MODES", "MEMORY_MODES", "ISAS", "symbol_at", "EF_RISCV_RVC", "EF_RISCV_FLOAT_ABI"]

PERM_R, PERM_W, PERM_X = 1, 2, 4

#: a program's fetch protection: "executable" faults on fetches outside
#: PF_X segments; "any" lets every mapped region be fetched from
FETCH_MODES = ("executable", "any")

#: a program's memory mode: "protected" gives each region the permissions of its ELF segment (or of its fixed
#: region); "flat" lets every mapped region be fetched from, loaded from and stored to, as a machine-mode hart
#: without PMP may (the official riscv-tests store into their code segment); flat implies fetch "any"
MEMORY_MODES = ("protected", "flat")

#: the instruction sets a program may declare: rv64imac runs compressed code; rv64ima refuses it at load (the
#: ELF's RVC flag) and at run time (a 16-bit parcel is an illegal instruction there)
ISAS = ("rv64imac", "rv64ima")

EM_RISCV = 243
# e_flags bits of the RISC-V psABI: the C extension is used; the float ABI (0 soft, 2 single, 4 double, 6 quad)
EF_RISCV_RVC = 0x1
EF_RISCV_FLOAT_ABI = 0x6
_FLOAT_ABIS = {0x2: "lp64f", 0x4: "lp64d", 0x6: "lp64q"}
PT_LOAD = 1
PT_RISCV_ATTRIBUTES = 0x70000003
PF_X, PF_W, PF_R = 1, 2, 4


class ElfError(ValueError):
    """The file is not a loadable static ELF64 RISC-V executable."""


# a FieldTuple, not typing's NamedTuple nor a namedtuple: ``hetflow emulate`` starts without the typing module
# (3 ms) and without compiling a namedtuple's __new__ (0.1 ms a class)
# The machine's fixed memory map (hetflow.executors.emulator.machine's docstring draws it): here, so that a
# program's segments are placed against it before their bytes are made.
INPUT_ADDR = 0x4000_0000
RAM_ADDR = 0xA000_0000
RAM_SIZE = 0x0040_0000                 # 4 MiB
UART_ADDR = 0xA000_0200
OUTPUT_ADDR = 0xA001_0000
N_OUTPUTS = 64
STACK_TOP = RAM_ADDR + RAM_SIZE
#: bytes at the bottom of a linked stack (:attr:`~.elf.Program.stack`) left unmapped: a deeper stack traps
#: there instead of running through the heap and the public outputs
STACK_GUARD = 0x1000


class Segment(FieldTuple):
    # vaddr: int; data: bytes, memsz bytes: file contents, then zeros; perm: int, PERM_R | PERM_W | PERM_X
    __slots__ = ()
    _fields = ("vaddr", "data", "perm")
    vaddr, data, perm = getters(3)

    def __new__(cls, vaddr, data, perm):
        return tuple.__new__(cls, (vaddr, data, perm))

    @property
    def end(self) -> int:
        return self.vaddr + len(self.data)

    def perm_text(self) -> str:
        return "".join(c if self.perm & b else "-" for c, b in (("r", PERM_R), ("w", PERM_W), ("x", PERM_X)))


class Program(FieldTuple):
    """A loaded guest: entry point, segments, the optional ``tohost``, and
    the fetch protection it runs under."""

    __slots__ = ()
    _fields = ("name", "entry", "segments", "tohost", "fetch", "stack", "memory", "symbols", "isa")
    name, entry, segments, tohost, fetch, stack, memory, symbols, isa = getters(9)

    def __new__(cls, name, entry, segments, tohost=None, fetch="executable", stack=None, memory="protected",
                symbols=(), isa="rv64imac"):
        return tuple.__new__(cls, (name, entry, segments, tohost, fetch, stack, memory, symbols, isa))
    # The fields, in order:
    # name: str; entry: int; segments: tuple[Segment, ...]; tohost: int | None
    # fetch: which memory instructions may be fetched from: "executable" (segments with PF_X only) or "any"
    #   (every mapped region, as the ISA has it); see :mod:`.machine`, "Fetch protection"
    # stack: ``(lowest byte, top)`` of the stack the program was linked for, from its ``__stack_top`` and
    #   ``__stack_size`` symbols (the SDK's link.ld defines both), or None; the machine puts an unmapped
    #   guard at its bottom (:func:`hetflow.executors.emulator.machine.build_regions`)
    # memory: "protected" or "flat" (:data:`MEMORY_MODES`; flat goes with fetch "any", which :func:`load_elf`
    #   sets); see :mod:`.machine`, "Memory modes"
    # symbols: ``(address, end, name)`` of the code symbols in ``.symtab``, by address (:func:`symbol_at`
    #   names a pc with them in trap messages); empty for a stripped ELF
    # isa: "rv64imac" or "rv64ima" (:data:`ISAS`): under rv64ima every backend decodes a 16-bit parcel met
    #   at run time as an illegal instruction, whatever the ELF's flags said at load


def _perm(p_flags: int) -> int:
    if p_flags & (PF_R | PF_W | PF_X) == 0:
        return PERM_R | PERM_W | PERM_X
    return (PERM_R if p_flags & PF_R else 0) | (PERM_W if p_flags & PF_W else 0) | (PERM_X if p_flags & PF_X else 0)


#: where the guest's addresses end: its registers are 64 bits, and every backend keeps an address as a signed one
ADDRESS_LIMIT = 1 << 63
#: the most guest memory a program's segments may ask for, and of it the most that is code: the fast backend keeps
#: a decoded form of every executable slot (about twenty times the code's bytes)
MAX_LOAD_BYTES = 1 << 30
MAX_CODE_BYTES = 64 << 20
#: the largest ELF file read: its segments' bytes and room beside them for symbols and debugging sections
MAX_FILE_BYTES = 2 << 30


def load_elf(source: str | os.PathLike | bytes, name: str | None = None, *, fetch: str = "executable",
             isa: str = "rv64imac", memory: str = "protected") -> Program:
    """Load a guest program from a path or from the file's bytes.

    ``fetch`` is the program's fetch protection (:data:`FETCH_MODES`);
    ``isa`` the instruction set it is declared for (:data:`ISAS`);
    ``memory`` its memory mode (:data:`MEMORY_MODES`: "flat" implies
    fetch "any"). The same as :func:`read_elf`, then :func:`elf_layout`, then
    :func:`program_of`.

    Raises
    ------
    ElfError
        not an ELF file, not 64-bit, not little-endian, not RISC-V, no
        PT_LOAD segment, overlapping segments, an entry point outside every
        executable segment, a truncated/malformed file, a float ABI
        (e_flags) that needs F or D, or the RVC flag under ``isa="rv64ima"``.
    """
    _check_fetch(fetch, memory)
    raw, label = read_elf(source, name)
    return program_of(elf_layout(raw, label), raw, label, fetch, isa, memory)


def _check_fetch(fetch: str, memory: str = "protected") -> None:
    if fetch not in FETCH_MODES:
        raise ValueError(f"unknown fetch protection {fetch!r}; expected one of {', '.join(FETCH_MODES)}")
    if memory not in MEMORY_MODES:
        raise ValueError(f"unknown memory mode {memory!r}; expected one of {', '.join(MEMORY_MODES)}")


def read_elf(source: str | os.PathLike | bytes, name: str | None = None) -> tuple[bytes, str]:
    """The file's bytes and the label its errors name (``name``, else the path, else ``<bytes>``)."""
    if isinstance(source, (bytes, bytearray)):
        return bytes(source), name or "<bytes>"
    label = name or os.fspath(source)
    try:
        # opened without waiting, then looked at: a FIFO would hold the open until something writes to it, and
        # a device such as /dev/zero would be read without end
        fd = os.open(source, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ElfError(f"{label}: cannot read: {e.strerror or e}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            from hetflow.executors.files import not_a_file

            raise ElfError(f"{label}: {not_a_file(os.fspath(source))}")
        if info.st_size > MAX_FILE_BYTES:
            # the whole file is read into memory: a sparse or mistaken one of many gigabytes would take them
            raise ElfError(f"{label}: {info.st_size:,} bytes; a guest program's ELF file is at most "
                           f"{MAX_FILE_BYTES:,} (its segments load at most {MAX_LOAD_BYTES:,})")
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(), label
    except OSError as e:
        raise ElfError(f"{label}: cannot read: {e.strerror or e}") from None
    finally:
        os.close(fd)


def _check_tables(raw: bytes, label: str) -> None:
    """The ELF64 header's tables, and each PT_LOAD's bytes, lie within the file.

    pyelftools reads past the end as if the file went on (``expected 4,
    found 0``), turns an offset past 2^63 into ``OverflowError``, and a
    program header table past the end into no segments at all ("no
    PT_LOAD segment"): each is said here as what it is.
    """
    size = len(raw)
    if size < 64:
        raise ElfError(f"{label}: malformed ELF: truncated header ({size} bytes; an ELF64 header has 64)")
    phoff, shoff = struct.unpack_from("<QQ", raw, 32)
    phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", raw, 54)
    for what, offset, entsize, count, least in (("program header", phoff, phentsize, phnum, 56),
                                                ("section header", shoff, shentsize, shnum, 64)):
        if count == 0:
            continue
        if entsize < least:
            raise ElfError(f"{label}: malformed ELF: {what} entries of {entsize} bytes (e_{what[0]}hentsize); "
                           f"an ELF64 one has {least}")
        if offset + entsize * count > size:
            raise ElfError(f"{label}: malformed ELF: the {what} table ({count} entries of {entsize} bytes at offset "
                           f"{offset:#x}) ends past the file's {size} bytes (cut short?)")
    for k in range(shnum):
        sh_type, = struct.unpack_from("<I", raw, shoff + k * shentsize + 4)
        sh_offset, sh_size = struct.unpack_from("<QQ", raw, shoff + k * shentsize + 24)
        if sh_type != 8 and sh_size and sh_offset + sh_size > size:  # 8: SHT_NOBITS (.bss) has no bytes in the file
            raise ElfError(f"{label}: malformed ELF: section {k} takes {sh_size:#x} bytes at offset {sh_offset:#x}, "
                           f"past the file's {size} bytes (cut short?)")
    for k in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz = struct.unpack_from("<IIQQQQ", raw, phoff + k * phentsize)
        if p_type == 1 and p_filesz and p_offset + p_filesz > size:
            raise ElfError(f"{label}: malformed ELF: PT_LOAD at {p_vaddr:#x} takes {p_filesz:#x} bytes at offset "
                           f"{p_offset:#x}, past the file's {size} bytes (cut short?)")


# What the ELF's RISC-V attributes may name (Tag_RISCV_arch): the base, M, A, C and the extensions the emulator
# implements (Zicntr: cycle, time and instret read the step) or that only add hints to the base (they execute
# as the base instructions they are encoded as)
_SUPPORTED_LETTERS = frozenset("imac")
_SUPPORTED_EXTENSIONS = frozenset(("zicsr", "zifencei", "zicntr", "zmmul", "zaamo", "zalrsc", "zca",
                                   "zihintpause", "zihintntl", "zicbop"))
_ARCH_STRING = re.compile(rb"rv(?:32|64)[a-z0-9_]*")


def _check_arch(attributes: bytes, label: str) -> None:
    """Refuse an ELF whose recorded ISA has extensions the emulator lacks.

    A soft-float ELF built with ``-march=rv64gc -mabi=lp64`` (or with Zbb)
    has a clean e_flags and would otherwise die at its first float or
    bit-manipulation instruction with a bare "illegal instruction".
    """
    m = _ARCH_STRING.search(attributes)
    if m is None:
        return
    arch = m.group().decode()
    tokens = arch[4:].split("_")
    missing = []
    if tokens[0]:
        # the first token holds the single-letter extensions, each with an optional version (rv64i2p1 or rv64imac)
        for letter in re.sub(r"\d+(?:p\d+)?", "", tokens[0]):
            if letter not in _SUPPORTED_LETTERS:
                missing.append(letter.upper())
    for token in tokens[1:]:
        name = re.sub(r"\d+(?:p\d+)?$", "", token)
        if not name:
            continue
        if len(name) == 1:
            if name not in _SUPPORTED_LETTERS:
                missing.append(name.upper())
        elif name not in _SUPPORTED_EXTENSIONS:
            missing.append(name.capitalize())
    if missing:
        raise ElfError(f"{label}: this ELF was built for {arch} (its RISC-V attributes), which has "
                       f"{', '.join(dict.fromkeys(missing))}: hetflow's emulator runs rv64ima[c] with Zicsr and Zifencei; "
                       f"build with -march=rv64imac_zicsr_zifencei -mabi=lp64")


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
    _check_tables(raw, label)
    try:
        elf = ELFFile(io.BytesIO(raw))
        machine = elf["e_machine"]
        if machine not in ("EM_RISCV", EM_RISCV):
            raise ElfError(f"{label}: not a RISC-V ELF (e_machine is {machine}); expected EM_RISCV")
        if elf["e_type"] not in ("ET_EXEC",):
            raise ElfError(f"{label}: ELF type {elf['e_type']}; expected a static executable (ET_EXEC)")
        flags = int(elf["e_flags"])
        abi = _FLOAT_ABIS.get(flags & EF_RISCV_FLOAT_ABI)
        if abi is not None:
            # F/D code would die later on its first float instruction with a bare "illegal instruction"
            raise ElfError(f"{label}: this ELF uses the {abi} float ABI (e_flags {flags:#x}): hetflow's emulator runs "
                           f"rv64ima[c] without F/D; build with -march=rv64imac -mabi=lp64")
        entry = int(elf["e_entry"])
        segments = []
        for seg in elf.iter_segments():
            if seg["p_type"] in ("PT_RISCV_ATTRIBUTES", PT_RISCV_ATTRIBUTES):
                _check_arch(seg.data(), label)
            if seg["p_type"] != "PT_LOAD" or seg["p_memsz"] == 0:
                continue
            filesz, memsz = int(seg["p_filesz"]), int(seg["p_memsz"])
            if filesz > memsz:
                raise ElfError(f"{label}: malformed PT_LOAD at {seg['p_vaddr']:#x}: p_filesz {filesz} > p_memsz {memsz}")
            # a segment of zeros alone (.bss) has no bytes in the file, wherever its p_offset says they would be
            if filesz and len(seg.data()) != filesz:
                raise ElfError(f"{label}: malformed ELF: PT_LOAD at {seg['p_vaddr']:#x} is truncated")
            segments.append([int(seg["p_vaddr"]), int(seg["p_offset"]), filesz, memsz, _perm(int(seg["p_flags"]))])
        tohost = stack = None
        symbols = []
        symtab = elf.get_section_by_name(".symtab")
        if isinstance(symtab, SymbolTableSection):
            syms = symtab.get_symbol_by_name("tohost")
            if syms:
                tohost = int(syms[0]["st_value"])
            top, size = symtab.get_symbol_by_name("__stack_top"), symtab.get_symbol_by_name("__stack_size")
            if top and size:
                top, size = int(top[0]["st_value"]), int(size[0]["st_value"])
                stack = [top - size, top]
            symbols = _code_symbols(symtab, segments)
    except ElfError:
        raise
    except (_PyElfError, ValueError, KeyError, IndexError, EOFError, OSError) as e:
        raise ElfError(f"{label}: malformed ELF: {e}") from None
    except Exception as e:  # pyelftools raises assorted errors on garbage (e.g. construct's)
        raise ElfError(f"{label}: malformed ELF: {type(e).__name__}: {e}") from None

    if not segments:
        raise ElfError(f"{label}: no PT_LOAD segment; nothing to load")
    for vaddr, _, _, memsz, perm in segments:
        if vaddr + memsz > ADDRESS_LIMIT:
            raise ElfError(f"{label}: PT_LOAD at {vaddr:#x} of {memsz:#x} bytes ends at {vaddr + memsz:#x}, past the "
                           f"guest's address space (addresses below {ADDRESS_LIMIT:#x})")
    loaded = sum(s[3] for s in segments)
    code = sum(s[3] for s in segments if s[4] & PERM_X)
    if loaded > MAX_LOAD_BYTES or code > MAX_CODE_BYTES:
        what, size, most = ("executable segments", code, MAX_CODE_BYTES) if code > MAX_CODE_BYTES else \
            ("PT_LOAD segments", loaded, MAX_LOAD_BYTES)
        raise ElfError(f"{label}: its {what} take {size:,} bytes of guest memory (p_memsz); a guest loads at most "
                       f"{most:,}")
    segments.sort(key=lambda s: s[0])
    for (a, _, _, a_size, _), (b, _, _, b_size, _) in zip(segments, segments[1:]):
        if b < a + a_size:
            raise ElfError(f"{label}: PT_LOAD segments overlap: [{a:#x}, {a + a_size:#x}) and [{b:#x}, {b + b_size:#x})")
    if not any(perm & PERM_X and vaddr <= entry < vaddr + memsz for vaddr, _, _, memsz, perm in segments):
        raise ElfError(f"{label}: entry point {entry:#x} is not inside an executable PT_LOAD segment")
    if entry & 1:
        raise ElfError(f"{label}: entry point {entry:#x} is odd; instructions are 2-byte aligned")
    return {"entry": entry, "tohost": tohost, "segments": segments, "flags": flags, "stack": stack, "symbols": symbols}


def _code_symbols(symtab, segments) -> list:
    """``[address, end, name]`` of the functions and code labels in executable segments, by address.

    A sized symbol (a C function) ends at ``address + st_size``; an
    unsized one (an assembly label such as riscv-tests' ``test_6``) runs to
    its segment's end, so the nearest label before a pc names it.
    Assembler-local ``.L`` labels and ``$x``/``$d`` mapping symbols name
    nothing a reader wrote.
    """
    code = [(vaddr, vaddr + memsz) for vaddr, _, _, memsz, perm in segments if perm & PERM_X]
    found = {}
    for sym in symtab.iter_symbols():
        name, kind, addr = sym.name, sym["st_info"]["type"], int(sym["st_value"])
        if not name or name[0] in ".$" or kind not in ("STT_FUNC", "STT_NOTYPE") or sym["st_shndx"] == "SHN_UNDEF":
            continue
        seg = next(((lo, hi) for lo, hi in code if lo <= addr < hi), None)
        if seg is None:
            continue
        if not name.isprintable():
            # a name is the file's to choose: a line break or a terminal escape in it would end a trap's one-line
            # message early, or act on the terminal it is printed to
            name = name.encode("unicode_escape").decode("ascii")
        end = addr + int(sym["st_size"]) if sym["st_size"] else seg[1]
        # one name an address: a function before a label at its first instruction, a global before a local
        rank = (kind == "STT_FUNC", sym["st_info"]["bind"] == "STB_GLOBAL")
        if addr not in found or rank > found[addr][0]:
            found[addr] = (rank, [addr, end, name])
    return [found[a][1] for a in sorted(found)]


def symbol_at(symbols, pc: int) -> str | None:
    """``name+0xoff`` of the symbol whose code holds ``pc`` (:attr:`Program.symbols`), or None.

    >>> symbol_at(((0x80000000, 0x80000040, "_start"), (0x80000040, 0x80000100, "main")), 0x80000064)
    'main+0x24'
    >>> symbols = ((0x80000000, 0x80001000, "_start"), (0x80000040, 0x80000100, "main"))
    >>> symbol_at(symbols, 0x80000040), symbol_at(symbols, 0x80000104), symbol_at(symbols, 0x40)
    ('main', '_start+0x104', None)
    """
    import bisect

    i = bisect.bisect_right(symbols, pc, key=lambda s: s[0]) - 1
    # past the end of the nearest function (in code no symbol sizes) the pc may still be in an enclosing label's
    while i >= 0 and not pc < symbols[i][1]:
        i -= 1
    if i < 0:
        return None
    addr, _, name = symbols[i]
    return name if pc == addr else f"{name}+{pc - addr:#x}"


def program_of(layout: dict, raw: bytes, label: str, fetch: str = "executable", isa: str = "rv64imac",
               memory: str = "protected") -> Program:
    """The :class:`Program` an :func:`elf_layout` of ``raw`` describes,
    refused when it uses compressed code and ``isa`` is rv64ima."""
    _check_fetch(fetch, memory)
    if isa not in ISAS:
        raise ValueError(f"unknown isa {isa!r}; expected one of {', '.join(ISAS)}")
    if isa == "rv64ima" and layout["flags"] & EF_RISCV_RVC:
        raise ElfError(f"{label}: this ELF uses compressed instructions (the RVC flag is set in e_flags "
                       f"{layout['flags']:#x}) but its isa is rv64ima; declare isa rv64imac or build with "
                       f"-march=rv64ima -mabi=lp64")
    stack = tuple(layout["stack"]) if layout["stack"] else None
    # refusals name the file as it was given, as every other refusal of the file does
    segment_places(Program(label, layout["entry"], (), stack=stack),
                   [(vaddr, memsz, perm) for vaddr, _, _, memsz, perm in layout["segments"]])
    segments = tuple(Segment(vaddr, raw[offset:offset + filesz] + bytes(memsz - filesz), perm)
                     for vaddr, offset, filesz, memsz, perm in layout["segments"])
    # flat memory fetches from anywhere mapped: one Program.fetch for the backends to read, whatever was asked
    symbols = tuple(tuple(s) for s in layout.get("symbols", ()))
    return Program(os.path.basename(label), layout["entry"], segments, layout["tohost"],
                   "any" if memory == "flat" else fetch, stack, memory, symbols, isa)


def stack_guard(program: Program) -> tuple[int, int] | None:
    """The unmapped ``[low, high)`` at the bottom of the program's linked stack, or None.

    Only a stack at the machine's STACK_TOP, above the public outputs and
    larger than the guard gets one: the symbols of another layout say
    nothing about this machine's.

    >>> from hetflow.executors.emulator.elf import Program
    >>> [hex(a) for a in stack_guard(Program("g", 0, (), stack=(STACK_TOP - 0x40000, STACK_TOP)))]
    ['0xa03c0000', '0xa03c1000']
    >>> stack_guard(Program("g", 0, ())) is None
    True
    """
    if program.stack is None:
        return None
    low, top = program.stack
    if top != STACK_TOP or low % 8 or low < OUTPUT_ADDR + 4 * N_OUTPUTS or top - low <= STACK_GUARD:
        return None
    return low, low + STACK_GUARD


def _perm_text(perm: int) -> str:
    return "".join(c if perm & b else "-" for c, b in (("r", PERM_R), ("w", PERM_W), ("x", PERM_X)))


def check_places(name: str, places: list[tuple[str, int, int]]) -> None:
    """Refuse regions ``(name, base, size)``, sorted by base, of which two overlap."""
    for (a, a_base, a_size), (b, b_base, b_size) in zip(places, places[1:]):
        if b_base < a_base + a_size:
            raise ElfError(f"{name}: memory regions collide: {a} [{a_base:#x}, {a_base + a_size:#x}) "
                           f"and {b} [{b_base:#x}, {b_base + b_size:#x}); link the program at 0x80000000 "
                           f"and keep segments 8-byte apart")


def segment_places(program: Program, spans: list[tuple[int, int, int]]) -> None:
    """Refuse segments ``(vaddr, memsz, perm)`` that collide with one another or with the machine's RAM, stack and
    input (of no bytes): before their bytes are made (a 512 MiB ``.bss`` over RAM cost its size in memory first).
    A longer input can still collide at the run, which :func:`build_regions` refuses then."""
    # each widened to whole 8-byte words, as build_regions widens it
    places = [(f"segment{i}[{_perm_text(perm)}]", vaddr & ~7, ((vaddr + memsz + 7) & ~7) - (vaddr & ~7))
              for i, (vaddr, memsz, perm) in enumerate(spans)]
    places.append(("input", INPUT_ADDR, 8))
    guard = stack_guard(program)
    if guard is None:
        places.append(("ram", RAM_ADDR, RAM_SIZE))
    else:
        places += [("ram", RAM_ADDR, guard[0] - RAM_ADDR), ("stack", guard[1], STACK_TOP - guard[1])]
    check_places(program.name, sorted(places, key=lambda r: r[1]))
