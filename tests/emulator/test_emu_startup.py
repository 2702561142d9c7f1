"""``hetflow emulate --backend native`` starts small: the console script
parses with emulate's parser alone (the same usage, help and errors), a
file seen before loads from the disk cache without pyelftools, and a run
from the cache imports none of the other commands, numpy, numba, llvmlite,
pyelftools or the translator; a changed or broken file still gets
``load_elf``'s errors."""

import contextlib
import io
import json
import os
import subprocess
import sys

import pytest

from hetflow.engine.cli import main
from hetflow.engine.cli.parser import COMMANDS, _parser
from hetflow.executors.emulator import ElfError, load_elf
from hetflow.executors.emulator import native_main

from _guests import GUESTS


def _parsed(only, argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            _parser(only).parse_args(argv)
            raised = None
        except BaseException as e:  # noqa: BLE001 - argparse exits, hetflow's parser raises UsageError
            raised = f"{type(e).__name__}: {e}"
    return out.getvalue(), err.getvalue(), raised


def test_the_command_list_is_the_parsers():
    assert tuple(_parser()._subparsers._group_actions[0].choices) == COMMANDS


@pytest.mark.parametrize("argv", [["emulate", "--help"], ["emulate"], ["emulate", "x.elf", "--backend", "fastest"],
                                  ["emulate", "x.elf", "--bogus"], ["emulate", "x.elf", "--max-steps", "many"]])
def test_emulates_own_parser_says_what_the_whole_parser_says(argv):
    whole, alone = _parsed(None, argv), _parsed("emulate", argv)
    assert alone == whole
    assert alone[2] is not None and (alone[0] or alone[1])


_PROBE = """
import sys
before = set(sys.modules)          # what this interpreter's site loaded (a venv's loads less)
from hetflow.engine.cli import main
code = main(sys.argv[1:])
heavy = ("numpy", "numba", "llvmlite.binding", "elftools", "hetflow.executors.emulator.native_translate",
         "hetflow.engine.cli.pipelines", "hetflow.engine.cli.runs", "hetflow.engine.locks", "pathlib",
         "concurrent.futures", "platform")
print("LOADED", sorted(m for m in heavy if m in sys.modules and m not in before))
sys.exit(code)
"""


# no --backend: auto, which finds llvmlite without importing it and runs native
@pytest.mark.parametrize("backend", [["--backend", "native"], []])
def test_a_cached_run_loads_only_what_it_runs(tmp_path, backend):
    from importlib.util import find_spec

    if not backend and find_spec("llvmlite") is None:
        pytest.skip("llvmlite is not installed: auto does not pick the native backend")
    env = {**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path)}
    argv = [str(GUESTS / "loop.elf"), *backend, "--json", "--input", "-", "--no-interpreter-start"]
    first = subprocess.run([sys.executable, "-c", _PROBE, "emulate", *argv], input=(3000).to_bytes(8, "little"),
                           capture_output=True, env=env)
    second = subprocess.run([sys.executable, "-c", _PROBE, "emulate", *argv], input=(3000).to_bytes(8, "little"),
                            capture_output=True, env=env)
    assert first.returncode == second.returncode == 0, (first.stderr + second.stderr).decode()
    a, b = (json.loads(r.stdout.decode().splitlines()[0]) for r in (first, second))
    assert b["translation"]["cached"] is True and b["backend"] == "native"
    assert {k: a[k] for k in ("steps", "pub_outs", "counters", "chunks", "exit_code")} == \
        {k: b[k] for k in ("steps", "pub_outs", "counters", "chunks", "exit_code")}
    assert "elftools" in first.stdout.decode()
    assert second.stdout.decode().splitlines()[-1] == "LOADED []"
    assert len(list(tmp_path.glob(f"elf{native_main.ELF_VERSION}-*.json"))) == 1


@pytest.mark.parametrize("name", ["loop", "sha256", "isa_smc", "isa_mem", "sdk/hello"])
def test_a_program_from_the_cache_is_load_elfs(tmp_path, monkeypatch, name):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path))
    path = GUESTS / f"{name}.elf"
    parsed, cached = native_main.load_program(path, fetch="any"), native_main.load_program(path, fetch="any")
    assert parsed == cached == load_elf(path, fetch="any")
    assert len(list(tmp_path.glob("elf*.json"))) == 1


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(["emulate", *argv], out=out, err=err), err.getvalue()


def test_a_changed_or_broken_file_gets_load_elfs_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "guest.elf"
    raw = (GUESTS / "fib.elf").read_bytes()
    path.write_bytes(raw)
    assert _cli(str(path), "--backend", "native")[0] == 0          # now in the cache
    for broken in (raw[:3], raw[:200], raw[:18] + b"\x03\x00" + raw[20:], b""):
        path.write_bytes(broken)
        with pytest.raises(ElfError) as e:
            load_elf(path)
        code, err = _cli(str(path), "--backend", "native")
        assert (code, err) == (2, f"hetflow: error: {e.value}\n")
    path.unlink()
    code, err = _cli(str(path), "--backend", "native")
    assert code == 2 and err.startswith(f"hetflow: error: {path}: cannot read: ")


def test_a_cache_entry_that_does_not_parse_is_remade(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path))
    path = GUESTS / "fib.elf"
    native_main.load_program(path)
    (entry,) = tmp_path.glob("elf*.json")
    entry.write_text("{not json")
    assert native_main.load_program(path) == load_elf(path)
    assert json.loads(entry.read_text())["entry"] == load_elf(path).entry
