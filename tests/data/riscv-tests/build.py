"""Build the official riscv-tests p-tests that hetflow's emulator runs (rv64ui, rv64um, rv64ua, rv64uc).

The sources under ``src/`` are riscv-tests' ``isa/`` and its ``env``
submodule, unchanged (BSD licence: ``LICENSE``), at the commits named in
``SOURCE``.  The ELFs in ``elf/`` were built by it; rebuild them
with::

    python tests/data/riscv-tests/build.py            # all 87, into elf/
    python tests/data/riscv-tests/build.py --out DIR rv64ui-p-add

The compiler is zig's clang and lld from the PyPI package ``ziglang``
(``pip install ziglang``).
The flags are riscv-tests' own (``isa/Makefile``: ``-static -mcmodel=medany
-fvisibility=hidden -nostdlib -nostartfiles``, ``env/p/link.ld``) with one
change: ``-march=rv64ima_zicsr_zifencei -mabi=lp64`` where the Makefile
says ``rv64g``/``lp64d``, because the emulator runs no F/D and refuses an
ELF whose float ABI needs them; none of these tests uses F or D, and
``rvc.S`` turns compressed code on itself (``.option rvc``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.join(HERE, "src")

#: the tests of riscv-tests' ``isa/rv64u?/Makefrag`` (``rv64u?_sc_tests``), in their order
SUITES = {
    "rv64ui": ("add addi addiw addw and andi auipc beq bge bgeu blt bltu bne simple fence_i jal jalr lb lbu lh lhu "
               "lw lwu ld ld_st lui ma_data or ori sb sh sw sd st_ld sll slli slliw sllw slt slti sltiu sltu sra "
               "srai sraiw sraw srl srli srliw srlw sub subw xor xori").split(),
    "rv64um": "div divu divuw divw mul mulh mulhsu mulhu mulw rem remu remuw remw".split(),
    "rv64ua": ("amoadd_d amoand_d amomax_d amomaxu_d amomin_d amominu_d amoor_d amoxor_d amoswap_d amoadd_w amoand_w "
               "amomax_w amomaxu_w amomin_w amominu_w amoor_w amoxor_w amoswap_w lrsc").split(),
    "rv64uc": ["rvc"],
}

#: every test's ELF name (``rv64ui-p-add``) -> its source, relative to ``src/``
TESTS = {f"{suite}-p-{t}": os.path.join("isa", suite, f"{t}.S") for suite, names in SUITES.items() for t in names}

# zig cc takes the extensions as a CPU, not as -march (it refuses -march=rv64ima_zicsr_zifencei); -nostartfiles
# is implied by the freestanding target
ZIG_FLAGS = ["-target", "riscv64-freestanding-none", "-mcpu=generic_rv64+m+a+zicsr+zifencei-c", "-mabi=lp64",
             "-static", "-mcmodel=medany", "-fvisibility=hidden", "-nostdlib", "-Wno-unused-command-line-argument"]


def compiler() -> list[str] | None:
    """The compiler command and its target flags, or None where there is none."""
    try:
        import ziglang  # noqa: F401  (only its presence: ``python -m ziglang`` runs it)
    except ImportError:
        return None
    return [sys.executable, "-m", "ziglang", "cc", *ZIG_FLAGS]


def build(name: str, out: str, cc: list[str]) -> str:
    """Compile test ``name`` (a key of :data:`TESTS`) to ``out/name``; its path."""
    path = os.path.join(out, name)
    cmd = [*cc, "-I", os.path.join(SRC, "env", "p"), "-I", os.path.join(SRC, "isa", "macros", "scalar"),
           "-T", os.path.join(SRC, "env", "p", "link.ld"), os.path.join(SRC, TESTS[name]), "-o", path]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", nargs="*", help="tests to build, as rv64ui-p-add (default: all)")
    ap.add_argument("--out", default=os.path.join(HERE, "elf"), help="folder for the ELFs (default: elf/)")
    args = ap.parse_args(argv)
    cc = compiler()
    if cc is None:
        print("no compiler: pip install ziglang", file=sys.stderr)
        return 2
    unknown = [t for t in args.tests if t not in TESTS]
    if unknown:
        print(f"unknown tests: {', '.join(unknown)}; expected names like rv64ui-p-add", file=sys.stderr)
        return 2
    os.makedirs(args.out, exist_ok=True)
    for name in args.tests or TESTS:
        try:
            build(name, args.out, cc)
        except subprocess.CalledProcessError as e:
            print(f"{name}: {' '.join(e.cmd)}\n{e.stderr}", file=sys.stderr)
            return 1
    print(f"built {len(args.tests or TESTS)} tests into {args.out} with {' '.join(cc[:4])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
