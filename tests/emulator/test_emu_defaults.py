"""First runs and defaults (issue 31): where the compiled code is cached,
what a compile says while it runs, and which backend ``auto`` picks.

The cold-cache tests start fresh processes with a fresh ``XDG_CACHE_HOME``:
numba reads its cache setting when a kernel is decorated, and a process
that has already loaded the interpreter would not compile again.
"""

import io
import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.manifest import validate as mf
from hetflow.engine.manifest import phasedecl as phases
from hetflow.executors import emulator as emu

from _guests import GUESTS

PACKAGE = Path(emu.__file__).resolve().parent
needs_numba = pytest.mark.skipif(find_spec("numba") is None, reason="numba is not installed (the fast backend)")
needs_llvmlite = pytest.mark.skipif(find_spec("llvmlite") is None,
                                    reason="llvmlite is not installed (the native backend)")


def _emulate(*argv, env):
    # from a scratch folder: a checkout's ./hetflow must not shadow the installed package
    return subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "emulate", *map(str, argv)],
                          capture_output=True, text=True, env=env, cwd=env["XDG_CACHE_HOME"], timeout=600)


def _fresh_env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("NUMBA_CACHE_DIR", "HETFLOW_NATIVE_CACHE")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    os.makedirs(env["XDG_CACHE_HOME"])
    return env


def _compiled_files(folder: Path) -> dict:
    """numba's index and object files and native translations under ``folder``, with their mtimes."""
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*")
            if p.suffix in (".nbi", ".nbc", ".so", ".o") or p.name.endswith(".seeds.meta")}


@needs_numba
def test_a_cold_fast_backend_says_it_compiles_and_caches_in_the_users_cache(tmp_path):
    """The one test that pays numba's whole compile (15-60 s): the message,
    the time in the output, and where the cache lands all need it."""
    env = _fresh_env(tmp_path)
    before = _compiled_files(PACKAGE)
    done = _emulate(GUESTS / "fib.elf", "--backend", "fast", "--no-interpreter-start", "--json", env=env)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == ("hetflow: compiling the fast backend's interpreter (first run on this machine; cached for "
                        "later runs)...")
    assert lines[1].startswith("hetflow: compiled in ") and lines[1].endswith(" s") and len(lines) == 2
    r = json.loads(done.stdout)
    assert r["compiled"] == "compiling the fast backend's interpreter"
    assert r["elapsed_s"] == pytest.approx(r["compile_s"] + r["run_s"]) and r["compile_s"] > r["run_s"]
    numba_dir = Path(env["XDG_CACHE_HOME"]) / "hetflow" / "numba"
    assert any(p.suffix == ".nbi" for p in numba_dir.rglob("*")), "numba's index is not in the user's cache"
    assert _compiled_files(PACKAGE) == before, "the run wrote compiled code into the package's folder"
    # the second run loads what the first compiled, and says nothing
    again = _emulate(GUESTS / "fib.elf", "--backend", "fast", "--no-interpreter-start", "--json", env=env)
    assert (again.returncode, again.stderr) == (0, "")
    assert (json.loads(again.stdout)["compile_s"], json.loads(again.stdout)["compiled"]) == (0.0, None)


@needs_numba
def test_a_users_own_numba_cache_dir_is_kept(tmp_path):
    env = _fresh_env(tmp_path)
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "mine")
    code = ("import os; from hetflow.executors.emulator import fast_kernel as k; "
            "print(os.environ['NUMBA_CACHE_DIR']); print(k._run.stats.cache_path)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=env["XDG_CACHE_HOME"]).stdout.splitlines()
    assert out[0] == str(tmp_path / "mine") and out[1].startswith(str(tmp_path / "mine") + os.sep)


def test_caches_default_to_the_xdg_cache_home(tmp_path):
    env = _fresh_env(tmp_path)
    code = ("import os; from hetflow.executors.emulator import native_main; "
            "print(os.environ['NUMBA_CACHE_DIR']); print(native_main.cache_path())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True,
                         cwd=env["XDG_CACHE_HOME"]).stdout.splitlines()
    root = os.path.join(env["XDG_CACHE_HOME"], "hetflow")
    assert out == [os.path.join(root, "numba"), os.path.join(root, "native")]


@needs_llvmlite
def test_code_translated_again_as_the_run_meets_it_is_said_with_the_total(tmp_path, monkeypatch):
    """isa_trap.elf jumps through mtvec: code the first translation did not reach. The first line said 0.16 s where
    the output said 0.84 s of translating."""
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["emulate", str(GUESTS / "isa_trap.elf"), "--backend", "native", "--no-interpreter-start", "--json"],
                    out=out, err=err)
    said = err.getvalue().splitlines()
    assert code == 0 and said[1].startswith("hetflow: translated in ")
    first = float(said[1].split(" in ")[1].split(" s")[0])
    assert said[2].startswith("hetflow: translated again, with the code the run reached through jumps, in ")
    total = float(said[2].rsplit("(", 1)[1].split(" s in all")[0])
    assert total > first and total == pytest.approx(json.loads(out.getvalue())["compile_s"], abs=0.011)


@needs_llvmlite
def test_a_translation_says_so_once_and_the_output_says_its_time(tmp_path, monkeypatch):
    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))
    before = _compiled_files(PACKAGE)
    runs = []
    for _ in range(2):
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["emulate", str(GUESTS / "sort.elf"), "--backend", "native", "--no-interpreter-start",
                         "--json"], out=out, err=err)
        assert code == 0
        runs.append((json.loads(out.getvalue()), err.getvalue().splitlines()))
    (cold, said), (warm, quiet) = runs
    assert said[0] == (f"hetflow: translating {GUESTS / 'sort.elf'}'s code to host code with LLVM (not in the disk "
                       "cache; cached for later runs)...")
    assert said[1].startswith("hetflow: translated in ") and len(said) == 2
    assert cold["compiled"] == "translating the guest's code" and cold["compile_s"] > 0
    assert cold["elapsed_s"] == pytest.approx(cold["compile_s"] + cold["run_s"])
    # every translation the run made is translation's time, those of code it met later too
    assert cold["translation"]["translations"] >= 1
    assert cold["compile_s"] == pytest.approx(cold["translation"]["seconds"], rel=0.25, abs=0.05)
    assert cold["translation"]["cached"] is False and warm["translation"]["cached"] is True
    assert (quiet, warm["compile_s"], warm["compiled"]) == ([], 0.0, None)
    assert any((tmp_path / "native").iterdir()) and _compiled_files(PACKAGE) == before
    assert {k: cold[k] for k in ("steps", "pub_outs")} == {k: warm[k] for k in ("steps", "pub_outs")}


def test_auto_names_the_fastest_backend_installed():
    backend, why = emu.auto_backend()
    if find_spec("llvmlite") is not None:
        assert (backend, why) == ("native", "llvmlite is installed")
    elif find_spec("numba") is not None:
        assert (backend, why) == ("fast", "numba is installed, llvmlite is not")
    else:
        assert (backend, why) == ("reference", "neither llvmlite nor numba is installed")
    assert emu.resolve_backend("auto") == (backend, why)
    assert emu.resolve_backend("reference") == ("reference", "chosen explicitly")
    with pytest.raises(ValueError, match="expected auto or one of reference, fast, native"):
        emu.resolve_backend("turbo")


@pytest.mark.parametrize("guest", ["fib.elf", "sort.elf"])
def test_emulate_defaults_to_auto_and_says_which_backend_ran_and_why(guest):
    backend, why = emu.auto_backend()
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["emulate", str(GUESTS / guest), "--json"], out=out, err=err) == 0
    r = json.loads(out.getvalue())
    assert (r["requested_backend"], r["backend"], r["backend_reason"]) == ("auto", backend, why)
    # a short guest may end in the reference interpreter's first steps; a longer one runs on the chosen backend
    assert r["ran_on"] in (backend, "reference") and (r["ran_on"] == backend or r["steps"] <= 20_000)
    out = io.StringIO()
    assert cli.main(["emulate", str(GUESTS / guest)], out=out, err=io.StringIO()) == 0
    assert f"{backend} backend, auto: {why}" in out.getvalue().splitlines()[0]


def test_an_explicit_backend_is_kept_and_says_so():
    out = io.StringIO()
    assert cli.main(["emulate", str(GUESTS / "fib.elf"), "--backend", "reference", "--json"], out=out,
                    err=io.StringIO()) == 0
    r = json.loads(out.getvalue())
    assert (r["requested_backend"], r["backend"], r["ran_on"], r["backend_reason"]) == (
        "reference", "reference", "reference", "chosen explicitly")


MANIFEST = """\
version: 1
name: defaults
emulators:
  guest: {{program: {program}{backend}}}
executors:
  host: {{vendor: cpu}}
stages:
  run: {{phase: execute, emulator: guest}}
outputs:
  code: run.exit_code
"""


@pytest.mark.parametrize("given", [None, "reference"])
def test_a_manifest_emulator_defaults_to_auto_and_its_plan_says_why(tmp_path, given):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(program=GUESTS / "fib.elf", backend=f", backend: {given}" if given else ""))
    m = mf.compile_manifest(mf.load(path))
    decl = m.emulators["guest"]
    backend, why = emu.auto_backend()
    expected = (backend, f"auto: {why}") if given is None else (given, "chosen in the manifest")
    assert (decl.backend, decl.backend_reason) == expected
    info = phases.planned(m.phases["run"], decl)
    assert (info["backend"], info["backend_reason"]) == expected


def test_execute_runs_auto_and_names_it():
    backend, why = emu.auto_backend()
    out = emu.execute(GUESTS / "fib.elf", backend="auto", runners=False)
    ref = emu.execute(GUESTS / "fib.elf", backend="reference")
    assert (out.extra["backend"], out.extra["backend_reason"]) == (backend, why)
    assert (ref.extra["backend"], ref.extra["backend_reason"]) == ("reference", "chosen explicitly")
    assert (out.steps, out.pub_outs, out.stdout) == (ref.steps, ref.pub_outs, ref.stdout)


@needs_llvmlite
def test_a_pipelines_execute_phase_says_when_it_translates(tmp_path, monkeypatch, capsys):
    from hetflow.engine.plan.planner import plan as make_plan
    from hetflow.engine.run.execute import execute as run_pipeline
    from hetflow.executors import probe

    monkeypatch.setenv("HETFLOW_NATIVE_CACHE", str(tmp_path / "native"))
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(program=GUESTS / "sort.elf", backend=", backend: native"))
    said = []
    for i in range(2):
        m = mf.compile_manifest(mf.load(path))
        # a runs folder each: the second run finds no cached result and executes the guest again
        r = run_pipeline(m, make_plan(m, probe), runs_dir=str(tmp_path / f"runs{i}"))
        assert r.record["cache"]["hits"] == [] and r.record["phases"]["run"]["status"] == "succeeded"
        said.append([line for line in capsys.readouterr().err.splitlines() if "translat" in line])
    assert said[0][0] == (f"hetflow: translating sort.elf's code to host code with LLVM (not in the disk cache; "
                          "cached for later runs)...")
    assert said[0][1].startswith("hetflow: translated in ") and len(said[0]) == 2
    assert said[1] == []


# None in sys.modules is how Python marks a module absent: find_spec then returns None, as on a machine without it
@pytest.mark.parametrize("absent, expected", [(("llvmlite",), ("fast", "numba is installed, llvmlite is not")),
                                              (("llvmlite", "numba"),
                                               ("reference", "neither llvmlite nor numba is installed"))])
def test_auto_falls_back_where_a_package_is_missing(monkeypatch, absent, expected):
    if "numba" not in absent and find_spec("numba") is None:
        pytest.skip("numba is not installed (the fast backend)")
    for name in absent:
        monkeypatch.setitem(sys.modules, name, None)
    assert emu.auto_backend() == expected
    if expected[0] == "fast":
        return                  # numba itself imports llvmlite: the fast backend cannot run with it hidden
    out = io.StringIO()
    assert cli.main(["emulate", str(GUESTS / "sort.elf"), "--json"], out=out, err=io.StringIO()) == 0
    r = json.loads(out.getvalue())
    assert (r["backend"], r["ran_on"], r["backend_reason"]) == (expected[0], expected[0], expected[1])


def test_an_unknown_manifest_backend_is_the_schemas_error_with_auto_among_the_choices(tmp_path):
    from hetflow.engine.errors import ManifestError

    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.format(program=GUESTS / "fib.elf", backend=", backend: turbo"))
    with pytest.raises(ManifestError) as e:
        mf.compile_manifest(mf.load(path))
    assert f"{path}:4:" in str(e.value)
    assert "emulators.guest.backend must be one of auto, fast, reference, native; found 'turbo'" in str(e.value)
