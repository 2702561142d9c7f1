"""The editors' schema: generated from the registries, current in the repo, checked by check-jsonschema."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import subprocess
import sys
import textwrap

import jsonschema
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from hetflow.engine.manifest import validate as manifest
from hetflow.engine.manifest import schemagen
from hetflow.engine.cli import main
from hetflow.executors import ops as oplib

ROOT = pathlib.Path(__file__).resolve().parent.parent
EDITOR_SCHEMA = ROOT / "schemas" / "pipeline.schema.json"
REGENERATE = "hetflow schema -o schemas/pipeline.schema.json"


def check_jsonschema(*files: pathlib.Path, schema: pathlib.Path = EDITOR_SCHEMA) -> dict:
    """Run the real check-jsonschema CLI against the repo's editor schema; its JSON report."""
    done = subprocess.run([sys.executable, "-m", "check_jsonschema", "--schemafile", str(schema),
                           "-o", "json", *map(str, files)], capture_output=True, text=True, timeout=120)
    report = json.loads(done.stdout)
    assert done.returncode == (0 if report["status"] == "ok" else 1), done.stderr
    return report


def flagged(report: dict) -> set[str]:
    return {e["path"] for e in report.get("errors", [])}


def test_the_repo_schema_is_the_generated_one():
    out = io.StringIO()
    assert main(["schema"], out=out, err=io.StringIO()) == 0
    assert EDITOR_SCHEMA.read_text(encoding="utf-8") == out.getvalue(), (
        f"schemas/pipeline.schema.json is stale (the op registry or pipeline.base.json changed): run `{REGENERATE}`")


def test_hetflow_schema_prints_it_and_writes_it(tmp_path):
    out, err = io.StringIO(), io.StringIO()
    assert main(["schema"], out=out, err=err) == 0
    assert out.getvalue() == EDITOR_SCHEMA.read_text(encoding="utf-8")
    target = tmp_path / "pipeline.schema.json"
    assert main(["schema", "-o", str(target)], out=io.StringIO(), err=err) == 0
    assert target.read_text(encoding="utf-8") == out.getvalue()
    assert [p.name for p in tmp_path.iterdir()] == ["pipeline.schema.json"]


def test_hetflow_schema_into_a_missing_folder_is_bad_input(tmp_path):
    err = io.StringIO()
    assert main(["schema", "-o", str(tmp_path / "no" / "schema.json")], out=io.StringIO(), err=err) == 2
    assert err.getvalue() == f"hetflow: error: -o {tmp_path / 'no' / 'schema.json'}: cannot write: No such file or directory\n"
    assert not (tmp_path / "no").exists()


def test_every_manifest_in_the_repo_passes_check_jsonschema(tmp_path):
    """Against the repo's schema; one with ``plugins:`` against ``hetflow schema --plugins`` of its plugins."""
    manifests = sorted(p for folder in ("examples", "pipelines") for p in (ROOT / folder).rglob("*.y*ml"))
    assert {"quickstart.yaml", "zkvm_trace.yaml"} <= {p.name for p in manifests}
    with_plugins = {p: yaml.safe_load(p.read_text())["plugins"] for p in manifests if "plugins" in yaml.safe_load(p.read_text())}
    report = check_jsonschema(*(p for p in manifests if p not in with_plugins))
    assert report["status"] == "ok", report["errors"]
    for i, (path, specs) in enumerate(with_plugins.items()):
        schema = tmp_path / f"schema-{i}.json"
        # a separate process: loading plugins adds their ops to this process's registry
        subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "schema", "--plugins", *specs, "-o", str(schema)],
                       cwd=path.parent, check=True, capture_output=True, timeout=120)
        report = check_jsonschema(path, schema=schema)
        assert report["status"] == "ok", report["errors"]


def test_the_base_schema_refused_the_references_in_zkvm_trace():
    """The two false errors editors showed before references were accepted, and that they are gone."""
    base = jsonschema.Draft202012Validator(manifest.schema())
    tree = manifest.load(ROOT / "pipelines" / "zkvm_trace.yaml").value
    assert sorted(e.json_path for e in base.iter_errors(tree)) == ["$.emulators.guest.backend", "$.emulators.guest.chunk_steps"]
    assert not list(jsonschema.Draft202012Validator(json.loads(EDITOR_SCHEMA.read_text())).iter_errors(tree))


BAD = """\
    version: 1
    name: bad
    executors: {host: {vendor: cpu}}
    stages:
      x: {op: zeros, args: {shape: [4, 4], shap: 1}}
      y: {op: matmull, inputs: [x, x]}
      z: {op: random.normal, args: {shape: [2], seed: 1.5}}
      w: {op: relu, inputs: [x, x], dtype: int3}
      v: {op: reshape, inputs: [x]}
      u: {phase: mem-plans, inputs: [x], args: {rows: 4}}
      t: {op: quantize, inputs: [x, x]}
      s: {phase: witness, inputs: [u], dtype: fp32}
      a.b: {op: zeros, args: {shape: [2]}}
    outputs: {y: y}
"""


def test_check_jsonschema_flags_wrong_op_args_and_unknown_ops(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent(BAD))
    assert flagged(check_jsonschema(bad)) == {
        "$.stages.x.args",          # no argument shap
        "$.stages.y.op",            # no op matmull
        "$.stages.z.args.seed",     # a seed is an integer or null
        "$.stages.w.inputs",        # relu takes one input
        "$.stages.w.dtype",         # no dtype int3
        "$.stages.v",               # reshape requires args.shape
        "$.stages.u.args",          # mem-plans takes rows_per_plan
        "$.stages.t",               # quantize has no fp32 output, the default dtype
        "$.stages.s",               # a phase runs on its emulator: dtype is a key of executor stages
        "$.stages",                 # a.b: a dotted name is an instance's, made by the expansion, never written
    }


def test_a_users_op_the_schema_was_not_made_with_is_taken_and_a_misspelt_built_in_is_not(tmp_path):
    """A manifest's ``plugins:`` provide ops a schema made without them cannot list: the repo's schema (which the
    examples' modelines name) takes any namespaced name outside the built-in namespaces, leaving its arguments
    unchecked; a misspelt built-in, with or without its namespace, is still flagged."""
    plugins = ROOT / "examples" / "custom-op" / "pipeline.yaml"
    assert "plugins" in yaml.safe_load(plugins.read_text())
    assert check_jsonschema(plugins)["status"] == "ok"
    mixed = tmp_path / "mixed.yaml"
    mixed.write_text(textwrap.dedent("""\
        version: 1
        name: mixed
        plugins: [ops.py]
        executors: {host: {vendor: cpu}}
        stages:
          a: {op: random.normal, args: {shape: [4], seed: 1}}
          b: {op: lab.scale_shift, inputs: [a], args: {scale: 2.0}}
          c: {op: my-lab.v2.mix, inputs: [a, b]}
          d: {op: random.normall, args: {shape: [4], seed: 1}}
          e: {op: matmull, inputs: [a, a]}
          f: {op: lab., inputs: [a]}
        outputs: {c: c}
        """))
    assert flagged(check_jsonschema(mixed)) == {"$.stages.d.op", "$.stages.e.op", "$.stages.f.op"}


REFS = """\
    version: 1
    name: refs
    params: {n: 4, dev: 0, seed: 7, eps: 0.001, vendor: cpu, dtype: fp16, backend: fast, keep: true, shape: [4, 4],
             rows: 1024, out: d}
    executors:
      host: {vendor: "${vendor}", device: "${dev}", memory: "${rows}", memory_limit: "${rows}"}
      list: {vendor: [cuda, "${vendor}"]}
    emulators:
      guest: {program: ../examples/guests/sha256.elf, backend: "${backend}", chunk_steps: "${rows}", max_steps: "${rows}"}
    stages:
      a: {op: random.normal, args: {shape: ["${n}", 3], seed: "${seed}", std: "${eps}"}, dtype: "${dtype}", retries: "${dev}"}
      b: {op: reshape, inputs: [a], args: {shape: "${shape}"}, timeout: "${eps}", cache: "${keep}"}
      c: {op: rmsnorm, inputs: [b], args: {eps: "${eps}"}, dtype: "fp${n}"}
      d: {op: sum, inputs: [c], args: {axis: "${dev}", keepdims: "${keep}"}}
      run: {phase: execute, emulator: guest}
      plans: {phase: mem-plans, inputs: [run], args: {rows_per_plan: "${rows}"}}
    outputs: {d: "${out}"}
"""


def test_references_in_typed_fields_are_not_flagged(tmp_path):
    refs = tmp_path / "pipelines" / "refs.yaml"
    refs.parent.mkdir()
    refs.write_text(textwrap.dedent(REFS))
    assert check_jsonschema(refs)["status"] == "ok"


def test_literal_values_keep_their_type_check(tmp_path):
    lit = tmp_path / "lit.yaml"
    lit.write_text(textwrap.dedent(REFS).replace('"${dev}"', '"zero"').replace('"${eps}"', "fast")
                   .replace('"${rows}"', "-1").replace('"${vendor}"', "cpus"))
    assert flagged(check_jsonschema(lit)) >= {
        "$.executors.host.vendor", "$.executors.host.device", "$.executors.host.memory", "$.executors.list.vendor",
        "$.emulators.guest.chunk_steps", "$.stages.a.args.std", "$.stages.a.retries", "$.stages.b.timeout",
        "$.stages.d.args.axis",
    }


def _sections_the_engine_interpolates() -> set[str]:
    """Probe compile_manifest: a section is interpolated when an undefined reference in it is reported."""
    found = set()
    for key in manifest.schema()["properties"]:
        text = "version: 1\nname: probe\nexecutors: {host: {vendor: cpu}}\nstages: {a: {op: zeros, args: {shape: [1]}}}\noutputs: {}\n"
        doc = manifest.loads(_with(text, key), "probe.yaml")
        try:
            manifest.compile_manifest(doc)
        except manifest.ManifestError as e:
            if "undefined param ${zz_probe}" in str(e):
                found.add(key)
    return found


def _with(text: str, key: str) -> str:
    lines = [line for line in text.splitlines() if not line.startswith(f"{key}:")]
    return "\n".join(lines + [f'{key}: "${{zz_probe}}"']) + "\n"


def test_the_sections_that_accept_references_are_those_the_engine_interpolates():
    sections = set(manifest.schema()["properties"])
    assert sections - schemagen.LITERAL_SECTIONS == _sections_the_engine_interpolates()


def test_op_names_and_args_come_from_the_ops_given():
    base = oplib.REGISTRY["relu"]
    mine = dataclasses.replace(base, name="my.op", arity=(1, 1),
                               args={"knob": oplib.Arg("a-kind-added-later", required=True, doc="what it turns")})
    spec = schemagen.editor_schema({"relu": base, "my.op": mine})
    op_field = spec["$defs"]["stage"]["properties"]["op"]
    assert op_field["anyOf"][0]["enum"] == ["my.op", "relu"]
    validator = jsonschema.Draft202012Validator({"$defs": spec["$defs"], "$ref": "#/$defs/stage"})
    assert validator.is_valid({"op": "my.op", "inputs": ["x"], "args": {"knob": {"any": ["value"]}}})
    assert not validator.is_valid({"op": "my.op", "inputs": ["x"], "args": {}})
    assert not validator.is_valid({"op": "matmul", "inputs": ["x", "y"]})
    knob = next(r["then"] for r in spec["$defs"]["stage"]["allOf"]
                if r["if"]["properties"].get("op", {}).get("const") == "my.op")["properties"]["args"]["properties"]["knob"]
    assert knob["description"] == knob["markdownDescription"] == "Argument `knob` of `my.op`: what it turns. Required."


def test_every_arg_kind_of_the_registry_has_a_schema():
    used = {a.kind for op in oplib.REGISTRY.values() for a in op.args.values()}
    assert used <= set(schemagen.KIND_SCHEMAS)


def _integral_floats(value) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    return isinstance(value, list) and any(_integral_floats(v) for v in value)


VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 10) | st.floats(allow_nan=False) | st.sampled_from([1.0, -2.0])
    | st.text(max_size=3) | st.sampled_from(["fp16", "int4", "x.npy", ""]),
    lambda inner: st.lists(inner, max_size=10), max_leaves=12)


@settings(max_examples=400, derandomize=True, deadline=None)
@given(kind=st.sampled_from(sorted(schemagen.KIND_SCHEMAS)), value=VALUES)
def test_each_kind_schema_accepts_what_the_engine_accepts(kind, value):
    """The schema and ops.check_args agree, but on 1.0, which JSON Schema counts as an integer."""
    defs = json.loads(EDITOR_SCHEMA.read_text())["$defs"]
    schema_says = jsonschema.Draft202012Validator({"$defs": defs, **schemagen.KIND_SCHEMAS[kind]}).is_valid(value)
    engine_says = oplib._check_value(kind, value) is None
    assert schema_says == engine_says or (schema_says and _integral_floats(value))


def _walk(node, where=""):
    if isinstance(node, dict):
        yield where, node
        for k, v in node.items():
            yield from _walk(v, f"{where}/{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{where}/{i}")


def test_hover_text_is_on_the_property():
    """Editors show the first description among the schemas a value matched, innermost first."""
    spec = json.loads(EDITOR_SCHEMA.read_text())
    refs = {node["$ref"] for where, node in _walk(spec) if "$ref" in node and not where.endswith("/propertyNames")}
    for name, node in spec["$defs"].items():
        if f"#/$defs/{name}" in refs and node.get("type") != "object":
            assert "description" not in node, f"$defs/{name} is used as a field's value; its text would hide the field's"
    for where, node in _walk(spec):
        for key in ("anyOf", "oneOf"):
            for i, branch in enumerate(node.get(key, [])):
                assert "description" not in branch, f"{where}/{key}/{i}"
        if isinstance(node.get("description"), str):
            assert node["markdownDescription"], where
    vendor = spec["$defs"]["executor"]["properties"]["vendor"]
    assert vendor["description"].startswith("The vendor of this executor")
