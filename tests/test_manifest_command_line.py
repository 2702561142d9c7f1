"""Values typed on the command line (``-p KEY=VALUE``, ``--point KEY=VALUE``) are YAML read as a manifest is.

A manifest's loader refuses an alias that names itself, an alias bomb and
nesting past its limit, a key written twice and a key that is not a
string; a value given with ``-p`` or ``--point`` is held to the same
rules, and a refusal is bad input (exit 2, one line, no traceback), with
nothing written.
"""

import io
import json
from pathlib import Path

import pytest

from hetflow.engine import cli

MANIFEST = """
version: 1
name: cmdline
params: {n: 2, shape: [2], seed: 0}
executors: {host: {vendor: cpu}}
stages:
  y: {op: random.normal, args: {shape: "${shape}", seed: "${seed}"}}
outputs: {y: y}
"""

SWEEP = """
version: 1
name: sweep
params: {seed: 0}
matrix: {seed: [0, 1]}
executors: {host: {vendor: cpu}}
stages:
  y: {op: random.normal, args: {shape: [2], seed: "${seed}"}}
outputs: {y: y}
"""


def main(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def refused(runs: Path, *argv) -> str:
    code, out, err = main(*argv)
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in out + err and "internal error" not in err, err[-2000:]
    assert err.startswith("hetflow: error: "), err[-2000:]
    assert not runs.exists() or not any(runs.iterdir()), sorted(p.name for p in runs.iterdir())
    return err


@pytest.mark.parametrize("value, said", [
    ("[&a [*a]]", "nesting deeper than 64 levels"),          # an alias that names itself
    ("{a: &a {b: *a}}", "nesting deeper than 64 levels"),
    ("[" * 3000 + "]" * 3000, "nesting deeper than 64 levels"),
    ("[&a [1,1,1,1,1,1,1,1,1,1], &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a], &c [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b], "
     "&d [*c,*c,*c,*c,*c,*c,*c,*c,*c,*c], &e [*d,*d,*d,*d,*d,*d,*d,*d,*d,*d], &f [*e,*e,*e,*e,*e,*e,*e,*e,*e,*e], "
     "&g [*f,*f,*f,*f,*f,*f,*f,*f,*f,*f]]", "values once aliases are expanded"),
], ids=["alias in itself", "alias in its own map", "deep", "alias bomb"])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_p_value_past_the_loaders_limits_is_bad_input(manifest_file, tmp_path, value, said, command):
    path = manifest_file(MANIFEST)
    runs = tmp_path / "runs"
    extra = ["--runs-dir", str(runs)] if command == "run" else []
    err = refused(runs, command, path, *extra, "-p", f"shape={value}")
    assert said in err and "-p shape=" in err


@pytest.mark.parametrize("value, said", [
    ("{lr: 1, lr: 2}", "at column 15: duplicate key 'lr'"),
    ("{1: 2}", "at column 8: keys must be strings, found 1"),
    ("[2, yes]", "at column 11: 'yes' is the boolean true to YAML 1.1"),
], ids=["duplicate key", "key not a string", "YAML 1.1 boolean"])
def test_p_flow_value_is_held_to_the_manifests_key_and_scalar_rules(manifest_file, tmp_path, value, said):
    path = manifest_file(MANIFEST)
    err = refused(tmp_path / "runs", "run", path, "--runs-dir", str(tmp_path / "runs"), "-p", f"shape={value}")
    assert f"-p shape={value}: the value is not a valid flow" in err and said in err, err


def test_p_values_within_the_limits_still_read_as_yaml(manifest_file, tmp_path):
    path = manifest_file(MANIFEST)
    code, out, err = main("plan", path, "--format", "json", "-p", "shape=[&a 3, *a, 2]", "-p", "seed=&x 5")
    assert code == 0, err
    assert json.loads(out)["nodes"]["y"]["shape"] == [3, 3, 2], out[:2000]


@pytest.mark.parametrize("point", ["seed=&a {b: *a}", "seed=&a [*a]}", "seed=" + "{a: " * 3000 + "1" + "}" * 3000],
                         ids=["alias in its own map", "alias in itself", "deep"])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_point_value_past_the_loaders_limits_is_bad_input(manifest_file, tmp_path, point, command):
    path = manifest_file(SWEEP)
    runs = tmp_path / "runs"
    extra = ["--runs-dir", str(runs)] if command == "run" else []
    err = refused(runs, command, path, *extra, "--point", point)
    assert "no matrix point" in err, err


@pytest.mark.parametrize("command", ["plan", "run"])
def test_p_list_on_a_matrix_key_is_the_p_values_fault_not_the_matrix_lines(manifest_file, tmp_path, command):
    path = manifest_file(SWEEP)
    runs = tmp_path / "runs"
    argv = ["plan", path] if command == "plan" else ["run", path, "--runs-dir", str(runs)]
    err = refused(runs, *argv, "-p", "seed=[1, 2]")
    assert err.startswith(f"hetflow: error: -p seed=[1, 2]: param 'seed' is a single value, not a list or map "
                          f"(its default at {path}:4:16 is 0)"), err
    assert "matrix value" not in err, err
