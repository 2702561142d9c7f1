"""``defaults:`` and blocks: expansion into instance ids, positions of errors at both places, the cache, the editors."""

import doctest
import io
import json
import pathlib
import textwrap

import numpy as np
import pytest

import hetflow
from hetflow.engine import cli
from hetflow.engine.manifest import blocks
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load, parse_overrides
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe


def write(folder: pathlib.Path, name: str, text: str) -> str:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return str(path)


def compiled(path: str, **params):
    return compile_manifest(load(path), parse_overrides([f"{k}={v}" for k, v in params.items()]))


def errors(path: str) -> list[str]:
    with pytest.raises(ManifestError) as e:
        compiled(path)
    return str(e.value).splitlines()


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_the_module_examples_run():
    assert doctest.testmod(blocks, optionflags=doctest.ELLIPSIS).failed == 0


DEFAULTS = """\
version: 1
name: defaults
params: {dt: fp16, tries: 2}
defaults: {dtype: "${dt}", retries: "${tries}", executor: a, cache: false}
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [4, 4], seed: 1}}
  y: {op: relu, inputs: [x], dtype: fp32, retries: 0, executor: b, cache: true}
  i: {op: argmax, inputs: [y], args: {axis: 1}, dtype: int64}
outputs: {y: y}
"""


def test_defaults_apply_where_a_stage_says_nothing_and_params_work_in_them(tmp_path):
    m = compiled(write(tmp_path, "m.yaml", DEFAULTS))
    x, y, i = m.stages["x"], m.stages["y"], m.stages["i"]
    assert (x.dtype.value, x.retries, x.executor, x.cache) == ("fp16", 2, "a", False)
    assert (y.dtype.value, y.retries, y.executor, y.cache) == ("fp32", 0, "b", True)
    assert (i.dtype.value, i.retries) == ("int64", 2)
    assert compiled(write(tmp_path, "m.yaml", DEFAULTS), dt="bf16").stages["x"].dtype.value == "bf16"
    # the plan shows what each stage got
    code, out, _ = run_cli("plan", str(tmp_path / "m.yaml"), "--format", "json")
    nodes = json.loads(out)["nodes"]
    assert code == 0 and (nodes["x"]["dtype"], nodes["x"]["executor"]) == ("fp16", "a")
    assert (nodes["y"]["dtype"], nodes["y"]["executor"]) == ("fp32", "b")


def test_a_default_no_stage_may_take_is_an_error_at_the_default(tmp_path):
    path = write(tmp_path, "m.yaml", DEFAULTS.replace("cache: false}", "cache: false, op: relu}"))
    assert errors(path) == [f"{path}:4:76: error: unknown key 'op' in defaults "
                            "(allowed: dtype, executor, vendor, retries, timeout, cache)"]
    code, out, err = run_cli("validate", path)
    assert code == 2 and "Traceback" not in out + err and f"{path}:4:76: error: unknown key 'op'" in out + err
    # a wrong value is reported once, where it is written, not again on every stage it would reach
    path = write(tmp_path, "m.yaml", DEFAULTS.replace('retries: "${tries}"', "retries: -1"))
    assert errors(path) == [f"{path}:4:37: error: defaults.retries must be at least 0, found -1"]


def test_a_default_a_stage_cannot_take_is_reported_at_the_default_with_the_stage(tmp_path):
    path = write(tmp_path, "m.yaml", DEFAULTS.replace("dt: fp16", "dt: int4").replace(
        "  i: {op: argmax, inputs: [y], args: {axis: 1}, dtype: int64}\n", ""))
    assert errors(path) == [
        f"{path}:4:19: error: op 'random.normal' does not support dtype int4 "
        "(supported: fp32, fp16, bf16, fp8e4m3, fp8e5m2, fp64)",
        f"{path}:7:3: note: as the dtype of stage 'x'"]


LAYERS = """\
version: 1
name: layers
params: {n: 3, width: 4}
executors: {host: {vendor: cpu}, side: {vendor: cpu}}
blocks:
  dense:
    params: {key: w}
    inputs: [x]
    stages:
      w: {op: load, args: {path: weights.npz, key: "${key}"}}
      h: {op: matmul, inputs: [x, w]}
      y: {op: tanh, inputs: [h]}
    outputs: {y: y}
  layer:
    inputs: [x]
    stages:
      proj: {use: dense, inputs: {x: x}, params: {key: "w${index}"}}
      out: {op: add, inputs: [proj.y, x], executor: side}
    outputs: {x: out}
stages:
  x: {op: load, args: {path: weights.npz, key: x}}
  layers: {use: layer, inputs: {x: x}, repeat: "${n}", executor: host}
  top: {op: relu, inputs: [layers]}
outputs: {top: top, last: layers.x, first: layers.0.proj.y}
"""


def weights(folder: pathlib.Path, n: int = 3, width: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    arrays = {"x": rng.standard_normal((2, width)).astype(np.float32)}
    arrays.update({f"w{i}": rng.standard_normal((width, width)).astype(np.float32) for i in range(n)})
    np.savez(folder / "weights.npz", **arrays)
    return arrays


def test_nested_repeated_blocks_get_stable_ids_chain_and_compute_what_numpy_does(tmp_path):
    w = weights(tmp_path)
    path = write(tmp_path, "m.yaml", LAYERS)
    m = compiled(path)
    assert list(m.stages) == ["x", *[f"layers.{i}.{s}" for i in range(3) for s in ("proj.w", "proj.h", "proj.y", "out")], "top"]
    # ${index} of the outer repeat reaches the inner block through its use's params
    assert [m.stages[f"layers.{i}.proj.w"].args["key"] for i in range(3)] == ["w0", "w1", "w2"]
    # each instance takes the one before it; the use's name alone is its one output, the last instance's
    assert m.stages["layers.0.proj.h"].inputs == ("x", "layers.0.proj.w")
    assert m.stages["layers.2.proj.h"].inputs == ("layers.1.out", "layers.2.proj.w")
    assert m.stages["layers.2.out"].inputs == ("layers.2.proj.y", "layers.1.out")
    assert m.stages["top"].inputs == ("layers.2.out",) and m.outputs == {
        "top": "top", "last": "layers.2.out", "first": "layers.0.proj.y"}
    # executor: on the use pins its stages, except one that pins its own
    assert {m.stages[f"layers.1.{s}"].executor for s in ("proj.w", "proj.h", "proj.y")} == {"host"}
    assert m.stages["layers.1.out"].executor == "side"

    result = execute(m, plan(m, probe), runs_dir=str(tmp_path / "runs"))
    x = w["x"]
    for i in range(3):
        x = np.tanh(x @ w[f"w{i}"]) + x
    got = np.load(tmp_path / "runs" / result.record["run_id"] / "last.npy")
    np.testing.assert_allclose(got, x, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.load(tmp_path / "runs" / result.record["run_id"] / "top.npy"), np.maximum(x, 0), rtol=1e-5, atol=1e-6)
    assert set(result.record["plan"]["nodes"]) >= {"layers.2.proj.w", "layers.0.out"}
    assert result.record["outputs"]["last"]["tensor"] == "layers.2.out"


def test_plan_json_names_instances_and_where_each_was_written(tmp_path):
    weights(tmp_path)
    path = write(tmp_path, "m.yaml", LAYERS)
    code, out, _ = run_cli("plan", path, "--format", "json")
    nodes = json.loads(out)["nodes"]
    assert code == 0 and "layers.1.proj.h" in nodes and nodes["layers.1.proj.h"]["inputs"] == ["layers.0.out", "layers.1.proj.w"]
    assert nodes["layers.1.proj.h"]["origin"] == f"{path}:11:7" and nodes["layers.1.proj.h"]["executor"] == "host"
    assert nodes["layers.1.out"]["executor"] == "side"
    code, out, _ = run_cli("plan", path)
    assert code == 0 and "layers.2.proj.y" in out


LIBRARY = """\
blocks:
  mlp:
    params: {width: 4, seed: 0}
    inputs: [x]
    stages:
      w: {op: random.normal, args: {shape: ["${width}", "${width}"], seed: "${seed}"}}
      h: {op: matmul, inputs: [x, w]}
      y: {op: relu, inputs: [h]}
    outputs: {x: y}
"""

USER = """\
version: 1
name: user
params: {width: 4}
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [2, "${width}"], seed: 1}}
  mlp: {use: lib/blocks.yaml#mlp, inputs: {x: x}, params: {width: "${width}", seed: 3}}
  y: {op: relu, inputs: [mlp.x]}
outputs: {y: y}
"""


def test_a_block_from_a_library_file(tmp_path):
    write(tmp_path, "lib/blocks.yaml", LIBRARY)
    path = write(tmp_path, "m.yaml", USER)
    m = compiled(path, width=8)
    assert list(m.stages) == ["x", "mlp.w", "mlp.h", "mlp.y", "y"]
    assert m.stages["mlp.w"].args["shape"] == [8, 8] and m.stages["mlp.w"].args["seed"] == 3
    assert str(m.stages["mlp.h"].origin) == f"{tmp_path / 'lib/blocks.yaml'}:7:7"
    assert m.stages["y"].inputs == ("mlp.y",)


def test_an_error_in_a_block_of_another_file_names_both_places_and_the_instance(tmp_path):
    lib = write(tmp_path, "lib/blocks.yaml", LIBRARY.replace("op: matmul", "op: matmull"))
    path = write(tmp_path, "m.yaml", USER)
    assert errors(path) == [
        f"{lib}:7:15: error: unknown op 'matmull' in stage 'mlp.h'; did you mean 'matmul'?",
        f"{path}:7:3: note: in mlp (block lib/blocks.yaml#mlp)"]
    code, out, err = run_cli("validate", path)
    assert code == 2 and "Traceback" not in out + err
    assert f"{lib}:7:15: error: unknown op 'matmull'" in out + err and f"{path}:7:3: note: in mlp" in out + err


def test_an_error_in_a_nested_repeated_block_names_every_use(tmp_path):
    weights(tmp_path)
    path = write(tmp_path, "m.yaml", LAYERS.replace("y: {op: tanh, inputs: [h]}", "y: {op: tanh, inputs: [hh]}"))
    found = errors(path)
    # the message says it once for the instances it is wrong in; the diagnostics keep each instance's uses
    assert found[:3] == [
        f"{path}:12:30: error: stage 'layers.0.proj.y' takes input 'layers.0.proj.hh', which is not a stage; "
        "did you mean 'layers.0.proj.h'? (and in 2 more instances)",
        f"{path}:17:7: note: in layers.0.proj (block dense)",
        f"{path}:22:3: note: in layers.0 (block layer)"]
    with pytest.raises(ManifestError) as e:
        compiled(path)
    assert f"{path}:22:3: note: in layers.2 (block layer)" in str(e.value.diagnostics[2]).splitlines()


def test_a_param_of_a_block_that_is_undefined_or_unknown(tmp_path):
    weights(tmp_path)
    path = write(tmp_path, "m.yaml", LAYERS.replace('key: "${key}"', 'key: "${kye}"').replace(
        'params: {key: "w${index}"}', 'params: {key: "w${index}", width: 3}'))
    with pytest.raises(ManifestError) as e:
        compiled(path)
    found = [line for d in e.value.diagnostics for line in str(d).splitlines()]
    assert f"{path}:10:52: error: undefined param ${{kye}} (declared params: index, key); did you mean 'key'?" in found
    assert f"{path}:17:69: error: block 'dense' has no param 'width' (params: key)" in found
    assert f"{path}:17:7: note: in layers.2.proj (block dense)" in found
    assert f"{path}:17:69: error: block 'dense' has no param 'width' (params: key) (and in 2 more instances)" in errors(
        path)


def test_blocks_that_use_themselves_are_refused_with_the_cycle(tmp_path):
    path = write(tmp_path, "m.yaml", """\
        version: 1
        name: cycle
        executors: {host: {vendor: cpu}}
        blocks:
          a:
            inputs: [x]
            stages:
              inner: {use: b, inputs: {x: x}}
            outputs: {y: inner.y}
          b:
            inputs: [x]
            stages:
              inner: {use: a, inputs: {x: x}}
            outputs: {y: inner.y}
        stages:
          x: {op: zeros, args: {shape: [2]}}
          top: {use: a, inputs: {x: x}}
        outputs: {y: top.y}
        """)
    assert errors(path) == [f"{path}:13:20: error: block 'a' uses itself: a -> b -> a",
                            f"{path}:8:7: note: in top.inner (block b)",
                            f"{path}:17:3: note: in top (block a)"]


def test_nesting_deeper_than_the_limit_is_refused(tmp_path):
    levels = blocks.MAX_NESTING + 1
    text = ["version: 1", "name: deep", "executors: {host: {vendor: cpu}}", "blocks:"]
    for i in range(levels):
        inner = f"{{use: b{i + 1}, inputs: {{x: x}}}}" if i + 1 < levels else "{op: relu, inputs: [x]}"
        text += [f"  b{i}:", "    inputs: [x]", f"    stages: {{s: {inner}}}", "    outputs: {y: s}"]
    text += ["stages:", "  x: {op: zeros, args: {shape: [2]}}", "  top: {use: b0, inputs: {x: x}}", "outputs: {y: top}"]
    path = write(tmp_path, "m.yaml", "\n".join(text) + "\n")
    found = errors(path)
    assert len([line for line in found if "error:" in line]) == 1
    assert f"blocks nest deeper than {blocks.MAX_NESTING} uses here" in found[0]
    # one level less expands, and the innermost stage has the whole path as its id
    text = "\n".join(text).replace(f"{{use: b{levels - 1}, inputs: {{x: x}}}}", "{op: relu, inputs: [x]}")
    m = compiled(write(tmp_path, "ok.yaml", text + "\n"))
    assert "top" + ".s" * (levels - 1) in m.stages


def test_nesting_too_deep_under_repeats_is_said_once_beside_the_other_problems(tmp_path):
    """Every instance of an enclosing repeat reaches the limit: with each level repeated twice, 2^16 of them each
    said so (32,768 errors, 13 s). Three levels repeated here."""
    levels = blocks.MAX_NESTING + 2
    text = ["version: 1", "name: deep", "executors: {host: {vendor: cpu}}", "blocks:"]
    for i in range(levels):
        repeat = ", repeat: 2" if i < 3 else ", repeat: 1"
        inner = (f"{{use: b{i + 1}, inputs: {{x: x}}{repeat}}}" if i + 1 < levels else "{op: relu, inputs: [x]}")
        text += [f"  b{i}:", "    inputs: [x]", f"    stages: {{s: {inner}}}", "    outputs: {x: s}"]
    text += ["stages:", "  x: {op: zeros, args: {shape: [2]}}", "  top: {use: b0, inputs: {x: x}}",
             "  bad: {use: nosuch, inputs: {x: x}}", "outputs: {y: top}"]
    found = errors(write(tmp_path, "m.yaml", "\n".join(text) + "\n"))
    said = [line for line in found if "error:" in line]
    assert len(said) == 2, said
    assert f"blocks nest deeper than {blocks.MAX_NESTING} uses here" in said[0] and "nosuch" in said[1], said


def test_uses_that_expand_past_the_most_stages_are_refused_once_not_built(tmp_path, monkeypatch):
    """Three levels of repeat: 1000 are 10^9 stages: validate held the machine's memory until it ran out."""
    monkeypatch.setattr(blocks, "MAX_STAGES", 5_000)
    text = ["version: 1", "name: wide", "executors: {host: {vendor: cpu}}", "blocks:",
            "  b0:", "    inputs: [x]", "    stages: {y: {op: relu, inputs: [x]}}", "    outputs: {x: y}"]
    for k in (1, 2, 3):
        text += [f"  b{k}:", "    inputs: [x]", f"    stages: {{y: {{use: b{k - 1}, inputs: {{x: x}}, repeat: 1000}}}}",
                 "    outputs: {x: y}"]
    text += ["stages:", "  s: {op: ones, args: {shape: [2]}}", "  u: {use: b3, inputs: {x: s}}", "outputs: {o: u}"]
    path = write(tmp_path, "m.yaml", "\n".join(text) + "\n")
    found = errors(path)
    said = [line for line in found if "error:" in line]
    # counted before any stage is made (making them first took 48 s and 1 GB at the real limit)
    assert said == [f"{path}:23:3: error: the manifest's uses expand to more than 5,000 stages (the most hetflow "
                    "expands), 1,000,000,001 by use 'u' and those above it: a repeat nested in a repeat multiplies "
                    "(repeat: 1000 in a block repeated 1000 times is 10^6 stages); repeat fewer"], found
    # a count only a substitution says (a param whose default names another) is found as the stages are made
    path = write(tmp_path, "m.yaml", "\n".join(text).replace("repeat: 1000}", 'repeat: "${q}"}').replace(
        "    inputs: [x]\n    stages: {y: {use", '    params: {r: 1000, q: "${r}"}\n    inputs: [x]\n    stages: {y: {use')
                 + "\n")
    said = [line for line in errors(path) if "error:" in line]
    assert len(said) == 1 and "stages (the most hetflow expands) by stage 'u.y." in said[0], said


def test_uses_of_library_blocks_and_counts_set_by_p_are_counted_before_any_stage_is_made(tmp_path, monkeypatch):
    """The count looked into the manifest's own blocks alone, with their written numbers: a library's nested repeats,
    or a -p that set a repeat's count, were refused only once the limit's stages were made (40 s and 1.2 GB)."""
    library = ["version: 1", "blocks:",
               "  b0:", "    inputs: [x]", "    stages: {y: {op: relu, inputs: [x]}}", "    outputs: {x: y}"]
    for k in (1, 2):
        library += [f"  b{k}:", "    params: {n: 2}", "    inputs: [x]",
                    f"    stages: {{y: {{use: b{k - 1}, inputs: {{x: x}}, repeat: \"${{n}}\"}}}}", "    outputs: {x: y}"]
    write(tmp_path, "lib/layers.yaml", "\n".join(library) + "\n")
    manifest = ["version: 1", "name: wide", "executors: {host: {vendor: cpu}}", "stages:",
                "  s: {op: ones, args: {shape: [2]}}", "  u: {use: lib/layers.yaml#b2, inputs: {x: s}, params: {n: 100}}",
                "outputs: {o: u}"]
    path = write(tmp_path, "m.yaml", "\n".join(manifest) + "\n")
    # 100 instances of b1 (u's n), each of 2 of b0 (the library's default)
    assert len(compiled(path).stages) == 1 + 100 * 2
    monkeypatch.setattr(blocks, "MAX_STAGES", 5_000)

    def refusal(**params):
        with pytest.raises(ManifestError) as e:
            compiled(path, **params)
        return [line for line in str(e.value).splitlines() if "error:" in line]

    said = "{}:6:3: error: the manifest's uses expand to more than 5,000 stages (the most hetflow expands), {} by use " \
           "'u' and those above it: a repeat nested in a repeat multiplies (repeat: 1000 in a block repeated 1000 " \
           "times is 10^6 stages); repeat fewer"
    assert refusal(**{"u.n": 10_000}) == [said.format(path, "20,001")]
    assert refusal(**{"u.y.n": 1_000}) == [said.format(path, "100,001")]  # every instance of u.y
    assert refusal(**{"u.y.3.n": 10_000}) == [said.format(path, "10,199")]  # one: the 99 others keep their 2
    monkeypatch.setattr(blocks, "MAX_STAGES", 3_000)
    # the instance's own -p wins over the use's: 99 instances of 40 and one of 2
    assert refusal(**{"u.y.n": 40, "u.y.3.n": 2}) == [said.replace("5,000", "3,000").format(path, "3,963")]


def test_a_binding_or_a_blocks_output_that_names_nothing_is_said_where_it_is_written(tmp_path):
    """A use binding an input to no stage was said at the block's stage that read the input (in a library: inside
    the library); a block output naming no output of its own use was said at whatever read it, as the use's own
    name being no stage, or not at all where nothing read it."""
    write(tmp_path, "lib.yaml", """\
        version: 1
        blocks:
          two:
            inputs: [x]
            stages:
              a: {op: add, inputs: [x], args: {value: 1.0}}
              b: {op: add, inputs: [x], args: {value: 2.0}}
            outputs: {p: a, q: b}
          w:
            inputs: [x]
            stages:
              u: {use: two, inputs: {x: x}}
            outputs: {y: u.nope}
        """)
    top = """\
        version: 1
        name: m
        executors: {host: {vendor: cpu}}
        stages:
          z: {op: full, args: {shape: [1], value: 0.0}}
          s: {use: lib.yaml#two, inputs: {x: BOUND}}
          w: {use: lib.yaml#w, inputs: {x: z}}
        outputs: {o: z}
        """
    lib = str(tmp_path / "lib.yaml")
    path = write(tmp_path, "m.yaml", top.replace("BOUND", "zz"))
    assert errors(path) == [
        f"{lib}:13:18: error: output 'y' of block 'w' names 'u.nope', which is no output of use 'u' (outputs of "
        "block 'two': p, q)",
        f"{path}:7:3: note: in w (block lib.yaml#w)",
        f"{path}:6:38: error: use 's' binds input 'x' to 'zz', which is not a stage; did you mean 'z'?"]
    # a use of several outputs named alone, and USE.OUTPUT of one it does not have
    path = write(tmp_path, "m.yaml", top.replace("BOUND", "w2").replace("  w: {use: lib.yaml#w",
                                                                          "  w2: {use: lib.yaml#two"))
    assert errors(path)[0] == (f"{path}:6:38: error: use 's' binds input 'x' to 'w2', a use of block 'two', which "
                               "has several outputs: name one, w2.OUTPUT (p, q)")
    path = write(tmp_path, "m.yaml", top.replace("BOUND", "w2.r").replace("  w: {use: lib.yaml#w",
                                                                            "  w2: {use: lib.yaml#two"))
    assert errors(path)[0] == (f"{path}:6:38: error: use 's' binds input 'x' to 'w2.r', which is no output of use "
                               "'w2' (outputs of block 'two': p, q)")
    # what does name something: an output, a stage of an instance, a phase's field is the semantic check's
    for bound in ("w2.p", "w2.a"):
        path = write(tmp_path, "m.yaml", top.replace("BOUND", bound).replace("  w: {use: lib.yaml#w",
                                                                               "  w2: {use: lib.yaml#two"))
        assert len(compiled(path).stages) == 5, bound


def test_a_use_that_misses_an_input_or_chains_nothing(tmp_path):
    weights(tmp_path)
    path = write(tmp_path, "m.yaml", LAYERS.replace("inputs: {x: x}, repeat", "repeat"))
    found = errors(path)
    assert found == [f"{path}:22:3: error: use 'layers' binds no stage to input 'x' of block 'layer'; say inputs: {{x: STAGE}}"]
    path = write(tmp_path, "m.yaml", LAYERS.replace("outputs: {x: out}", "outputs: {out: out}").replace(
        "inputs: [layers]", "inputs: [layers.out]").replace("last: layers.x", "last: layers.out"))
    assert "no output of an instance feeds the next" in errors(path)[0]
    # chain: says which output feeds which input
    path = write(tmp_path, "m.yaml", LAYERS.replace("outputs: {x: out}", "outputs: {out: out}").replace(
        'repeat: "${n}"', 'repeat: "${n}", chain: {x: out}').replace(
        "inputs: [layers]", "inputs: [layers.out]").replace("last: layers.x", "last: layers.out"))
    assert compiled(path).stages["layers.1.proj.h"].inputs == ("layers.0.out", "layers.1.proj.w")


def test_a_matrix_sweeps_the_number_of_instances(tmp_path):
    weights(tmp_path, n=3)
    path = write(tmp_path, "m.yaml", LAYERS.replace("params: {n: 3, width: 4}", "params: {n: 3, width: 4}\nmatrix: {n: [1, 3]}"))
    sweep = hetflow.sweep(path, runs_dir=str(tmp_path / "runs"))
    nodes = [sorted(run.record["plan"]["nodes"]) for run in sweep.runs]
    assert [len(n) for n in nodes] == [1 + 4 + 1, 1 + 3 * 4 + 1]
    assert "layers.0.out" in nodes[0] and "layers.1.out" not in nodes[0] and "layers.2.out" in nodes[1]


CACHED = """\
version: 1
name: cached
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
blocks:
  left:
    inputs: [x]
    stages:
      y: {op: relu, inputs: [x]}
    outputs: {y: y}
  right:
    inputs: [x]
    stages:
      y: {op: tanh, inputs: [x]}
      z: {op: clip, inputs: [y], args: {min: -0.5, max: 0.5}}
    outputs: {z: z}
stages:
  x: {op: random.normal, args: {shape: [8, 8], seed: 1}, executor: a}
  l: {use: left, inputs: {x: x}, executor: a}
  r: {use: right, inputs: {x: x}, executor: b}
outputs: {l: l.y, r: r.z}
"""


def test_editing_one_block_reruns_exactly_the_partitions_it_touches(tmp_path):
    def run(text):
        m = compiled(write(tmp_path, "m.yaml", text))
        return execute(m, plan(m, probe), runs_dir=str(tmp_path / "runs"))

    def executed(result):
        parts = {p["id"]: p["nodes"] for p in result.record["plan"]["partitions"]}
        return sorted(n for t in result.record["tasks"] if t["kind"] == "partition" and not t.get("cached")
                      for n in parts[t["id"]])

    first = run(CACHED)
    assert executed(first) == ["l.y", "r.y", "r.z", "x"]
    again = run(CACHED)
    assert executed(again) == [] and len(again.record["cache"]["hits"]) == 2
    edited = run(CACHED.replace("max: 0.5", "max: 0.25"))
    assert executed(edited) == ["r.y", "r.z"]
    assert edited.record["outputs"]["l"]["digest"] == first.record["outputs"]["l"]["digest"]
    assert edited.record["outputs"]["r"]["digest"] != first.record["outputs"]["r"]["digest"]


EDITED = """\
version: 1
name: edited
params: {n: 2}
defaults: {dtype: fp32, retries: 1}
executors:
  host: {vendor: cpu}
blocks:
  layer:
    params: {k: 1}
    inputs: [x]
    stages:
      y:
        op: relu
        inputs: [x]
        retries: "${k}"
    outputs: {x: y}
stages:
  x: {op: zeros, args: {shape: ["${n}", 2]}}
  layers:
    use: layer
    inputs: {x: x}
    repeat: 4
    executor: host
  top: {op: relu, inputs: [layers.x]}
outputs: {top: top}
"""


def test_the_editors_schema_describes_blocks_and_uses(tmp_path):
    editor = pytest.importorskip("tests.test_schema_editor")
    if editor.SERVER is None:
        pytest.skip("yaml-language-server is not installed (npm install -g yaml-language-server, or set HETFLOW_YAML_LS)")
    ls = editor.LanguageServer()
    try:
        folder = tmp_path
        text = editor.with_schema(EDITED)
        uri, found = ls.open(folder / "blocks-edited.yaml", text)
        assert found == []
        decoder = pathlib.Path(__file__).resolve().parent.parent / "examples" / "decoder" / "decoder.yaml"
        assert ls.open(decoder, editor.with_schema(decoder.read_text()))[1] == []
        hover = ls.at("textDocument/hover", uri, text, "repeat: 4")["contents"]["value"]
        assert "Instantiate the block this many times" in hover
        ops = ls.at("textDocument/completion", uri, text, "op: relu", offset=len("op: "))
        assert {"matmul", "relu"} <= {item["label"] for item in ops["items"]}
        bad = editor.with_schema(EDITED.replace("    repeat: 4", "    repeat: 4\n    repaet: 2").replace(
            "        op: relu\n", "        op: relu\n        dtyp: fp16\n"))
        _, found = ls.open(folder / "blocks-bad.yaml", bad)
        lines = sorted(line for line, _ in found)
        assert lines == [15, 25] and all("is not allowed" in message for _, message in found)
    finally:
        ls.close()


def test_what_a_use_names_must_exist(tmp_path):
    write(tmp_path, "lib/blocks.yaml", LIBRARY)
    path = write(tmp_path, "m.yaml", USER.replace("lib/blocks.yaml#mlp", "lib/nowhere.yaml#mlp"))
    assert errors(path) == [f"{path}:7:14: error: block library 'lib/nowhere.yaml' does not exist ({tmp_path / 'lib/nowhere.yaml'})"]
    path = write(tmp_path, "m.yaml", USER.replace("lib/blocks.yaml#mlp", "lib/blocks.yaml#mpl"))
    assert errors(path) == [f"{path}:7:14: error: no block 'mpl' in {tmp_path / 'lib/blocks.yaml'} (blocks: mlp); did you mean 'mlp'?"]
    # a misspelt key of a use is the schema's error, where it is written
    path = write(tmp_path, "m.yaml", USER.replace("seed: 3}", "seed: 3}, repaet: 2"))
    found = errors(path)
    assert found[0].startswith(f"{path}:7:89: error: unknown key 'repaet' in stages.mlp (allowed: use, inputs, params, repeat, chain")
    # an output the use does not have: the stage that names it says so, with the outputs and the nearest stage
    path = write(tmp_path, "m.yaml", USER.replace("inputs: [mlp.x]", "inputs: [mlp.z]"))
    assert errors(path) == [f"{path}:8:26: error: stage 'y' takes input 'mlp.z', which is no output of use 'mlp' "
                            "(outputs of block 'mlp': x); or did you mean stage 'mlp.y'?"]


def test_a_block_stage_is_named_without_dots_and_a_library_holds_blocks(tmp_path):
    lib = write(tmp_path, "lib/blocks.yaml", LIBRARY.replace("      h: {op: matmul", "      a.h: {op: matmul"))
    path = write(tmp_path, "m.yaml", USER)
    found = errors(path)
    assert found == [f"{lib}:7:7: error: invalid stage name 'a.h' in block 'mlp': a letter or '_', then letters, digits, "
                     "'_' or '-' (no '.': an instance's stages are named USE.STAGE)"]
    lib = write(tmp_path, "lib/blocks.yaml", "stages: {}\n" + LIBRARY)
    assert errors(path) == [f"{lib}:1:1: error: unknown key 'stages' in a block library (allowed: version, description, blocks)",
                            f"{path}:7:14: note: in the block library used here"]


def test_a_broken_library_a_library_uses_is_said_with_every_use_that_led_to_it(tmp_path):
    """The note of the manifest's own use was lost: only the library's use of the broken one was said."""
    bad = write(tmp_path, "lib/bad.yaml", "version: 1\nblocks:\n  inc:\n    inputs: [x]\n    stages: {a: {op: add\n")
    outer = write(tmp_path, "lib/outer.yaml", "version: 1\nblocks:\n  w:\n    inputs: [x]\n"
                  "    stages:\n      i: {use: bad.yaml#inc, inputs: {x: x}}\n    outputs: {x: i}\n")
    path = write(tmp_path, "m.yaml", "version: 1\nname: m\nexecutors: {host: {vendor: cpu}}\nstages:\n"
                 "  z: {op: full, args: {shape: [4], value: 1.0}}\n  s: {use: lib/outer.yaml#w, inputs: {x: z}}\n"
                 "outputs: {o: s}\n")
    found = errors(path)
    assert found[0].startswith(f"{bad}:6:1: error: YAML syntax: ") and found[1:] == [
        f"{outer}:6:16: note: in the block library used here", f"{path}:6:3: note: in s (block lib/outer.yaml#w)"]


def test_params_on_the_command_line_reach_a_use_or_one_instance_by_its_id(tmp_path):
    write(tmp_path, "lib/blocks.yaml", LIBRARY)
    path = write(tmp_path, "m.yaml", USER)
    m = compiled(path, **{"mlp.seed": 5})
    assert m.stages["mlp.w"].args["seed"] == 5 and m.stages["mlp.w"].args["shape"] == [4, 4]
    code, out, err = run_cli("plan", path, "-p", "mlp.depth=2")
    assert code == 2 and "-p mlp.depth: no use of a block in" in err and "mlp.width, mlp.seed" in err
    code, out, err = run_cli("plan", path, "-p", "width=8")
    assert code == 0, err

    repeated = write(tmp_path, "r.yaml", """\
        version: 1
        name: r
        executors: {cpu: {vendor: cpu}}
        blocks:
          scale:
            params: {k: 2.0}
            inputs: [x]
            stages:
              y: {op: mul, inputs: [x], args: {value: "${k}"}}
            outputs: {x: y}
        stages:
          a: {op: ones, args: {shape: [3]}}
          s: {use: scale, inputs: {x: a}, repeat: 3}
        outputs: {y: s.x}
        """)
    values = lambda m: [m.stages[f"s.{i}.y"].args["value"] for i in range(3)]  # noqa: E731
    assert values(compiled(repeated)) == [2.0, 2.0, 2.0]
    assert values(compiled(repeated, **{"s.k": 3.0})) == [3.0, 3.0, 3.0]
    # the instance's own form wins over the use's
    assert values(compiled(repeated, **{"s.k": 3.0, "s.1.k": 10.0})) == [3.0, 10.0, 3.0]
    assert compiled(repeated, **{"s.k": 3.0}).digest != compiled(repeated).digest
    done = hetflow.run(repeated, params={"s.k": 3.0, "s.1.k": 10.0}, runs_dir=tmp_path / "runs", cache=False)
    assert np.array_equal(done.outputs["y"], np.full(3, 90.0, np.float32))
    assert done.record["overrides"] == {"s.k": 3.0, "s.1.k": 10.0}


def test_emulator_phases_in_a_block_and_independent_instances(tmp_path):
    fib = pathlib.Path(__file__).resolve().parent.parent / "examples" / "guests" / "fib.elf"
    path = write(tmp_path, "m.yaml", f"""\
        version: 1
        name: phases
        defaults: {{dtype: fp64}}
        executors: {{host: {{vendor: cpu}}}}
        emulators:
          rv: {{isa: rv64imac, backend: reference, program: {fib}, chunk_steps: 4096}}
        blocks:
          prove:
            stages:
              run: {{phase: execute, emulator: rv}}
              wit: {{phase: witness, inputs: [run]}}
              tab: {{op: cast, inputs: [wit]}}
            outputs: {{table: tab}}
        stages:
          p: {{use: prove, repeat: 2, chain: {{}}}}
          s: {{op: sum, inputs: [p.table]}}
        outputs: {{steps: p.1.run.steps, s: s, first: p.0.tab}}
        """)
    m = compiled(path)
    assert set(m.phases) == {"p.0.run", "p.0.wit", "p.1.run", "p.1.wit"}
    assert m.stages["p.1.tab"].inputs == ("p.1.wit",) and m.stages["p.1.tab"].dtype.value == "fp64"
    assert m.phase_outputs == {"steps": ("p.1.run", "steps")}
    result = execute(m, plan(m, probe), runs_dir=str(tmp_path / "runs"))
    assert result.status == "succeeded"
    first = np.load(tmp_path / "runs" / result.record["run_id"] / "first.npy")
    assert first.dtype == np.float64 and first.shape[1] == 16
    assert np.load(tmp_path / "runs" / result.record["run_id"] / "s.npy") == first.sum()


PARAM_DEFAULTS = """\
version: 1
name: sized
params: {hidden: 3}
blocks:
  square:
    params: {dim: 2, side: "${dim}", label: "w${side}"}
    inputs: [x]
    stages:
      w: {op: ones, args: {shape: ["${side}", "${side}"]}, description: "${label}"}
      y: {op: matmul, inputs: [x, w]}
    outputs: {y: y}
executors: {a: {vendor: cpu}}
stages:
  x2: {op: ones, args: {shape: [1, 2]}}
  a: {use: square, inputs: {x: x2}}
  x3: {op: ones, args: {shape: [1, "${hidden}"]}}
  b: {use: square, inputs: {x: x3}, params: {dim: "${hidden}"}}
outputs: {a: a.y, b: b.y}
"""


def test_a_blocks_param_default_may_name_its_other_params_and_a_use_moves_them(tmp_path):
    m = compiled(write(tmp_path, "m.yaml", PARAM_DEFAULTS))
    assert m.stages["a.w"].args["shape"] == [2, 2] and m.resolved["stages"]["a.w"]["description"] == "w2"
    assert m.stages["b.w"].args["shape"] == [3, 3] and m.resolved["stages"]["b.w"]["description"] == "w3"
    done = hetflow.run(write(tmp_path, "m.yaml", PARAM_DEFAULTS), runs_dir=tmp_path / "runs", cache=False)
    assert done.outputs["a"].tolist() == [[2.0, 2.0]] and done.outputs["b"].tolist() == [[3.0, 3.0, 3.0]]


def test_a_blocks_param_default_that_names_the_manifests_param_is_an_error_at_the_default(tmp_path):
    path = write(tmp_path, "m.yaml", PARAM_DEFAULTS.replace('side: "${dim}"', 'side: "${hidden}"'))
    assert errors(path) == [
        f"{path}:6:28: error: param 'side' of block 'square' names ${{hidden}}, which is none of its params (dim, "
        "side, label): a block reads its own params alone; give it the manifest's in each use, "
        "params: {side: \"${hidden}\"}"]
    path = write(tmp_path, "m.yaml", PARAM_DEFAULTS.replace('dim: 2, side: "${dim}"', 'dim: "${side}", side: "${dim}"'))
    assert errors(path) == [f"{path}:6:19: error: param 'dim' refers to itself through ${{...}}: 'dim' -> 'side' -> "
                            "'dim'; a param's value may name other params, none of which names it back"]


LIBRARY_USER = """\
version: 1
name: lib-user
executors: {h: {vendor: cpu}}
stages:
  a: {op: ones, args: {shape: [2]}}
  {first}
  {second}
outputs: {b: b}
"""


@pytest.mark.parametrize("library, said", [
    ("blocks:\n  lay:\n    inputs: [x]\n    stages: {y: {op: relu, inputs: [x]}}\n    outputs: {x: y}\n"
     "stages: {}\n", "lib.yaml:6:1: error: unknown key 'stages' in a block library"),
    (None, "error: block library 'lib.yaml' does not exist"),
    ("blocks: [1\n", "lib.yaml:2:1: error: YAML syntax"),
])
def test_a_library_that_does_not_load_is_said_so_whatever_the_order_of_the_stages(tmp_path, library, said):
    """A stage naming USE.OUTPUT written above the use read the library first and dropped what it said: a library
    with a key no library has was taken, and one that did not exist was "L.x, which is not a stage"."""
    if library is not None:
        write(tmp_path, "lib.yaml", library)
    use, reader = "L: {use: lib.yaml#lay, inputs: {x: a}}", "b: {op: relu, inputs: [L.x]}"
    for first, second in ((use, reader), (reader, use)):
        path = write(tmp_path, "m.yaml", LIBRARY_USER.replace("{first}", first).replace("{second}", second))
        code, out, err = run_cli("validate", path)
        assert code == 2 and said in err and "which is not a stage" not in err, (first, err)


SCALED = """\
version: 1
name: scaled
params: {big: 3}
executors: {h: {vendor: cpu}}
blocks:
  scale:
    params: {k: 1, j: 2}
    inputs: [x]
    stages: {y: {op: mul, inputs: [x], args: {value: "${k}"}}}
    outputs: {y: y}
stages:
  a: {op: ones, args: {shape: [2]}}
  A: {use: scale, inputs: {x: a}}
outputs: {y: A.y}
"""


def test_a_block_param_set_on_the_command_line_to_a_name_the_block_lacks_is_bad_input(tmp_path):
    """-p A.k='${big}' left an undefined value in the tree: an internal error (exit 3) when it was hashed."""
    path = write(tmp_path, "m.yaml", SCALED)
    code, out, err = run_cli("plan", path, "-p", "A.k=${big}")
    assert (code, err) == (2, "hetflow: error: -p A.k=${big}: names ${big}, which is none of the params of block "
                              "'scale' (k, j): a block reads its own params alone\n")
    code, out, err = run_cli("run", path, "-p", "A.k=${j}", "--runs-dir", str(tmp_path / "runs"), "--quiet")
    assert code == 0, err  # one of its own params it may name


def test_a_block_output_named_as_another_of_its_stages_is_refused(tmp_path):
    """USE.m named output m (stage z) where the instance's stage m was meant, and stage m could not be named."""
    path = write(tmp_path, "m.yaml", """\
        version: 1
        name: shadow
        executors: {h: {vendor: cpu}}
        blocks:
          lay:
            inputs: [x]
            stages:
              m: {op: relu, inputs: [x]}
              z: {op: neg, inputs: [m]}
            outputs: {m: z, same: z, z: z}
        stages:
          a: {op: ones, args: {shape: [2]}}
          L: {use: lay, inputs: {x: a}}
        outputs: {o: L.m}
        """)
    assert errors(path) == [f"{path}:10:15: error: output 'm' of block 'lay' names 'z', and the block has a stage 'm': "
                            "USE.m would name either; rename one"]


def test_a_block_no_use_expands_that_uses_itself_is_refused(tmp_path):
    path = write(tmp_path, "m.yaml", """\
        version: 1
        name: unused
        executors: {h: {vendor: cpu}}
        blocks:
          p:
            inputs: [x]
            stages: {y: {use: q, inputs: {x: x}}}
            outputs: {x: y}
          q:
            inputs: [x]
            stages: {z: {use: p, inputs: {x: x}}}
            outputs: {x: z}
        stages:
          a: {op: ones, args: {shape: [2]}}
        outputs: {a: a}
        """)
    assert errors(path) == [f"{path}:11:23: error: block 'p' uses itself: p -> q -> p"]


LOOPING = {"lib/one.yaml": """\
    blocks:
      fine:
        inputs: [x]
        stages: {y: {op: relu, inputs: [x]}}
        outputs: {o: y}
      p:
        inputs: [x]
        stages: {y: {use: two.yaml#q, inputs: {x: x}}}
        outputs: {o: y.o}
    """, "lib/two.yaml": """\
    blocks:
      q:
        inputs: [x]
        stages: {z: {use: one.yaml#p, inputs: {x: x}}}
        outputs: {o: z.o}
    """}


@pytest.mark.parametrize("reached", ["a library used", "a block of the manifest no use expands"])
def test_a_cycle_between_libraries_no_use_expands_is_refused(tmp_path, reached):
    # one.yaml#p uses two.yaml#q, which uses one.yaml#p: a cycle is the manifest's error wherever it is
    for name, text in LOOPING.items():
        write(tmp_path, name, text)
    stages = ("  a: {op: ones, args: {shape: [2]}}\n  f: {use: lib/one.yaml#fine, inputs: {x: a}}\noutputs: {f: f.o}\n"
              if reached == "a library used" else "  a: {op: ones, args: {shape: [2]}}\noutputs: {a: a}\n")
    blocks = ("" if reached == "a library used" else
              "blocks:\n  u:\n    inputs: [x]\n    stages: {y: {use: lib/one.yaml#p, inputs: {x: x}}}\n"
              "    outputs: {o: y.o}\n")
    path = write(tmp_path, "m.yaml", f"version: 1\nname: libs\nexecutors: {{h: {{vendor: cpu}}}}\n{blocks}stages:\n"
                 + stages)
    said = f"{tmp_path / 'lib' / 'two.yaml'}:4:23: error: block 'p' uses itself: p -> q -> p"
    assert errors(path) == [said]
    assert run_cli("validate", path)[0::2] == (2, said + "\n")
    # a block of the manifest that no use expands names a library that is not there: said as a use would say it
    missing = write(tmp_path, "gone.yaml", open(path).read().replace("lib/one.yaml#p", "lib/none.yaml#p"))
    if reached != "a library used":
        assert errors(missing) == [f"{missing}:7:23: error: block library 'lib/none.yaml' does not exist "
                                   f"({tmp_path / 'lib' / 'none.yaml'})"]
    # a library's own block that no use reaches and that names a library not there is its author's to mend
    write(tmp_path, "lib/one.yaml", LOOPING["lib/one.yaml"].replace("two.yaml#q", "gone.yaml#q"))
    if reached == "a library used":
        assert run_cli("validate", path)[0] == 0


def test_block_names_and_a_librarys_version_are_checked_as_the_schema_has_them(tmp_path):
    """The engine took block names the editors' schema flags ('a b', 'блок', 79 characters) and a library of
    version 2 or of a description that is a list."""
    long = "b" * 65
    path = write(tmp_path, "m.yaml", f"""\
        version: 1
        name: names
        executors: {{h: {{vendor: cpu}}}}
        blocks:
          "a b": {{inputs: [x], stages: {{y: {{op: relu, inputs: [x]}}}}, outputs: {{y: y}}}}
          {long}: {{inputs: [x], stages: {{y: {{op: relu, inputs: [x]}}}}, outputs: {{y: y}}}}
        stages:
          a: {{op: ones, args: {{shape: [2]}}}}
          L: {{use: lib.yaml#lay, inputs: {{x: a}}}}
        outputs: {{y: L.y}}
        """)
    write(tmp_path, "lib.yaml", "version: 2\ndescription: [1]\nblocks:\n  lay: {inputs: [x], stages: {y: {op: relu, "
                                "inputs: [x]}}, outputs: {y: y}}\n")
    said = errors(path)
    assert f"{path}:5:3: error: invalid block name 'a b': a letter or '_', then letters, digits, '_' or '-', at most " \
           "64 of them" in said
    assert f"{path}:6:3: error: invalid block name {long!r}: a letter or '_', then letters, digits, '_' or '-', at " \
           "most 64 of them" in said
    assert f"{tmp_path / 'lib.yaml'}:1:10: error: a block library's version must be 1, found 2" in said
    assert f"{tmp_path / 'lib.yaml'}:2:14: error: a block library's description must be text, found [1]" in said


@pytest.mark.parametrize("block, said", [
    ("lay:\n", "block 'lay' must be a mapping with stages and outputs"),  # not also "no block 'lay' ..."
    ("lay: {inputs: [x], stages: {}, outputs: {x: x}}\n", "blocks.lay.stages must have at least 1 key, found 0"),
    ("lay: {inputs: [x], stages: {y.z: {op: relu, inputs: [x]}}, outputs: {x: y.z}}\n", "invalid stage name 'y.z'"),
])
def test_a_block_written_wrong_is_said_once_in_its_own_words(tmp_path, block, said):
    """A placeholder of the check leaked into messages ("invalid name '-' in blocks.lay.stages"), and a null block
    was said twice, the second time as missing."""
    path = write(tmp_path, "m.yaml", "version: 1\nname: w\nexecutors: {h: {vendor: cpu}}\nblocks:\n  " + block
                 + "stages:\n  a: {op: ones, args: {shape: [2]}}\n  L: {use: lay, inputs: {x: a}}\noutputs: {a: a}\n")
    found = errors(path)
    assert any(said in line for line in found), found
    assert not any("invalid name '-'" in line or "no block 'lay'" in line for line in found), found


def test_a_block_stage_wrong_in_every_instance_is_said_once_and_its_cause_is_not_hidden(tmp_path):
    """Each of 60 instances' follow-on error filled the 50 lines a message shows, and the cause further along the
    line (a misspelt key) was among the "... and N more"."""
    path = write(tmp_path, "m.yaml", """\
        version: 1
        name: many
        executors: {h: {vendor: cpu}}
        blocks:
          lay:
            inputs: [x]
            stages:
              m: {op: relu, inputz: [x]}
            outputs: {m: m}
        stages:
          a: {op: ones, args: {shape: [2]}}
          L: {use: lay, inputs: {x: a}, repeat: 60, chain: {x: m}}
        outputs: {m: L.m}
        """)
    code, out, err = run_cli("validate", path)
    lines = err.splitlines()
    assert code == 2 and len(lines) == 4 and "... and" not in err, err
    assert lines[0] == f"{path}:8:7: error: op 'relu' takes 1 input, stage 'L.0.m' gives 0 (and in 59 more instances)"
    assert lines[2].startswith(f"{path}:8:21: error: unknown key 'inputz' in stages.L.0.m (allowed: ")
    assert lines[2].endswith("did you mean 'inputs'? (and in 59 more instances)")


NESTED_REPEAT = """\
version: 1
name: nested
executors: {host: {vendor: cpu}}
blocks:
  step:
    inputs: [x]
    stages:
      b: {op: add, inputs: [x], args: {value: 1.0}}
    outputs: {x: b}
  outer:
    params: {n: 2}
    inputs: [x]
    stages:
      inner: {use: step, inputs: {x: x}, repeat: "${n}"}
    outputs: {y: inner.x}
stages:
  z: {op: zeros, args: {shape: [2]}}
  o: {use: outer, inputs: {x: z}}
  r: {op: relu, inputs: [o.y]}
outputs: {r: r}
"""


def test_a_param_override_that_changes_a_nested_repeat_is_read_by_the_use_of_its_output(tmp_path):
    """-p o.n=4 made o.inner.0..3, while o.y still named the instance the default n=2 made last: a wrong value."""
    path = tmp_path / "nested.yaml"
    path.write_text(NESTED_REPEAT)
    for given, want in (({}, 2.0), ({"o.n": 4}, 4.0)):
        m = compile_manifest(load(path), given)
        assert list(m.stages["r"].inputs) == [f"o.inner.{int(want) - 1}.b"]
        run = hetflow.run(path, params=given, runs_dir=tmp_path / "runs", cache=False)
        assert run.outputs["r"].tolist() == [want, want]
