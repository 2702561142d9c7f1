"""``hetflow emulate`` through ``hetflow.engine.cli.main``: results, exit
codes, and the messages for every kind of bad input or failed run."""

import hashlib
import io
import json

import pytest

from hetflow.engine import cli

from _guests import GUESTS


def emulate(*argv):
    argv = list(map(str, argv))
    if "--backend" in argv and argv[argv.index("--backend") + 1] in ("fast", "native"):
        argv.append("--no-interpreter-start")  # a test of a compiled backend runs it from the first step
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["emulate", *argv], out=out, err=err)
    # a first run's compile and translation notices follow this machine's caches, not the run: test_emu_defaults
    # pins them, and the messages here are the rest
    said = [line for line in err.getvalue().splitlines(keepends=True)
            if not line.startswith(("hetflow: compil", "hetflow: translat"))]
    return code, out.getvalue(), "".join(said)


def _same_run(r: dict) -> dict:
    return {k: r[k] for k in ("status", "steps", "exit_code", "end_reason", "pub_outs", "stdout", "chunks", "counters")}


@pytest.mark.parametrize("guest", ["fib.elf", "exit3.elf", "sdk/hello.elf"])
def test_a_short_guest_ends_in_the_interpreter_with_the_fast_backends_results(guest):
    # --backend=fast escapes the helper's --no-interpreter-start: the interpreter start is what is tested
    code, out, err = emulate(GUESTS / guest, "--json", "--chunk-steps", 4000, "--backend=fast")
    fast_code, fast_out, _ = emulate(GUESTS / guest, "--json", "--chunk-steps", 4000, "--backend", "fast")
    r, f = json.loads(out), json.loads(fast_out)
    assert (r["backend"], r["ran_on"], f["ran_on"]) == ("fast", "reference", "fast")
    assert code == fast_code and _same_run(r) == _same_run(f)
    text = emulate(GUESTS / guest, "--backend=fast")[1].splitlines()[0]
    assert text.endswith("fast backend; it ended within the first 20,000 steps, run by the reference interpreter)")


def test_a_longer_guest_is_rerun_on_the_fast_backend():
    r = json.loads(emulate(GUESTS / "sort.elf", "--json", "--backend=fast")[1])
    assert (r["ran_on"], r["status"]) == ("fast", "ok") and r["steps"] > cli.INTERPRETER_START_STEPS


@pytest.mark.parametrize("max_steps", [3000, 30000])
def test_the_step_limit_is_the_same_with_the_interpreter_start(max_steps):
    code, out, err = emulate(GUESTS / "spin.elf", "--max-steps", max_steps, "--backend=fast")
    # a limit within the interpreter's start is reached there, and the text says so
    ran = ("reference backend, in the reference interpreter's first 20,000 steps" if max_steps <= 20_000
           else "fast backend")
    assert (code, out) == (1, f"{GUESTS / 'spin.elf'}: failed after {max_steps} steps ({ran})\n"
                              "public outputs: all 64 zero\n")
    assert f"step limit reached: {max_steps} steps without an exit" in err and f"(step {max_steps})" in err


def test_fib_text_report(backend):
    code, out, err = emulate(GUESTS / "fib.elf", "--backend", backend)
    assert (code, err) == (0, "")
    lines = out.splitlines()
    if backend == "native":           # the translation's cost has a line of its own
        assert lines.pop(1).startswith("translation: ")
    first, outputs, captured, text = lines
    assert first.startswith(f"{GUESTS / 'fib.elf'}: exit code 0 (exit ecall) after 516 steps, 1 chunks, in ")
    assert first.endswith(f"M steps/s, {backend} backend)")
    assert outputs == "public outputs: [0]=0xa1ba7878 [1]=0x27f80dda [2]=0x0000005a"
    assert (captured, text) == ("guest output (9 bytes):", "fib done")


def test_sha256_input_file_json(tmp_path, backend):
    data = b"hello, hetflow\n" * 7
    (tmp_path / "in.bin").write_bytes(data)
    code, out, err = emulate(GUESTS / "sha256.elf", "--input", tmp_path / "in.bin", "--json", "--backend", backend,
                             "--chunk-steps", 1000)
    assert (code, err) == (0, "")
    r = json.loads(out)
    assert r["status"] == "ok" and r["backend"] == backend and r["exit_code"] == 0 and r["end_reason"] == "exit"
    digest = b"".join(v.to_bytes(4, "big") for v in r["pub_outs"][:8])
    assert digest == hashlib.sha256(data).digest()
    assert len(r["pub_outs"]) == 64 and r["chunk_steps"] == 1000
    assert r["chunks"] == -(-r["steps"] // 1000)
    assert sum(r["counters"].values()) == r["steps"] and r["steps_per_s"] > 0


def test_isa_test_passes_through_tohost():
    code, out, err = emulate(GUESTS / "isa_amo.elf")
    assert code == 0 and "exit code 0 (tohost write)" in out and "public outputs: all 64 zero" in out


@pytest.mark.parametrize("guest, message", [
    ("fault_store", "unhandled trap: store/AMO access fault (mcause 7, mtval 0x80000000) at pc 0x80000008 "
                    "(_start+0x8), instruction 0x0002a023 (step 2)"),
    ("illegal", "unhandled trap: illegal instruction (mcause 2, mtval 0x0) at pc 0x80000004 "
                "(_start+0x4), instruction 0x00000000 (step 1)"),
])
def test_failed_runs_exit_1_with_pc_and_word(backend, guest, message):
    code, out, err = emulate(GUESTS / f"{guest}.elf", "--backend", backend)
    step = int(message.rsplit("(step ", 1)[1].rstrip(")"))
    assert (code, out) == (1, f"{GUESTS / f'{guest}.elf'}: failed after {step} steps ({backend} backend)\n"
                              "public outputs: all 64 zero\n")
    assert err == f"hetflow: emulate failed: {GUESTS / f'{guest}.elf'}: {message}\n"


def test_step_limit_exits_1_not_hangs(backend):
    code, out, err = emulate(GUESTS / "spin.elf", "--max-steps", 3000, "--chunk-steps", 1000, "--backend", backend)
    assert (code, out) == (1, f"{GUESTS / 'spin.elf'}: failed after 3000 steps ({backend} backend)\n"
                              "public outputs: all 64 zero\n")
    assert err == (f"hetflow: emulate failed: {GUESTS / 'spin.elf'}: step limit reached: 3000 steps without an "
                   f"exit at pc 0x80000000 (_start), instruction 0x0000006f (step 3000) (raise it with --max-steps)\n")


def test_failed_run_json():
    code, out, err = emulate(GUESTS / "illegal.elf", "--json")
    assert code == 1
    r = json.loads(out)
    assert (r["status"], r["pc"], r["symbol"], r["insn"], r["step"]) == ("failed", 0x80000004, "_start+0x4", 0, 1)
    assert "illegal instruction" in r["error"]
    # what the guest had emitted when it failed is part of the result, as for a run that ends
    assert (r["steps"], r["stdout"], r["pub_outs"]) == (1, "", [0] * 64)


def _patched(tmp_path, offset, value):
    raw = bytearray((GUESTS / "fib.elf").read_bytes())
    raw[offset:offset + len(value)] = value
    path = tmp_path / "bad.elf"
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize("patch, message", [
    ((4, b"\x01"), "32-bit ELF; expected a 64-bit (ELFCLASS64) RISC-V executable"),
    ((18, (62).to_bytes(2, "little")), "not a RISC-V ELF (e_machine is EM_X86_64); expected EM_RISCV"),
])
def test_bad_elf_exits_2(tmp_path, patch, message):
    path = _patched(tmp_path, *patch)
    code, out, err = emulate(path)
    assert (code, out, err) == (2, "", f"hetflow: error: {path}: {message}\n")


def test_not_an_elf_and_missing_files_exit_2(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    assert emulate(text)[2] == f"hetflow: error: {text}: not an ELF file (expected magic 7f 45 4c 46, found 68 65 6c 6c)\n"
    code, out, err = emulate(tmp_path / "none.elf")
    assert code == 2 and err.startswith(f"hetflow: error: {tmp_path / 'none.elf'}: cannot read")
    code, out, err = emulate(GUESTS / "fib.elf", "--input", tmp_path / "none.bin")
    assert (code, err) == (2, f"hetflow: error: --input {tmp_path / 'none.bin'}: cannot read: No such file or directory\n")


@pytest.mark.parametrize("argv, message", [
    (["--max-steps", "0"], "--max-steps and --chunk-steps must be at least 1"),
    (["--chunk-steps", "-5"], "--max-steps and --chunk-steps must be at least 1"),
    (["--max-steps", "many"], "argument --max-steps: invalid int value: 'many'"),
    (["--backend", "jit"], "argument --backend: invalid choice: 'jit'"),
])
def test_bad_arguments_exit_2(argv, message, capsys):
    code, out, err = emulate(GUESTS / "fib.elf", *argv)
    assert code == 2 and message in err and "Traceback" not in err


def test_nonzero_guest_exit_code_is_a_failed_run(backend):
    code, out, err = emulate(GUESTS / "exit3.elf", "--backend", backend)
    assert code == 1 and "exit code 3 (exit ecall) after 3 steps" in out
    assert err == f"hetflow: emulate failed: {GUESTS / 'exit3.elf'}: guest exited with code 3\n"
