"""Random C programs, compiled by a real compiler, on every emulator backend and on Unicorn: do they agree?

Each program is generated from its seed: globals, arrays and functions of
every integer width mixing arithmetic, shifts, comparisons, branches,
bounded loops, switches (jump tables), calls with up to 11 arguments
(some on the stack), struct copies through ``memcpy``/``memset``,
128-bit multiplies and shifts (compiler-rt), AMOs through ``__atomic``
builtins, and M-extension instructions fed raw operands by inline
assembly (division by zero, the most negative number divided by -1,
``mulhsu``, the W forms). It is compiled with zig's clang
(``pip install ziglang``) against the guest SDK
(``examples/guests/sdk``) at a random ``-O`` level, with or without the
C extension, and run from random input on the ``reference``, ``fast``
and ``native`` backends with the same chunk size, and on Unicorn
(``bench/unicorn_guest.py``; ``pip install unicorn``). The backends must
give the same ``ExecutionOutput`` field for field (min traces, counters,
steps, outputs, exit), and Unicorn the same exit code, output bytes,
public outputs and final registers (each backend's last chunk
re-executed). A program that does not end within ``--max-steps`` must
end the same way everywhere.

    python bench/emu_diff.py                         # 40 programs from seed 1
    python bench/emu_diff.py --programs 200 --seed 7 --backends fast,native

Programs that differ are kept with their ELF in ``bench/.cache/emu_diff``
and named; the exit code is 1 when any did. Floating point is left out:
zig's compiler-rt for this target is built for addresses below 2 GiB,
and the SDK links programs at 0x80000000.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SDK = HERE.parent / "examples" / "guests" / "sdk"
OUT = HERE / ".cache" / "emu_diff"

TYPES = ["uint8_t", "int8_t", "uint16_t", "int16_t", "uint32_t", "int32_t", "uint64_t", "int64_t"]
BITS = {t: int("".join(c for c in t if c.isdigit())) for t in TYPES}
HW = ["div", "divu", "rem", "remu", "divw", "divuw", "remw", "remuw", "mulh", "mulhu", "mulhsu", "mulw",
      "sllw", "srlw", "sraw"]


class Program:
    """The C text of one random program."""

    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.globals: list[tuple[str, str]] = []
        self.arrays: list[tuple[str, str, int]] = []
        self.atomics: list[tuple[str, str]] = []
        self.funcs: list[tuple[str, int]] = []
        self.in_loop = 0

    def const(self, t: str) -> str:
        r, b = self.r, BITS[t]
        v = r.choice([0, 1, 2, 3, -1, (1 << (b - 1)) - 1, -(1 << (b - 1)), r.getrandbits(b), r.randrange(-100, 100)])
        if t.startswith("u"):
            return f"({t}){v & ((1 << b) - 1)}ULL"
        return f"({t})(-9223372036854775807LL-1)" if v == -(1 << 63) else f"({t}){v}LL"

    def expr(self, names: list[tuple[str, str]], depth: int = 0) -> str:
        r = self.r
        if depth > 3 or r.random() < 0.3:
            k = r.random()
            if names and k < 0.6:
                return r.choice(names)[0]
            if self.arrays and k < 0.8:
                a, _, n = r.choice(self.arrays)
                return f"{a}[({self.expr(names, depth + 1)}) & {n - 1}]"
            return self.const(r.choice(TYPES))
        op = r.choice(["+", "-", "*", "&", "|", "^", "<<", ">>", "/", "%", "cmp", "cast", "tern", "call", "not",
                       "hw", "i128", "atomic", "bits"])
        a, b, t = self.expr(names, depth + 1), self.expr(names, depth + 1), r.choice(TYPES)
        if op in ("+", "-", "*", "&", "|", "^"):
            return f"(({t})({a}) {op} ({t})({b}))"
        if op in ("<<", ">>"):
            return f"(({t})({a}) {op} ((unsigned)({b}) & {BITS[t] - 1}))"
        if op in ("/", "%"):
            if t.startswith("u"):
                return f"(({t})({a}) {op} ((({t})({b})) ? ({t})({b}) : ({t})7))"
            return f"sdiv_{'q' if op == '/' else 'r'}((int64_t)({t})({a}), (int64_t)({t})({b}))"
        if op == "cmp":
            return f"(({t})({a}) {r.choice(['<', '>', '<=', '>=', '==', '!='])} ({t})({b}))"
        if op == "cast":
            return f"({t})({a})"
        if op == "tern":
            return f"(({a}) ? ({t})({b}) : ({t})({self.expr(names, depth + 1)}))"
        if op == "call" and self.funcs and not self.in_loop:
            f, n = r.choice(self.funcs)
            return f"{f}({', '.join(self.expr(names, depth + 2) for _ in range(n))})"
        if op == "not":
            return f"(~({t})({a}))"
        if op == "hw":
            return f"hw_{r.choice(HW)}((uint64_t)({a}), (uint64_t)({b}))"
        if op == "i128":
            o = r.choice(["*", ">>", "<<", "+"])
            if o in ("<<", ">>"):
                return f"(uint64_t)((((__int128)(int64_t)({a}) << 64) | (uint64_t)({b})) {o} ((unsigned)({b}) & 127))"
            return f"(uint64_t)(((unsigned __int128)({a}) {o} (unsigned __int128)({b})) >> 64)"
        if op == "atomic":
            g, gt = r.choice(self.atomics)
            fn = r.choice(["__atomic_fetch_add", "__atomic_fetch_and", "__atomic_fetch_or", "__atomic_fetch_xor",
                           "__atomic_exchange_n", "__atomic_fetch_sub"])
            return f"(uint64_t){fn}(&{g}, ({gt})({a}), __ATOMIC_SEQ_CST)"
        if op == "bits":
            return r.choice([f"__builtin_bswap64((uint64_t)({a}))", f"(uint64_t)__builtin_popcountll((uint64_t)({a}))",
                             f"(uint64_t)__builtin_parityll((uint64_t)({a}))"])
        return f"(({t})({a}) + ({t})({b}))"

    def stmt(self, names, depth, lines, ind, counters=()):
        r, p = self.r, "    " * ind
        k = r.random()
        readable = list(names) + list(counters)
        if k < 0.45 or depth > 2:
            if names and r.random() < 0.7:
                v, t = r.choice(names)
                lines.append(f"{p}{v} {r.choice(['=', '+=', '^=', '-=', '|='])} ({t})({self.expr(readable)});")
            elif self.arrays:
                a, t, n = r.choice(self.arrays)
                lines.append(f"{p}{a}[({self.expr(readable)}) & {n - 1}] = ({t})({self.expr(readable)});")
        elif k < 0.6:
            lines.append(f"{p}if ({self.expr(readable)}) {{")
            for _ in range(r.randint(1, 3)):
                self.stmt(names, depth + 1, lines, ind + 1, counters)
            lines.append(f"{p}}} else {{")
            for _ in range(r.randint(0, 2)):
                self.stmt(names, depth + 1, lines, ind + 1, counters)
            lines.append(f"{p}}}")
        elif k < 0.75:
            i = f"i{depth}_{len(lines)}"
            lines.append(f"{p}for (int {i} = 0; {i} < {r.randint(1, 12)}; {i}++) {{")
            self.in_loop += 1
            for _ in range(r.randint(1, 3)):
                self.stmt(names, depth + 1, lines, ind + 1, [*counters, (i, "int32_t")])
            self.in_loop -= 1
            lines.append(f"{p}}}")
        elif k < 0.85 and names:
            v, t = r.choice(names)
            lines.append(f"{p}switch ((uint32_t)({self.expr(readable)}) % 9) {{")
            for c in range(r.randint(3, 9)):
                lines.append(f"{p}case {c}: {v} += ({t})({self.expr(readable)}); {r.choice(['break;', ''])}")
            lines.append(f"{p}default: {v} ^= ({t}){r.randint(0, 999)};")
            lines.append(f"{p}}}")
        elif names:
            v, _ = r.choice(names)
            lines.append(f"{p}{{ struct blob b; memset(&b, (int)({self.expr(readable)}), sizeof b); "
                         f"b.x[{r.randint(0, 6)}] = (uint8_t)({self.expr(readable)}); "
                         f"memcpy(&{v}, (uint8_t *)&b + {r.randint(0, 8)}, sizeof {v}); }}")

    def function(self, index: int) -> list[str]:
        r = self.r
        params = [(f"p{i}", r.choice(TYPES)) for i in range(r.randint(0, 11))]
        rt = r.choice(TYPES)
        inline = "__attribute__((noinline)) " if r.random() < 0.6 else ""
        lines = [f"static {inline}{rt} f{index}({', '.join(f'{t} {v}' for v, t in params) or 'void'}) {{"]
        local = [(f"l{i}", r.choice(TYPES)) for i in range(r.randint(1, 4))]
        lines += [f"    {t} {v} = {self.const(t)};" for v, t in local]
        names = params + local + self.globals
        for _ in range(r.randint(2, 8)):
            self.stmt(names, 0, lines, 1)
        lines += [f"    return ({rt})({self.expr(names)});", "}"]
        self.funcs.append((f"f{index}", len(params)))
        return lines

    def text(self) -> str:
        r = self.r
        lines = ['#include "guest.h"', "int printf(const char *, ...);",
                 "void *memcpy(void *, const void *, unsigned long); void *memset(void *, int, unsigned long);",
                 "struct blob { uint8_t x[24]; };",
                 "static int64_t sdiv_q(int64_t a, int64_t b) { volatile int64_t d = b; "
                 "return (d == 0 || (a == INT64_MIN && d == -1)) ? a : a / d; }",
                 "static int64_t sdiv_r(int64_t a, int64_t b) { volatile int64_t d = b; "
                 "return (d == 0 || (a == INT64_MIN && d == -1)) ? a : a % d; }",
                 "static uint64_t input_word(int i) { uint64_t n = input_len(), v = 0; "
                 "for (int k = 0; k < 8; k++) v = v << 8 | (n ? input_bytes()[(8 * i + k) % n] : 0); return v; }"]
        lines += [f'static uint64_t hw_{i}(uint64_t a, uint64_t b) {{ uint64_t r; '
                  f'__asm__ volatile("{i} %0, %1, %2" : "=r"(r) : "r"(a), "r"(b)); return r; }}' for i in HW]
        for i in range(r.randint(2, 8)):
            t = r.choice(TYPES)
            self.globals.append((f"g{i}", t))
            lines.append(f"static {r.choice(['', 'volatile '])}{t} g{i} = {self.const(t)};")
        for i in range(r.randint(1, 3)):
            t, n = r.choice(TYPES), r.choice([4, 8, 16, 64])
            self.arrays.append((f"a{i}", t, n))
            lines.append(f"static {t} a{i}[{n}] = {{{', '.join(self.const(t) for _ in range(r.randint(0, n)))}}};")
        self.atomics = [(f"at{i}", r.choice(["uint32_t", "uint64_t", "int32_t", "int64_t"])) for i in range(2)]
        lines += [f"static {t} {g} = {self.const(t)};" for g, t in self.atomics]
        for i in range(r.randint(2, 7)):
            lines += self.function(i)
        lines += ["static uint64_t mix(uint64_t h, uint64_t v) { return (h ^ v) * 0x100000001b3ULL + (h >> 29); }",
                  "int main(void) {", "    uint64_t h = 0xcbf29ce484222325ULL;"]
        lines += [f"    g{i} ^= ({t})input_word({i});" for i, (_, t) in enumerate(self.globals)]
        for f, n in self.funcs:
            for _ in range(r.randint(1, 3)):
                lines.append(f"    h = mix(h, (uint64_t){f}({', '.join(self.expr(self.globals) for _ in range(n))}));")
        lines += [f"    h = mix(h, (uint64_t){g});" for g, _ in self.globals + self.atomics]
        lines += [f"    for (int i = 0; i < {n}; i++) h = mix(h, (uint64_t){a}[i]);" for a, _, n in self.arrays]
        lines += ['    printf("%llx\\n", (unsigned long long)h);',
                  "    set_output(0, (uint32_t)h); set_output(1, (uint32_t)(h >> 32));",
                  "    return (int)(h & 0x7f);", "}"]
        return "\n".join(lines) + "\n"


def compile_program(source: Path, elf: Path, opt: str, rvc: bool) -> str | None:
    """Compile ``source`` against the SDK; the compiler's complaint, or None."""
    cpu = "generic_rv64+m+a+zicsr+zifencei" + ("+c" if rvc else "-c")
    done = subprocess.run([sys.executable, "-m", "ziglang", "cc", "-target", "riscv64-freestanding-none",
                           f"-mcpu={cpu}", "-mabi=lp64", "-mcmodel=medany", opt, "-fno-sanitize=all", "-ffreestanding",
                           f"-I{SDK}", "-w", "-T", str(SDK / "link.ld"), str(SDK / "start.S"), str(SDK / "libc.c"),
                           str(source), "-o", str(elf)], capture_output=True, text=True)
    return done.stderr.strip()[:400] if done.returncode else None


def compare(elf: Path, data: bytes, backends: list[str], chunk: int, max_steps: int, unicorn) -> tuple[list[str], str]:
    """What differs between the backends and Unicorn on ``elf``, and how the first backend's run ended."""
    from hetflow.executors.emulator import execute, load_elf, reexecute_chunk

    outs = {}
    for b in backends:
        try:
            outs[b] = execute(load_elf(elf), backend=b, input=data, chunk_steps=chunk, max_steps=max_steps)
        except Exception as e:  # a trap or the step limit: every backend must end the same way
            outs[b] = e
    first, diffs = outs[backends[0]], []
    for b in backends[1:]:
        o = outs[b]
        if isinstance(first, Exception) or isinstance(o, Exception):
            if type(first) is not type(o) or str(first) != str(o):
                diffs.append(f"{b}: {type(o).__name__} {str(o)[:160]}; {backends[0]}: "
                             f"{type(first).__name__} {str(first)[:160]}")
        elif first.same_result(o):
            diffs.append(f"{b} differs from {backends[0]} in {first.same_result(o)}")
    ended = type(first).__name__ if isinstance(first, Exception) else f"exit {first.exit_code} after {first.steps}"
    if unicorn is None:
        return diffs, ended
    try:
        uni = unicorn.run(elf.read_bytes(), data, max_steps=max_steps)
    except RuntimeError as e:
        uni = {"error": str(e)[:160]}
    if isinstance(first, Exception):
        if "error" not in uni:
            diffs.append(f"Unicorn exits {uni['exit_code']}; {backends[0]}: {type(first).__name__}")
    elif "error" in uni:
        diffs.append(f"Unicorn: {uni['error']}; {backends[0]}: exit {first.exit_code}")
    elif (first.exit_code, first.stdout, first.pub_outs) != (uni["exit_code"], uni["stdout"], uni["pub_outs"]):
        diffs.append(f"Unicorn: exit {uni['exit_code']} {uni['stdout'][:40]!r}; {backends[0]}: exit "
                     f"{first.exit_code} {first.stdout[:40]!r}")
    else:
        for b in backends:
            end, _ = reexecute_chunk(load_elf(elf), outs[b].min_traces[-1], input_size=len(data),
                                     backend="fast" if b == "native" else b)
            if list(end.regs) != uni["regs"]:
                diffs.append(f"{b}'s final registers differ from Unicorn's")
    return diffs, ended


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1, help="the first program's seed; the others follow it")
    parser.add_argument("--backends", default="reference,fast,native")
    parser.add_argument("--max-steps", type=int, default=300_000)
    args = parser.parse_args(argv)
    try:
        import ziglang  # noqa: F401  (only its presence: ``python -m ziglang`` runs it)
    except ImportError:
        print("no compiler: pip install ziglang", file=sys.stderr)
        return 2
    unicorn = None
    if importlib.util.find_spec("unicorn") is not None:
        spec = importlib.util.spec_from_file_location("unicorn_guest", HERE / "unicorn_guest.py")
        unicorn = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(unicorn)
    else:
        print("Unicorn is not installed (pip install unicorn): the backends are compared with each other only")
    OUT.mkdir(parents=True, exist_ok=True)
    backends = args.backends.split(",")
    differing, ended = [], {"exit": 0, "trap or step limit": 0}
    for seed in range(args.seed, args.seed + args.programs):
        r = random.Random(seed * 7 + 1)
        opt, rvc = r.choice(["-O0", "-O1", "-O2", "-O3", "-Os", "-Oz"]), r.random() < 0.5
        source, elf = OUT / f"p{seed}.c", OUT / f"p{seed}.elf"
        source.write_text(Program(seed).text())
        refused = compile_program(source, elf, opt, rvc)
        if refused:
            print(f"program {seed}: the compiler refused it: {refused}")
            differing.append(seed)
            continue
        t = time.perf_counter()
        diffs, how = compare(elf, r.randbytes(r.choice([0, 5, 64])), backends, r.choice([97, 4096, 65536]),
                             args.max_steps, unicorn)
        ended["exit" if how.startswith("exit") else "trap or step limit"] += 1
        print(f"program {seed} ({opt}{', C' if rvc else ''}): {how}, {time.perf_counter() - t:.1f} s"
              + ("" if not diffs else ": DIFFERS: " + "; ".join(diffs)), flush=True)
        if diffs:
            differing.append(seed)
        else:
            source.unlink()
            elf.unlink()
    print(f"{args.programs} programs: {ended['exit']} exited, {ended['trap or step limit']} trapped or reached "
          f"the step limit; {len(differing)} differ{'' if not differing else ' (kept in ' + str(OUT) + '): '}"
          f"{', '.join(map(str, differing))}")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
