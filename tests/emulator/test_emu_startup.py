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
         "hetflow.engine.cli.pipelines", "hetflow.engine.cli.runs", "hetflow.engine.store.locks", "pathlib",
         "concurrent.futures", "platform", "argparse", "hetflow.engine.cli.parser", "hetflow.engine.errors", "typing",
         "threading", "contextlib", "importlib.util")
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
    assert len(list(tmp_path.glob(f"elf{native_main.ELF_VERSION}-*.meta"))) == 1


@pytest.mark.parametrize("name", ["loop", "sha256", "isa_smc", "isa_mem", "sdk/hello"])
def test_a_program_from_the_cache_is_load_elfs(tmp_path, monkeypatch, name):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path))
    path = GUESTS / f"{name}.elf"
    parsed, cached = native_main.load_program(path, fetch="any"), native_main.load_program(path, fetch="any")
    assert parsed == cached == load_elf(path, fetch="any")
    assert len(list(tmp_path.glob("elf*.meta"))) == 1


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
    (entry,) = tmp_path.glob("elf*.meta")
    entry.write_bytes(b"{not marshal")
    assert native_main.load_program(path) == load_elf(path)
    assert native_main.read_meta(str(entry))["entry"] == load_elf(path).entry


# --- a plain command line without argparse ---------------------------------------------------------------------------

def _emulate_actions():
    sub = next(a for a in _parser("emulate")._actions if a.dest == "command")
    return [a for a in sub.choices["emulate"]._actions if a.option_strings and a.dest != "help"]


def test_the_plain_reader_knows_the_parsers_flags():
    from hetflow.engine.cli.emulate import _DEFAULTS, _FLAGS

    actions = _emulate_actions()
    assert sorted(_FLAGS) == sorted(a.option_strings[0] for a in actions)
    for a in actions:
        dest, convert, choices = _FLAGS[a.option_strings[0]]
        assert (dest, len(a.option_strings)) == (a.dest, 1)
        if convert is None:                                   # a switch: store_true / store_false
            assert a.nargs == 0 and a.const == choices and a.default == (not choices)
        else:
            assert (a.type or str, tuple(a.choices) if a.choices else None) == (convert, choices)
    assert _DEFAULTS == {k: v for k, v in vars(_parser("emulate").parse_args(["emulate", "g.elf"])).items()
                         if k != "elf"}


PLAIN = [["g.elf"], ["g.elf", "--json"], ["--backend", "native", "g.elf", "--no-interpreter-start"],
         ["g.elf", "--input", "-", "--max-steps", "1_000", "--timeout", "2.5", "--chunk-steps", "64"],
         ["g.elf", "--isa", "rv64ima", "--fetch", "any", "--memory", "flat", "--backend", "reference"],
         ["g.elf", "--max-steps", "5", "--max-steps", "7"], ["g.elf", "--timeout", "inf"]]
NOT_PLAIN = [[], ["--help"], ["g.elf", "--help"], ["g.elf", "--backend=native"], ["g.elf", "--back", "native"],
             ["g.elf", "--backend", "fastest"], ["g.elf", "--max-steps", "many"], ["g.elf", "--max-steps", "-5"],
             ["g.elf", "--max-steps"], ["g.elf", "h.elf"], ["g.elf", "--", "--json"], ["--debug", "g.elf"],
             ["g.elf", "-"], ["g.elf", "--input", "--json"], ["g.elf", "--isa", "rv32i"],
             ["g.elf", "--chunk-steps", "1.5"]]


@pytest.mark.parametrize("argv", PLAIN + NOT_PLAIN)
def test_a_plain_line_reads_as_the_parser_reads_it_and_the_rest_goes_to_the_parser(argv):
    from hetflow.engine.cli.emulate import plain_args

    got = plain_args(["emulate", *argv])
    assert (got is not None) == (argv in PLAIN)
    if got is not None:
        assert vars(got) == vars(_parser("emulate").parse_args(["emulate", *argv]))


_ENTRY = "import sys; sys.argv = ['hetflow', *sys.argv[1:]]; from hetflow.engine.cli import entry; entry()"


@pytest.mark.parametrize("guest, code", [("fib.elf", 0), ("exit3.elf", 1)])
def test_the_console_scripts_quick_exit_keeps_all_it_printed(tmp_path, guest, code):
    # the command ends the process without the interpreter's teardown: what it printed into the pipes'
    # buffers must be out first, on both streams, whatever the exit code
    env = {**os.environ, "HETFLOW_NATIVE_CACHE": str(tmp_path)}
    argv = ["emulate", str(GUESTS / guest), "--backend", "reference"]
    done = subprocess.run([sys.executable, "-c", _ENTRY, *argv], capture_output=True, env=env, text=True)
    out, err = io.StringIO(), io.StringIO()
    assert main(argv, out=out, err=err) == code
    assert done.returncode == code
    # the same text but for the timing figures
    strip = __import__("re").compile(r"in [0-9.]+ s \([0-9.]+ M steps/s")
    assert strip.sub("", done.stdout) == strip.sub("", out.getvalue()) and done.stdout.count("\n") >= 2
    assert done.stderr == err.getvalue()
