"""Run a hetflow guest ELF under Unicorn (QEMU's RISC-V core): the same
memory map and guest ABI as :mod:`hetflow.executors.emulator.machine`
(segments, input, RAM, sp/a0/a1 at entry, the exit and write ecalls,
public outputs at OUTPUT_ADDR).  The independent emulator that the
emulator tests compare against and that the start-up benchmark times
``hetflow emulate`` beside.

Usage: ``python bench/unicorn_guest.py GUEST.elf [INPUT_FILE]``; prints
the guest's output and exits with its exit code, like ``hetflow emulate``.

It parses the ELF by hand (program headers only) so that its own start-up
is Unicorn's, not pyelftools'.
"""

from __future__ import annotations

import struct
import sys

INPUT_ADDR, RAM_ADDR, RAM_SIZE, OUTPUT_ADDR = 0x4000_0000, 0xA000_0000, 0x0040_0000, 0xA001_0000
SYS_WRITE, SYS_EXIT = 64, 93


def _segments(raw: bytes):
    entry, phoff = struct.unpack_from("<QQ", raw, 0x18)
    phentsize, phnum = struct.unpack_from("<HH", raw, 0x36)
    segs = []
    for i in range(phnum):
        p_type, _, p_offset, p_vaddr, _, p_filesz, p_memsz, _ = struct.unpack_from("<IIQQQQQQ", raw, phoff + i * phentsize)
        if p_type == 1 and p_memsz:
            segs.append((p_vaddr, raw[p_offset:p_offset + p_filesz] + bytes(p_memsz - p_filesz)))
    return entry, segs


def run(raw: bytes, input: bytes = b"", max_steps: int = 0) -> dict:
    """Run the guest; returns exit_code, stdout, pub_outs (64 u32) and the
    final integer registers x0..x31."""
    from unicorn import UC_ARCH_RISCV, UC_HOOK_INTR, UC_MODE_RISCV64, Uc
    from unicorn import riscv_const as R

    entry, segs = _segments(raw)
    uc = Uc(UC_ARCH_RISCV, UC_MODE_RISCV64)
    mapped = set()
    for vaddr, data in segs:
        for page in range(vaddr & ~0xFFF, (vaddr + len(data) + 0xFFF) & ~0xFFF, 0x1000):
            if page not in mapped:
                uc.mem_map(page, 0x1000)
                mapped.add(page)
        uc.mem_write(vaddr, data)
    blob = len(input).to_bytes(8, "little") + input
    uc.mem_map(INPUT_ADDR, (len(blob) + 0xFFF) & ~0xFFF)
    uc.mem_write(INPUT_ADDR, blob)
    uc.mem_map(RAM_ADDR, RAM_SIZE)
    uc.reg_write(R.UC_RISCV_REG_SP, RAM_ADDR + RAM_SIZE)
    uc.reg_write(R.UC_RISCV_REG_A0, INPUT_ADDR)
    uc.reg_write(R.UC_RISCV_REG_A1, OUTPUT_ADDR)
    out, code = bytearray(), [None]

    def ecall(uc, intno, _):
        a7 = uc.reg_read(R.UC_RISCV_REG_A7)
        if intno not in (8, 11) or a7 not in (SYS_WRITE, SYS_EXIT):
            raise RuntimeError(f"unicorn_guest: trap {intno} (a7 = {a7}) at pc {uc.reg_read(R.UC_RISCV_REG_PC):#x}")
        if a7 == SYS_EXIT:
            code[0] = uc.reg_read(R.UC_RISCV_REG_A0)
            uc.emu_stop()
        else:                                  # Unicorn has already moved pc past the ecall
            n = uc.reg_read(R.UC_RISCV_REG_A2)
            out.extend(uc.mem_read(uc.reg_read(R.UC_RISCV_REG_A1), n))
            uc.reg_write(R.UC_RISCV_REG_A0, n)

    uc.hook_add(UC_HOOK_INTR, ecall)
    uc.emu_start(entry, 0, count=max_steps)
    if code[0] is None:
        raise RuntimeError(f"unicorn_guest: stopped without an exit at pc {uc.reg_read(R.UC_RISCV_REG_PC):#x}")
    regs = [0] + [uc.reg_read(getattr(R, f"UC_RISCV_REG_X{i}")) for i in range(1, 32)]
    pub = struct.unpack("<64I", bytes(uc.mem_read(OUTPUT_ADDR, 256)))
    return {"exit_code": code[0], "stdout": bytes(out), "pub_outs": list(enumerate(pub)), "regs": regs}


def main(argv: list[str]) -> int:
    raw = open(argv[0], "rb").read()
    data = open(argv[1], "rb").read() if len(argv) > 1 else b""
    r = run(raw, data)
    sys.stdout.buffer.write(r["stdout"])
    return r["exit_code"] & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
