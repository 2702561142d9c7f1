"""The guest SDK (examples/guests/sdk): its committed hello.elf, built with
one ``make`` (printf, malloc/free/calloc/realloc, a constructor, 64- and
128-bit division from the rv64imac/lp64 libgcc), runs identically on both
backends; the build itself is checked where the toolchain is installed."""

import shutil
import subprocess

import pytest

from hetflow.executors.emulator import execute, load_elf, verify_min_traces

from _guests import GUESTS

SDK = GUESTS / "sdk"
Q = (((1 << 64) - 1 << 20) + 12345) // 7
EXPECTED = (
    "sum of squares 1..100 = 338350, heap ok\n"
    "64-bit: 18446744073709551615 / 7 = 2635249153387078802 rem 1\n"
    f"128-bit: high {Q >> 64:#x} low 0x{Q & (1 << 64) - 1:016x}\n"
    "[   42] [-7   ] [-0042] [beef] [BEEF] [z] [16] [-9000000000] [str]\n"
)


@pytest.fixture(scope="module")
def runs():
    program = load_elf(SDK / "hello.elf")
    return program, {b: execute(program, backend=b, chunk_steps=4000) for b in ("reference", "fast")}


def test_hello_runs_on_both_backends(runs):
    program, outs = runs
    ref, fst = outs["reference"], outs["fast"]
    assert ref.same_result(fst) == []
    text = fst.stdout.decode()
    assert text.startswith(EXPECTED), text
    heap = int(text.rsplit("pointer 0x", 1)[1], 16)
    assert 0xA001_1000 <= heap < 0xA040_0000 - 0x40000        # between __heap_start and __heap_end
    assert fst.exit_code == 0
    assert [v for _, v in fst.pub_outs[:3]] == [100, Q & 0xFFFFFFFF, (Q >> 32) & 0xFFFFFFFF]
    assert all(v == 0 for _, v in fst.pub_outs[3:])
    verify_min_traces(program, fst, backend="fast")


def test_make_builds_hello(tmp_path):
    if shutil.which("riscv64-unknown-elf-gcc") is None:
        pytest.skip("riscv64-unknown-elf-gcc is not installed (apt-get install gcc-riscv64-unknown-elf)")
    for name in ("Makefile", "guest.h", "libc.c", "start.S", "link.ld", "hello.c"):
        shutil.copy(SDK / name, tmp_path / name)
    subprocess.run(["make", "-s"], cwd=tmp_path, check=True, capture_output=True)
    out = execute(load_elf(tmp_path / "hello.elf"), backend="fast")
    assert out.stdout.decode().startswith(EXPECTED) and out.exit_code == 0


def test_make_refuses_a_toolchain_without_the_multilib(tmp_path):
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    shutil.copy(SDK / "Makefile", tmp_path / "Makefile")
    r = subprocess.run(["make", "-s", "check-libgcc", "CC=gcc"], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode != 0
    assert "error: gcc has no rv64imac/lp64 multilib libgcc" in r.stderr
