"""Every kind of manifest error, at its exact line and column, all at once."""

import os
import shutil

import pytest

from hetflow.engine.errors import ManifestError, UsageError
from hetflow.engine.manifest.validate import compile_manifest, load, loads, parse_overrides

GOOD = """
version: 1
name: t
params: {n: 4, tag: run}
executors:
  host: {vendor: cpu}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 2], seed: 0}, executor: host}
  y: {op: relu, inputs: [x]}
outputs: {y: y}
"""


def errors(path, overrides=None):
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(path), overrides)
    return [str(d) for d in info.value.diagnostics]


def test_good_manifest_compiles(manifest_file):
    m = compile_manifest(load(manifest_file(GOOD)))
    assert list(m.stages) == ["x", "y"]
    assert m.stages["x"].args["shape"] == [4, 2]
    assert m.digest.startswith("sha256:")


def test_yaml_syntax_error_points_at_the_problem(manifest_file):
    path = manifest_file("""
    version: 1
    name: t
    stages:
      x: {op: zeros, args: {shape: [2]}
    outputs: {x: x}
    """)
    (msg,) = errors(path)
    assert msg == (
        f"{path}:6:1: error: YAML syntax: while parsing a flow mapping (opened at line 5, column 6): "
        "expected ',' or '}', but got '<scalar>'"
    )


def test_a_tab_that_indents_is_found_and_the_error_says_what_to_do(manifest_file):
    path = manifest_file(GOOD.replace("  y: {op: relu", "\ty: {op: relu"))
    assert errors(path) == [f"{path}:9:1: error: YAML syntax: while scanning for the next token: found character "
                            "'\\t' that cannot start any token; YAML takes no tab there (it indents with spaces): "
                            "replace the tab with spaces"]


def test_bad_version_points_at_the_value(manifest_file):
    path = manifest_file(GOOD.replace("version: 1", "version: 7"))
    assert errors(path) == [f"{path}:2:10: error: version must be 1, found 7"]


def test_unknown_key_points_at_the_key(manifest_file):
    path = manifest_file(GOOD.replace("y: {op: relu, inputs: [x]}", "y: {op: relu, inputz: [x]}"))
    assert errors(path) == [
        f"{path}:9:3: error: op 'relu' takes 1 input, stage 'y' gives 0",
        f"{path}:9:17: error: unknown key 'inputz' in stages.y "
        "(allowed: phase, emulator, op, inputs, args, dtype, executor, vendor, colocate_with, retries, timeout, cache, "
        "description); did you mean 'inputs'?",
    ]


def test_a_key_other_tools_name_so_is_answered_with_hetflows_name_for_it(manifest_file):
    import re

    def unknown(path):
        return [re.sub(r" \(allowed: [^)]*\)", "", m) for m in errors(path) if "unknown key" in m]

    path = manifest_file(GOOD.replace("stages:", "ops: [my_ops.py]\nsteps:"))
    assert unknown(path) == [f"{path}:7:1: error: unknown key 'ops' in the manifest; did you mean 'plugins'?",
                             f"{path}:8:1: error: unknown key 'steps' in the manifest; did you mean 'stages'?"]
    path = manifest_file(GOOD.replace("executor: host}", "device: host}").replace("inputs: [x]", "needs: [x]"))
    assert unknown(path) == [f"{path}:8:63: error: unknown key 'device' in stages.x; did you mean 'executor'?",
                             f"{path}:9:17: error: unknown key 'needs' in stages.y; did you mean 'inputs'?"]
    # a misspelling is still answered by its letters
    path = manifest_file(GOOD.replace("stages:", "stagse:"))
    assert unknown(path) == [f"{path}:7:1: error: unknown key 'stagse' in the manifest; did you mean 'stages'?"]


def test_bad_dtype_lists_the_choices(manifest_file):
    path = manifest_file(GOOD.replace("inputs: [x]}", "inputs: [x], dtype: float64}"))
    assert errors(path) == [
        f"{path}:9:37: error: stages.y.dtype must be one of fp32, fp16, bf16, fp8e4m3, fp8e5m2, int8, int4, int16, int32, "
        "int64, uint8, bool, fp64; found 'float64'"
    ]


def test_missing_required_key(manifest_file):
    path = manifest_file(GOOD.replace("outputs: {y: y}\n", ""))
    assert errors(path) == [f"{path}:2:1: error: the manifest is missing required key 'outputs'"]


def test_unknown_input(manifest_file):
    path = manifest_file(GOOD.replace("inputs: [x]", "inputs: [xx]"))
    assert errors(path) == [f"{path}:9:26: error: stage 'y' takes input 'xx', which is not a stage; did you mean 'x'?"]


def test_unknown_op(manifest_file):
    path = manifest_file(GOOD.replace("op: relu", "op: rleu"))
    assert errors(path) == [f"{path}:9:11: error: unknown op 'rleu' in stage 'y'; did you mean 'relu'?"]


def test_unknown_executor(manifest_file):
    path = manifest_file(GOOD.replace("executor: host}", "executor: gpu}"))
    assert errors(path) == [
        f"{path}:8:73: error: stage 'x' names executor 'gpu', which is not declared (declared: host)"
    ]


def test_undefined_param_whole_and_inside_a_string(manifest_file):
    path = manifest_file(GOOD.replace('["${n}", 2]', '["${m}", 2]').replace("{y: y}", '{y: y}\ndescription: "tag ${tagg}"'))
    assert errors(path) == [
        f"{path}:8:41: error: undefined param ${{m}} (declared params: n, tag)",
        f"{path}:11:14: error: undefined param ${{tagg}} (declared params: n, tag); did you mean 'tag'?",
    ]


def test_a_param_may_name_other_params_and_an_override_moves_them_too(manifest_file):
    path = manifest_file(GOOD.replace("params: {n: 4, tag: run}",
                                      'params: {n: 4, rows: "${twice}", twice: "${n}", tag: "run-${rows}", dims: ["${n}", 3]}')
                         .replace('["${n}", 2]', '["${rows}", 2]'))
    m = compile_manifest(load(path))
    assert m.params == {"n": 4, "rows": 4, "twice": 4, "tag": "run-4", "dims": [4, 3]}
    assert m.stages["x"].args["shape"] == [4, 2]
    m = compile_manifest(load(path), parse_overrides(["n=6"]))
    assert m.params == {"n": 6, "rows": 6, "twice": 6, "tag": "run-6", "dims": [6, 3]}
    assert m.stages["x"].args["shape"] == [6, 2]
    # an override of a param that names another is the value given
    m = compile_manifest(load(path), parse_overrides(["rows=2"]))
    assert m.params["rows"] == 2 and m.params["tag"] == "run-2" and m.stages["x"].args["shape"] == [2, 2]


def test_params_that_name_one_another_are_one_error_at_the_param(manifest_file):
    path = manifest_file(GOOD.replace("params: {n: 4, tag: run}", 'params: {n: "${k}", k: "${n}", tag: "t${n}"}')
                         .replace("{y: y}", '{y: y}\ndescription: "${tag}"'))
    assert errors(path) == [f"{path}:4:13: error: param 'n' refers to itself through ${{...}}: 'n' -> 'k' -> 'n'; "
                            "a param's value may name other params, none of which names it back"]
    alone = manifest_file(GOOD.replace("params: {n: 4, tag: run}", 'params: {n: "${n}", tag: run}'))
    assert errors(alone) == [f"{alone}:4:13: error: param 'n' refers to itself through ${{...}}: 'n' -> 'n'; "
                             "a param's value may name other params, none of which names it back"]
    undefined = manifest_file(GOOD.replace("params: {n: 4, tag: run}", 'params: {n: 4, tag: "${tga}"}'))
    assert errors(undefined) == [f"{undefined}:4:21: error: undefined param ${{tga}} (declared params: n, tag); "
                                 "did you mean 'tag'?"]


def test_wrong_arity(manifest_file):
    path = manifest_file(GOOD.replace("op: relu, inputs: [x]", "op: matmul, inputs: [x]"))
    assert errors(path) == [f"{path}:9:27: error: op 'matmul' takes 2 inputs, stage 'y' gives 1"]


def test_bad_and_unknown_op_arguments(manifest_file):
    path = manifest_file(GOOD.replace("seed: 0}", "seed: 0.5, mu: 1}"))
    assert errors(path) == [
        f"{path}:8:59: error: argument 'seed' of op 'random.normal' must be a non-negative integer seed, or null for fresh entropy on every run, got 0.5",
        f"{path}:8:64: error: op 'random.normal' has no argument 'mu' (accepted: shape, seed, mean, std)",
    ]


def test_a_negative_seed_is_refused_where_it_is_written(manifest_file):
    """numpy's SeedSequence refuses a negative seed: before, the run started and its stage failed."""
    path = manifest_file(GOOD.replace("seed: 0}", "seed: -1}"))
    assert errors(path) == [
        f"{path}:8:59: error: argument 'seed' of op 'random.normal' must be a non-negative integer seed, or null for "
        "fresh entropy on every run, got -1"]


@pytest.mark.parametrize("args, words", [
    ("{stop: .inf}", "arange: stop must be finite, got inf"),
    ("{stop: .nan}", "arange: stop must be finite, got nan"),
    ("{start: 18446744073709551616, stop: 5}", "arange: start must fit in 64 bits (numpy's int64), got 18446744073709551616"),
    ("{stop: 1.0e+300, step: 1.0e-300}", "arange: [0, 1e+300) in steps of 1e-300 has more elements than a tensor can hold"),
])
def test_an_arange_no_tensor_can_hold_is_refused_where_it_is_written(manifest_file, args, words):
    """Its shape rule raised OverflowError or ValueError out of the checks: an internal error, exit 3."""
    path = manifest_file(GOOD.replace('{op: relu, inputs: [x]}', f"{{op: arange, args: {args}}}"))
    assert [e for e in errors(path) if words in e], errors(path)


def test_a_number_beyond_float64_is_refused_where_it_is_written(manifest_file):
    """Ops compute with a number argument as a float64: an integer past its range failed the run instead."""
    path = manifest_file(GOOD.replace('{op: relu, inputs: [x]}', "{op: mul, inputs: [x], args: {value: " + "9" * 400 + "}}"))
    (error,) = errors(path)
    assert error.startswith(f"{path}:9:") and "argument 'value' of op 'mul' must be a number within float64's " \
        "range (about ±1.8e308), got 999" in error


def test_missing_op_argument(manifest_file):
    path = manifest_file(GOOD.replace("seed: 0}", "}").replace('["${n}", 2], ', '["${n}", 2]'))
    assert errors(path) == [f"{path}:8:32: error: op 'random.normal' needs argument 'seed'"]


def test_dtype_the_op_does_not_support(manifest_file):
    path = manifest_file(GOOD.replace("op: relu, inputs: [x]", "op: softmax, inputs: [x], dtype: int8"))
    assert errors(path) == [
        f"{path}:9:40: error: op 'softmax' does not support dtype int8 (supported: fp32, fp16, bf16, fp8e4m3, fp8e5m2, fp64)"
    ]


def test_cycle_names_its_stages(manifest_file):
    path = manifest_file("""
    version: 1
    name: t
    executors: {host: {vendor: cpu}}
    stages:
      a: {op: relu, inputs: [c], executor: host}
      b: {op: relu, inputs: [a]}
      c: {op: relu, inputs: [b]}
    outputs: {a: a}
    """)
    assert errors(path) == [f"{path}:6:3: error: cycle between stages: a -> b -> c -> a"]


def test_alike_stages_are_each_checked_and_keep_their_own_fields(manifest_file):
    """Stages of one op, dtype and number of inputs are settled once; what else a stage says is its own."""
    path = manifest_file("""
    version: 1
    name: t
    executors: {host: {vendor: cpu}}
    stages:
      a: {op: ones, args: {shape: [2]}}
      b: {op: relu, inputs: [a]}
      c: {op: relu, inputs: [b], retries: 2, cache: false}
      d: {op: relu, inputs: [c, a]}
      e: {op: relu, inputs: [e], executor: hots}
      f: {op: relu, inputs: [b], dtype: int4}
      g: {op: relu, inputs: [h]}
      h: {op: relu, inputs: [a]}
    outputs: {g: g}
    """)
    assert errors(path) == [
        f"{path}:9:25: error: op 'relu' takes 1 input, stage 'd' gives 2",
        f"{path}:10:3: error: cycle between stages: e -> e",
        f"{path}:10:40: error: stage 'e' names executor 'hots', which is not declared (declared: host); did you mean 'host'?",
    ]
    good = manifest_file(open(path).read().replace("[c, a]", "[c]").replace("[e], executor: hots", "[d]"))
    m = compile_manifest(load(good))
    b, c, g = m.stages["b"], m.stages["c"], m.stages["g"]
    assert (b.retries, b.cache, b.timeout, b.vendors, b.colocate_with) == (0, True, None, (), None)
    assert (c.retries, c.cache, c.inputs, g.inputs) == (2, False, ("b",), ("h",))
    assert b.args == c.args and b.args is not c.args
    assert m.stages["f"].dtype.value == "int4"


def test_output_naming_no_stage(manifest_file):
    path = manifest_file(GOOD.replace("{y: y}", "{y: yy}"))
    assert errors(path) == [f"{path}:10:14: error: output 'y' names 'yy', which is not a stage; did you mean 'y'?"]


def test_duplicate_key(manifest_file):
    path = manifest_file(GOOD.replace("  y: {op: relu", "  x: {op: relu"))
    assert errors(path) == [f"{path}:9:3: error: duplicate key 'x'"]


def test_all_problems_are_reported_at_once(manifest_file):
    path = manifest_file(
        GOOD.replace("op: relu", "op: rleu").replace("executor: host}", "executor: gpu}").replace("{y: y}", "{y: q}")
    )
    found = errors(path)
    assert [m.split(": error:")[0] for m in found] == [f"{path}:8:73", f"{path}:9:11", f"{path}:10:14"]


def test_empty_file_and_missing_file(manifest_file, tmp_path):
    path = manifest_file("")
    assert errors(path) == [f"{path}:1:1: error: the file is empty; a manifest is a YAML mapping"]
    with pytest.raises(ManifestError, match="no such file"):
        load(tmp_path / "absent.yaml")


def test_overrides_are_typed_and_checked(manifest_file):
    path = manifest_file(GOOD)
    m = compile_manifest(load(path), parse_overrides(["n=8"]))
    assert m.stages["x"].args["shape"] == [8, 2]
    assert m.params["n"] == 8
    base = compile_manifest(load(path))
    assert base.digest != m.digest
    with pytest.raises(UsageError, match=r"declares no param 'batch' \(declared: n, tag\)"):
        compile_manifest(load(path), {"batch": 3})
    with pytest.raises(UsageError, match="KEY=VALUE"):
        parse_overrides(["n"])


def test_interpolation_inside_text_keeps_text(manifest_file):
    path = manifest_file(GOOD.replace("{y: y}", '{y: y}\ndescription: "n=${n} tag=${tag}"'))
    assert compile_manifest(load(path)).description == "n=4 tag=run"


def test_loads_keeps_marks():
    doc = loads("a:\n  - 1\n  - {b: 2}\n", "f.yaml")
    assert str(doc.at(("a", 1, "b"))) == "f.yaml:3:9"
    assert str(doc.key_at(("a", 1, "b"))) == "f.yaml:3:6"


def test_alias_bombs_and_deep_nesting_are_errors_not_hangs(manifest_file, monkeypatch):
    import hetflow.engine.manifest.loader as ld

    monkeypatch.setattr(ld, "MAX_VALUES", 50_000)  # the same check as at 2,000,000, reached sooner
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefg", "bcdefgh"))
    path = manifest_file(bomb)
    (msg,) = errors(path)
    assert msg.startswith(f"{path}:") and msg.endswith("error: the document has more than 50,000 values once aliases are expanded")
    deep = manifest_file("a: " + "[" * 100 + "]" * 100 + "\n", "deep.yaml")
    (msg,) = errors(deep)
    assert msg.endswith("error: the document has nesting deeper than 64 levels")
    deeper = manifest_file("a: " + "[" * 5000 + "]" * 5000 + "\n", "deeper.yaml")
    (msg,) = errors(deeper)
    # libyaml's composer reaches our limit; PyYAML's pure-Python parser stops earlier, with its own message
    assert msg.startswith(f"{deeper}:1:") and (msg.endswith("error: the document has nesting deeper than 64 levels")
                                               or msg.endswith("exceeded maximum nesting depth"))


def test_the_fast_schema_check_agrees_with_jsonschema(manifest_file):
    """The happy path trusts jsonschema-rs's "valid": it must never accept what jsonschema refuses."""
    import glob
    import os

    import jsonschema

    from hetflow.engine.manifest.schemacheck import _fast_validator, schema

    def verdicts(tree):
        return _fast_validator().accepts(tree), not list(jsonschema.Draft202012Validator(schema()).iter_errors(tree))

    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    trees = [dict(compile_manifest(load(p)).resolved) for p in sorted(glob.glob(os.path.join(repo, "examples", "*.yaml"))
                                                                     + glob.glob(os.path.join(repo, "pipelines", "*.yaml")))]
    good = load(manifest_file(GOOD)).value
    assert all(verdicts(t) == (True, True) for t in trees + [good])
    bad = [
        {**good, "version": 7},
        {**good, "extra": 1},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "retries": "1"}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "dtype": "float64"}}},
        {**good, "stages": {"9bad": {"op": "relu"}}},
        {**good, "executors": {"host": {"vendor": ["cpu", "cpu"]}}},
        {**good, "matrix": {"n": []}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "phase": "execute", "inputs": ["x"]}}},
        {**good, "stages": {**good["stages"], "y": {"inputs": ["x"]}}},
    ]
    for tree in bad:
        assert verdicts(tree) == (False, False), tree
    import datetime

    from hetflow.engine.manifest.resolve import UNDEFINED

    # where the two differ, the fast check refuses and the precise one decides
    edges = [
        {**good, "stages": {**good["stages"], "y\n": {"op": "relu", "inputs": ["x"]}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "timeout": float("nan")}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "args": {"at": datetime.date(2001, 1, 2)}}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "args": {"b": b"x"}}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "retries": UNDEFINED}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "retries": 1.0}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "retries": True}}},
        {**good, "stages": {**good["stages"], "y": {"op": "relu", "inputs": ["x"], "retries": 2**80}}},
    ]
    for tree in edges:
        fast, precise = verdicts(tree)
        assert precise or not fast, tree
        sid, spec = list(tree["stages"].items())[-1]
        assert precise or not _fast_validator().accepts_stage(sid, spec), tree


def test_references_resolve_as_the_walk_with_paths_does_and_share_what_holds_none():
    from hetflow.engine.manifest import resolve as rs

    stages = "".join(f"  s{i}: {{op: relu, inputs: [s{i - 1}]}}\n" for i in range(1, 50))
    text = ("version: 1\nname: '${tag}-run'\nparams: {n: 4, tag: run, shape: [2, 3]}\nexecutors: {host: {vendor: cpu}}\n"
            "stages:\n  s0: {op: random.normal, args: {shape: '${shape}', seed: '${n}'}, executor: host}\n" + stages
            + "  t: {op: relu, inputs: [s49], description: 'n=${n}, tag=${tag}, ${n}${n}'}\noutputs: {y: t}\n")
    doc = loads(text, "r.yaml")
    for overrides in ({}, {"n": 9}, {"shape": [8]}):
        values = {**doc.value["params"], **overrides}
        resolved, problems = rs.resolve(doc, overrides)
        walked = {k: (v if k in ("params", "version", "name") else rs._interpolate(v, (k,), values, doc, []))
                  for k, v in doc.value.items()}
        assert problems == [] and resolved == {**walked, "params": values}
        assert resolved["stages"]["s7"] is doc.value["stages"]["s7"] and resolved["outputs"] is doc.value["outputs"]
    assert resolved["stages"]["s0"]["args"] == {"shape": [8], "seed": 4}
    assert resolved["stages"]["t"]["description"] == "n=4, tag=run, 44"
    _, problems = rs.resolve(loads(text.replace("tag=${tag}", "tag=${tga}").replace("'${n}'}", "'${m}'}"), "r.yaml"))
    assert [str(d) for d in problems] == [
        "r.yaml:6:59: error: undefined param ${m} (declared params: n, shape, tag)",
        "r.yaml:56:45: error: undefined param ${tga} (declared params: n, shape, tag); did you mean 'tag'?"]


def _cli(*argv):
    import io

    from hetflow.engine.cli import main

    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


NAMES = """\
version: 1
name: n
executors: {h: {vendor: cpu}}
stages:
  ok: {op: full, args: {shape: [2], value: 1}}
  "a/b": {op: full, args: {shape: [2], value: 1}}
  "a b": {op: full, args: {shape: [2], value: 1}}
outputs: {y: "x/y"}
"""


def test_a_bad_name_is_said_at_its_own_key_in_words_not_at_its_mapping_as_a_pattern(tmp_path):
    path = tmp_path / "n.yaml"
    path.write_text(NAMES)
    code, _, err = _cli("validate", str(path))
    assert code == 2
    rule = "a name starts with a letter or '_' and holds letters, digits, '_' or '-'"
    assert f"{path}:6:3: error: invalid name 'a/b' in stages: {rule}" in err
    assert f"{path}:7:3: error: invalid name 'a b' in stages: {rule}" in err
    assert f"{path}:8:14: error: outputs.y must be a name, found 'x/y': {rule}" in err
    assert "does not match" not in err


def test_missing_keys_are_said_once_together(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2
    assert err.count("error:") == 1 and "missing required keys 'executors', 'stages', 'outputs'" in err


DATED = """\
version: 1
name: dated
params: {d: "2001-01-01", k: 1}
matrix: {d: [2001-12-14, "2002-01-01"]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: full, args: {shape: [2], value: "${k}"}, description: "${d}"}
outputs: {x: x}
"""


def test_a_date_yaml_made_of_an_unquoted_value_is_said_with_the_quotes_that_keep_it_text(tmp_path):
    path = tmp_path / "dated.yaml"
    path.write_text(DATED)
    for command in ("validate", "plan", "run"):
        code, _, err = _cli(command, str(path), "--runs-dir", str(tmp_path / "runs")) if command == "run" \
            else _cli(command, str(path))
        assert code == 2 and "internal error" not in err, (command, err)
        assert (f"{path}:4:14: error: matrix.d.0 is a date (YAML reads an unquoted 2001-12-14 so); quote it, "
                "'2001-12-14', to give it as text") in err, (command, err)
    path.write_text(DATED.replace('params: {d: "2001-01-01"', "params: {d: 2001-01-01").replace("matrix: {d: [2001-12-14, \"2002-01-01\"]}\n", ""))
    code, _, err = _cli("validate", str(path))
    assert code == 2 and f"{path}:3:13: error: params.d is a date" in err, err
    # on the command line the same value is the text it was typed as
    path.write_text(DATED.replace("matrix: {d: [2001-12-14, \"2002-01-01\"]}\n", ""))
    code, out, err = _cli("plan", str(path), "-p", "d=2001-12-14", "--format", "json")
    assert code == 0, err


def test_nan_is_no_number_a_bound_accepts_but_stays_a_value_where_nothing_bounds_it(tmp_path):
    path = tmp_path / "nan.yaml"
    path.write_text("version: 1\nname: nan\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                    "  x: {op: random.normal, args: {shape: [2], seed: 1}, timeout: .nan}\n"
                    "  y: {op: full, args: {shape: [2], value: .nan}}\noutputs: {x: x, y: y}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and err.count("error:") == 1
    assert f"{path}:5:64: error: stages.x.timeout must be more than 0, found nan" in err


MATRIX = """\
version: 1
name: mx
params: {n: 4}
matrix: {n: [1, -1, 2]}
executors: {h: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: ["${n}", 4], seed: 1}}
outputs: {x: x}
"""


def test_plan_checks_every_point_as_validate_does_and_plans_the_first(tmp_path):
    path = tmp_path / "mx.yaml"
    path.write_text(MATRIX)
    said = "[point mx[n=-1], where n=-1: matrix at"
    for command in ("validate", "plan"):
        code, _, err = _cli(command, str(path))
        assert code == 2 and said in err, (command, err)
    code, out, err = _cli("plan", str(path), "--point", "mx[n=2]")  # the point asked for is planned alone
    assert code == 0, err


def _bomb(item: str, last: str) -> str:
    """Ten params, each naming the next ten times: the first would be ten billion of the last."""
    names = "abcdefghij"
    params = [f"{n}: {item.replace('X', names[i + 1])}" for i, n in enumerate(names[:-1])] + [f"j: {last}"]
    return ("version: 1\nname: bomb\nparams: {" + ", ".join(params) + "}\nexecutors: {h: {vendor: cpu}}\n"
            "stages:\n  x: {op: full, args: {shape: [2], value: 1}, description: \"${a}\"}\noutputs: {x: x}\n")


@pytest.mark.parametrize("item, last, said", [
    ('"' + "${X}" * 10 + '"', "xxxxxxxxxx", "characters once its ${...} are replaced, more than the 1,048,576"),
    ("[" + ", ".join(['"${X}"'] * 10) + "]", "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]", "params holds more than 2,000,000 values"),
])
def test_params_that_each_repeat_the_next_are_refused_before_they_grow_not_built(tmp_path, item, last, said):
    import time

    path = tmp_path / "bomb.yaml"
    path.write_text(_bomb(item, last))
    for command in ("validate", "plan"):
        began = time.monotonic()
        code, _, err = _cli(command, str(path))
        assert code == 2 and said in err and f"{path}:3:" in err, (command, err)
        assert time.monotonic() - began < 30


@pytest.mark.parametrize("executor, said", [
    ("{vendor: []}", "executors.h.vendor must have at least 1 item, found 0"),
    ("{vendor: [cuda, cuda]}", "executors.h.vendor must not repeat an item, found ['cuda', 'cuda']"),
    ("{vendor: cpu, devices: [0, 0]}", "executors.h.devices must not repeat an item, found [0, 0]"),
    ("{vendor: nvidia}", "executors.h.vendor must be one of cuda, rocm, vulkan, cpu; found 'nvidia'"),
])
def test_a_value_of_one_kind_is_told_what_is_wrong_with_it_not_what_another_kind_must_be(tmp_path, executor, said):
    path = tmp_path / "v.yaml"
    path.write_text(f"version: 1\nname: v\nexecutors: {{h: {executor}}}\nstages:\n"
                    "  x: {op: full, args: {shape: [2], value: 1}}\n  y:\noutputs: {x: x}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and said in err, err
    # a stage left empty is said once, as what it is
    assert err.count("stages.y") == 1 and f"{path}:6:5: error: stages.y must be a mapping, found None" in err


BLOCK_USE = """\
version: 1
name: b
executors:
  host: {vendor: cpu}
blocks:
  l:
    inputs: [x]
    stages:
      h: {op: relu, inputs: [x]}
      q: {op: relu, inputs: [outside]}
    outputs: {x: h}
stages:
  outside: {op: random.normal, args: {shape: [4, 4], seed: 1}}
  u: {use: l, inputs: {x: outside}, repeat: 2}
outputs: {p: u.zz}
"""


def test_a_block_naming_a_stage_outside_it_and_an_output_naming_a_use_are_told_what_to_write(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(BLOCK_USE)
    code, _, err = _cli("validate", str(path))
    assert code == 2
    assert ("'outside' is a stage outside the block, which a block's stages cannot name: add it to the block's "
            "inputs: and give it in each use of the block") in err and "did you mean 'outside'" not in err
    assert "output 'p' names 'u.zz': 'u' is not a stage; 'u' is a use of a block, whose stages are u.0.h, u.0.q" in err


def test_a_long_list_param_named_by_many_stages_is_refused_once_not_expanded_in_each(tmp_path):
    values = ", ".join(str(i) for i in range(20_000))
    stages = "\n".join(f'  s{i}: {{op: full, args: {{shape: [2], value: 1}}, description: "${{a}}"}}'
                       for i in range(150))
    path = tmp_path / "refs.yaml"
    path.write_text(f"version: 1\nname: refs\nparams: {{a: [{values}]}}\nexecutors: {{h: {{vendor: cpu}}}}\n"
                    f"stages:\n{stages}\noutputs: {{x: s0}}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and err.count("error:") == 1, err[:2000]
    assert f"{path}:6:3: error: stages holds more than 2,000,000 values once its ${{...}} are replaced" in err


@pytest.mark.parametrize("line, where, message", [
    ("host: {vendor: cpu, device: 2.0}", "5:31", "executors.host.device must be an integer, found 2.0"),
    ("host: {vendor: cpu, device: '${d}'}", "5:31", "executors.host.device must be an integer, found 1.0"),
    ("host: {vendor: cpu, memory: 1e9}", "5:31", "executors.host.memory must be an integer, found 1000000000.0"),
    ("defaults: {retries: 1e3}", "6:21", "defaults.retries must be an integer, found 1000.0"),
    ("g: {program: guest.elf, chunk_steps: 1024.0}", "8:40", "emulators.g.chunk_steps must be an integer, found 1024.0"),
    ("g: {program: guest.elf, max_steps: 1e6}", "8:38", "emulators.g.max_steps must be an integer, found 1000000.0"),
    ("g: {program: guest.elf, max_output: 4096.0}", "8:39", "emulators.g.max_output must be an integer, found 4096.0"),
    ("x: {op: random.normal, args: {shape: [4, 4], seed: 1}, retries: 2.0}", "10:67",
     "stages.x.retries must be an integer, found 2.0"),
])
def test_an_integer_written_as_a_float_is_refused_where_it_stands(manifest_file, line, where, message, tmp_path):
    """JSON Schema takes 2.0 for an integer, and YAML reads 2.0 and 1e3 as floats: ``repeat: 2.0`` crashed the
    expansion (TypeError), ``chunk_steps: 1024.0`` crashed the run, ``device: 2.0`` planned as device 0."""
    lines = ["version: 1", "name: t", "params: {d: 1.0}", "executors:", "  host: {vendor: cpu}", "defaults: {}",
             "emulators:", "  g: {program: guest.elf}", "stages:",
             "  x: {op: random.normal, args: {shape: [4, 4], seed: 1}}", "outputs: {y: x}"]
    key = line.split(":")[0]
    for i, old in enumerate(lines):
        if old.strip().split(":")[0] == key:
            lines[i] = old[:len(old) - len(old.lstrip())] + line
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "examples", "guests", "fib.elf"), tmp_path / "guest.elf")
    path = manifest_file("\n".join(lines) + "\n")
    assert errors(path) == [f"{path}:{where}: error: {message}"]


def test_a_block_repeated_a_float_number_of_times_is_refused_not_a_crash(manifest_file):
    block = manifest_file("""
    version: 1
    name: t
    executors: {host: {vendor: cpu}}
    blocks:
      lay: {inputs: [a], stages: {r: {op: relu, inputs: [a]}}, outputs: {o: r}}
    stages:
      x: {op: random.normal, args: {shape: [4, 4], seed: 1}}
      L: {use: lay, inputs: {a: x}, repeat: 2.0, chain: {a: o}}
    outputs: {y: L.o}
    """)
    assert errors(block) == [f"{block}:9:41: error: stages.L.repeat must be an integer, found 2.0"]


def test_a_name_that_ends_in_a_newline_is_refused(manifest_file):
    """Python's ``$`` matches before a final newline, where the schema's (ECMA-262's) does not: ``name: "a\\n"``
    passed, and made a run folder whose name held the newline, which ``$(hetflow run ... | tail -1)`` cut."""
    path = manifest_file(GOOD.replace("name: t", 'name: "t\\n"'))
    assert errors(path) == [f"{path}:3:7: error: name must start with a letter or digit and hold only letters, digits, "
                            "'.', '_' or '-' (it names the runs' ids and folders), found 't\\n'"]
    path = manifest_file(GOOD.replace("outputs: {y: y}", 'outputs: {"y\\n": y}'))
    (message,) = errors(path)
    assert message.startswith(f"{path}:10:11: error: invalid name 'y\\n' in outputs"), message


def test_a_written_stage_name_holds_no_dot(manifest_file):
    """``run.steps`` written as a stage took the place of emulator phase ``run``'s step count in ``outputs:``."""
    path = manifest_file(GOOD.replace("  y: {op: relu", "  x.y: {op: relu, inputs: [x]}\n  y: {op: relu"))
    assert errors(path) == [f"{path}:9:3: error: invalid name 'x.y' in stages: a stage's name holds letters, "
                            "digits, '_' or '-', not '.' (USE.STAGE names a stage of a block's instance, "
                            "STAGE.FIELD a field of an emulator phase)"]


@pytest.mark.parametrize("emulator, phase, said", [
    ("{chunk_steps: 5}", "execute", "5:6: error: emulators.g is missing required key 'program'"),
    ("{program: guest.elf}", "explode", "7:16: error: stages.run.phase must be one of execute, mem-plans, "
                                        "rom-histogram, plan, witness; found 'explode'"),
])
def test_a_phase_that_did_not_check_is_not_called_no_phase_again(manifest_file, tmp_path, emulator, phase, said):
    """Each error was followed by "output 's' names 'run.steps': 'run' is not an emulator phase", which it is."""
    shutil.copy(os.path.join(os.path.dirname(__file__), "..", "examples", "guests", "fib.elf"), tmp_path / "guest.elf")
    path = manifest_file(f"version: 1\nname: em\nexecutors: {{h: {{vendor: cpu}}}}\nemulators:\n  g: {emulator}\n"
                         f"stages:\n  run: {{phase: {phase}, emulator: g}}\noutputs: {{s: run.steps}}\n")
    assert errors(path) == [f"{path}:{said}"]


def test_outputs_that_differ_only_by_case_are_refused_at_the_second(manifest_file):
    # Y.npy and y.npy are one file on macOS's and Windows' usual file systems: the record would describe both
    path = manifest_file(GOOD.replace("outputs: {y: y}", "outputs: {y: y, x: x, Y: x}"))
    assert errors(path) == [f"{path}:10:23: error: outputs 'y' and 'Y' differ only by case: their files y.npy and "
                            "Y.npy are one file on a file system that ignores case (macOS's and Windows' by default); "
                            "rename one"]


def test_a_lone_surrogate_escape_is_bad_input_at_its_place_not_an_internal_error(tmp_path):
    """"\\ud800" (half of a UTF-16 pair) in a description, a param or a -p value ended in an internal error when
    the manifest's digest was made (UTF-8 cannot write it)."""
    import hetflow

    path = tmp_path / "m.yaml"
    path.write_text('version: 1\nname: m\ndescription: "x\\ud800"\nparams: {tag: a}\nexecutors: {h: {vendor: cpu}}\n'
                    'stages:\n  y: {op: ones, args: {shape: [2]}, description: "${tag}"}\noutputs: {y: y}\n')
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(str(path)))
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:3:14: error: description holds '\\ud800', a lone surrogate (half of a UTF-16 pair, not a "
        "character); write the character itself, or its \\U escape"]
    path.write_text(path.read_text().replace('"x\\ud800"', "fine"))
    with pytest.raises(ManifestError) as info:
        hetflow.plan(path, params={"tag": "\ud800"})
    assert [d.origin.line for d in info.value.diagnostics] == [4, 7]
    assert "params.tag holds '\\ud800'" in str(info.value.diagnostics[0])


def test_a_plugin_entry_holding_a_nul_is_bad_input_at_its_place(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text('version: 1\nname: m\nplugins: ["a\\0b.py"]\nexecutors: {h: {vendor: cpu}}\n'
                    'stages:\n  y: {op: ones, args: {shape: [2]}}\noutputs: {y: y}\n')
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(str(path)))
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:3:11: error: plugin 'a\\x00b.py': no such file or module (a path or a module's name cannot hold a "
        "NUL character)"]


def test_a_version_written_as_a_float_is_refused_as_every_other_integer_field_is(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("version: 1.0\nname: m\nexecutors: {h: {vendor: cpu}}\nstages:\n  y: {op: ones, args: {shape: [2]}}\n"
                    "outputs: {y: y}\n")
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(str(path)))
    assert [str(d) for d in info.value.diagnostics] == [f"{path}:1:10: error: version must be an integer, found 1.0"]


@pytest.mark.parametrize("given", ["x", "5", "{x: 1}", "[5]"])
def test_inputs_that_are_not_a_list_of_names_are_said_so_not_counted_as_none(tmp_path, given):
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors: {h: {vendor: cpu}}\nstages:\n  x: {op: zeros, args: {shape: [2]}}\n"
                    f"  y: {{op: relu, inputs: {given}}}\noutputs: {{y: y}}\n")
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(str(path)))
    said = [d.message for d in info.value.diagnostics]
    assert not any("takes 1 input" in m for m in said) and any("inputs" in m for m in said), said


@pytest.mark.parametrize("field, given", [("memory", "16gib"), ("memory_limit", '"16 gb"'), ("memory", "lots")])
def test_a_size_that_is_not_one_says_how_a_size_is_written(tmp_path, field, given):
    """It said "'16gib' is not valid under any of the given schemas", which gives no hint that the unit's case counts."""
    path = tmp_path / "m.yaml"
    path.write_text(f"version: 1\nname: m\nexecutors:\n  h: {{vendor: cpu, {field}: {given}}}\nstages:\n"
                    "  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    with pytest.raises(ManifestError) as info:
        compile_manifest(load(str(path)))
    (said,) = [d.message for d in info.value.diagnostics]
    assert said.startswith(f"executors.h.{field} must be bytes as an integer, or a size with its unit as written "
                           "here: '16GiB'") and said.endswith(f"found {given.strip(chr(34))!r}"), said
