"""Users' ops (issue 14): @hetflow.op, plugins:, kernels per vendor, code identity in the cache, errors."""

import io
import json
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hetflow.engine import cli
from hetflow.engine.store.cache import Cache, explain, partition_keys
from hetflow.engine.run.distributed import Cluster
from hetflow.engine.errors import ManifestError
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute
from hetflow.executors import Vendor, ops, probe

OPS = '''
from hetflow import op

SCALE_SHIFT = """
@group(0) @binding(0) var<storage, read> X: array<f32>;
@group(0) @binding(1) var<storage, read_write> Y: array<f32>;
@group(0) @binding(2) var<storage, read> P: array<u32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
    let i = gid.x + gid.y * nwg.x * 256u;
    if (i >= P[0]) { return; }
    Y[i] = X[i] * bitcast<f32>(P[1]) + bitcast<f32>(P[2]);
}
"""


@op("t.scale_shift", dtypes=["fp32", "fp16", "bf16"])
def scale_shift(xp, x, *, scale: float = 1.0, shift: float = 0.0):
    """x * scale + shift."""
    return x * scale + shift


scale_shift.kernel("vulkan", wgsl=SCALE_SHIFT)


@op("t.outer", shape=lambda a, b: (a[0], b[0]))
def outer(xp, a, b):
    return xp.outer(a, b)


@op("t.marked")
def marked(xp, x, *, k: int):
    return x + k


@marked.kernel("cpu")
def marked_cpu(xp, x, *, k: int):
    return x + 1000 * k
'''

PIPELINE = """\
version: 1
name: custom
plugins: [ops.py]
executors:
  host: {vendor: cpu}
  other: {vendor: cpu}
  third: {vendor: cpu}
stages:
  x: {op: arange, args: {stop: 6}, executor: third}
  y: {op: t.scale_shift, inputs: [x], args: {scale: 2, shift: 0.5}, executor: host}
  r: {op: relu, inputs: [x], executor: third}
  o: {op: t.outer, inputs: [y, r], executor: other}
outputs: {o: o, r: r}
"""


@pytest.fixture
def project(tmp_path):
    (tmp_path / "ops.py").write_text(OPS)

    def write(text: str = PIPELINE, name: str = "m.yaml") -> str:
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return str(path)

    return write


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def compiled(path):
    return compile_manifest(load(path))


def problems(path) -> list[str]:
    with pytest.raises(ManifestError) as info:
        compiled(path)
    return [str(d).removeprefix(f"{path}:").replace(": error: ", ": ", 1) for d in info.value.diagnostics]


def test_the_decorator_reads_arity_args_and_dtypes_from_the_signature(project):
    compiled(project())
    op = ops.REGISTRY["t.scale_shift"]
    assert op.arity == (1, 1) and op.dtypes == {ops.Dtype.fp32, ops.Dtype.fp16, ops.Dtype.bf16}
    assert {k: (a.kind, a.required, a.default) for k, a in op.args.items()} == {
        "scale": ("number", False, 1.0), "shift": ("number", False, 0.0)}
    assert ops.REGISTRY["t.marked"].args["k"].required
    assert ops.REGISTRY["t.outer"].shape([(3,), (4,)], {}) == (3, 4)
    assert op.source != "built-in" and op.defined_at.endswith("ops.py:18") and op.identity.startswith("sha256:")


def test_arity_args_and_dtype_errors_at_their_positions(project):
    path = project(PIPELINE.replace(
        "  o: {op: t.outer, inputs: [y, r], executor: other}",
        "  o: {op: t.outer, inputs: [y], executor: other}\n"
        "  a: {op: t.scale_shift, inputs: [x], args: {scale: fast, shfit: 1}}\n"
        "  m: {op: t.marked, inputs: [x]}\n"
        "  d: {op: t.scale_shift, inputs: [x], dtype: int8}"))
    assert problems(path) == [
        "12:28: op 't.outer' takes 2 inputs, stage 'o' gives 1",
        "13:53: argument 'scale' of op 't.scale_shift' must be a number, got 'fast'",
        "13:59: op 't.scale_shift' has no argument 'shfit' (accepted: scale, shift)",
        "14:3: op 't.marked' needs argument 'k'",
        "15:46: op 't.scale_shift' does not support dtype int8 (supported: fp32, fp16, bf16)",
    ]


def test_a_manifest_cannot_import_anything_by_naming_it(project, tmp_path):
    path = project(PIPELINE.replace("op: relu", "op: os.system").replace("op: t.outer", "op: builtins.eval"))
    assert problems(path) == ["11:11: unknown op 'os.system' in stage 'r'", "12:11: unknown op 'builtins.eval' in stage 'o'"]
    # an op another manifest's plugin defines is not this manifest's
    compiled(project())
    path = project(PIPELINE.replace("plugins: [ops.py]\n", ""), "other.yaml")
    assert any("unknown op 't.scale_shift'" in p and "does not list in plugins:" in p for p in problems(path))


@pytest.mark.parametrize("body, expected", [
    ("import nothing_here_at_all\n", "3:11: {dir}/broken.py:1: plugin 'broken.py' failed to import: "
                                     "ModuleNotFoundError: No module named 'nothing_here_at_all'"),
    ("from hetflow import op\n\n@op('random.normal')\ndef f(xp, x):\n    return x\n",
     "3:11: {dir}/broken.py:3: op 'random.normal' would shadow the built-in op 'random.normal'; choose another name"),
    # the editors' schema marks such a name as a misspelt built-in op, which validate and run took
    ("from hetflow import op\n\n@op('random.bernoulli')\ndef f(xp, x):\n    return x\n",
     "3:11: {dir}/broken.py:3: op 'random.bernoulli' is in the built-in namespace 'random', which is hetflow's own; "
     "choose another namespace"),
    ("from hetflow import op\n\n@op('t.twice')\ndef f(xp, x):\n    return x\n\n\n@op('t.twice')\ndef g(xp, x):\n    return x\n",
     "3:11: {dir}/broken.py:8: op 't.twice' is defined twice: at {dir}/broken.py:3 and at {dir}/broken.py:8"),
    ("def f(:\n", "3:11: {dir}/broken.py:1: plugin 'broken.py' does not parse: invalid syntax"),
    ("from hetflow import op\n\n@op('t.cols', split='cols')\ndef f(xp, x):\n    return x\n",
     "3:11: {dir}/broken.py:3: op 't.cols': split= is 'rows' or a function of the input shapes, args and output "
     "shape, not 'cols'"),
    # a kernel called as the op is, which takes other inputs: each stage that ran it failed, on that vendor only
    ("from hetflow import op\n\n@op('t.k')\ndef f(xp, x, *, k: int = 1):\n    return x\n\n"
     "@f.kernel('cpu')\ndef g(xp, x, y):\n    return x\n",
     "3:11: {dir}/broken.py:7: op 't.k': its cpu kernel takes 2 inputs and no arguments, the op 1 input and "
     "arguments (k); a kernel has the op's signature"),
    ("from hetflow import op\n\n@op('t.one', dtypes='fp32')\ndef f(xp, x):\n    return x\n",
     "3:11: {dir}/broken.py:3: op 't.one': dtypes= is a list of dtype names (dtypes=['fp32']), not 'fp32'"),
    ("from hetflow import op\n\n@op('t.untyped')\ndef f(xp, x, *, k):\n    return x\n",
     "3:11: {dir}/broken.py:3: op 't.untyped': argument 'k' needs a type annotation (float, int, bool or str, optionally '| None')"),
])
def test_a_broken_plugin_is_exit_2_with_its_file_line_and_the_manifest_position(project, tmp_path, body, expected):
    (tmp_path / "broken.py").write_text(body)
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [broken.py, ops.py]"))
    assert problems(path) == [expected.format(dir=tmp_path)]
    code, _, err = run_cli("validate", path)
    assert code == 2 and "Traceback" not in err


def test_a_plugin_named_without_its_py_beside_the_manifest_says_to_name_it_by_its_path(project, tmp_path):
    """plugins: [ops] is a module to import, which the manifest's folder is not searched for: the error said no
    module 'ops' is installed, with ops.py beside the manifest."""
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops]"))
    said = problems(path)[0]
    assert said.startswith("3:11: plugin 'ops': no module named 'ops' is installed in this Python")
    assert said.endswith("; the file ops.py beside the manifest is a plugin by its path: plugins: [ops.py]")


def test_a_shape_function_that_raises_or_returns_a_non_shape_is_exit_2(project, tmp_path):
    (tmp_path / "shapes.py").write_text(textwrap.dedent("""\
        from hetflow import op

        @op("t.raises", shape=lambda x: (x[5],))
        def raises(xp, x):
            return x

        @op("t.nonshape", shape=lambda x: "big")
        def nonshape(xp, x):
            return x
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, shapes.py]")
                   .replace("op: relu", "op: t.raises").replace("op: t.outer, inputs: [y, r]", "op: t.nonshape, inputs: [y]"))
    with pytest.raises(ManifestError) as info:
        make_plan(compiled(path), probe)
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:11:29: error: stage 'r': op 't.raises': its shape= raised IndexError: tuple index out of range (shapes.py:3)",
        f"{path}:12:31: error: stage 'o': op 't.nonshape': its shape= returned 'big', not a tuple of non-negative integers (shapes.py:7)",
    ]
    assert run_cli("plan", path)[0] == 2


def test_a_cost_function_that_fails_is_a_warning_of_the_plan_and_the_record(project, tmp_path):
    # the planner prices such an op by its default rule: said, naming the op, the error and its line, not silent
    (tmp_path / "costs.py").write_text(textwrap.dedent("""\
        from hetflow import op

        @op("t.costly", cost=lambda x: {"flops": x[7], "bytes": 0})
        def costly(xp, x):
            return x

        @op("t.odd", cost=lambda x: "cheap")
        def odd(xp, x):
            return x
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, costs.py]")
                   .replace("op: relu", "op: t.costly").replace("op: t.outer, inputs: [y, r]", "op: t.odd, inputs: [y]"))
    said = [("cost-failed", f"{path}:11:3", "op 't.costly': its cost= raised IndexError: tuple index out of range "
             "(costs.py:3); its stages are priced by the default rule, so the placement may differ from what cost= "
             "would give"),
            ("cost-failed", f"{path}:12:3", "op 't.odd': its cost= returned 'cheap', not {'flops': N, 'bytes': N} or "
             "(flops, bytes); its stages are priced by the default rule, so the placement may differ from what "
             "cost= would give")]
    code, out, err = run_cli("plan", path, "--runs-dir", str(tmp_path / "runs"))
    assert code == 0, err
    assert [line for line in out.splitlines() if "cost=" in line] == [f"  {at}: warning: {text}" for _, at, text in said]
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"), "--quiet", "--json")
    assert code == 0, err
    record = json.loads(Path(json.loads(out)["record"]).read_text())
    assert [(w["kind"], w["origin"], w["message"]) for w in record["plan"]["warnings"]] == said


def test_runs_on_cpu_with_the_users_numbers(project, tmp_path):
    m = compiled(project())
    result = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "runs"))
    y = np.arange(6, dtype=np.float32) * 2 + 0.5
    got = np.load(os.path.join(result.run_dir, "o.npy"))
    np.testing.assert_array_equal(got, np.outer(y, np.maximum(np.arange(6, dtype=np.float32), 0)))
    record = result.record
    assert [p["spec"] for p in record["plugins"]] == ["ops.py"]
    assert record["plugins"][0]["file"] == str(tmp_path / "ops.py")
    assert record["plugins"][0]["digest"].startswith("sha256:")
    assert record["data"] == {}
    assert set(record["plugins"][0]["ops"]) == {"t.scale_shift", "t.outer", "t.marked"}


def test_a_kernel_override_is_used_where_declared_and_only_there():
    import hetflow.executors.plugins as plugins  # noqa: F401 - registers the decorator's module

    path = Path(__file__).parent / "_never_written.py"
    assert not path.exists()
    source = OPS.encode()
    plugins.load_source(str(path), source)
    x = [np.ones(3, np.float32)]
    assert ops.run(np, "t.marked", x, {"k": 2}, ops.Dtype.fp32, Vendor.cpu).tolist() == [2001.0] * 3
    assert ops.run(np, "t.marked", x, {"k": 2}, ops.Dtype.fp32, Vendor.cuda).tolist() == [3.0] * 3


def test_a_kernels_identity_is_the_same_where_the_project_is_copied(tmp_path):
    """Each kernel was named by its file's absolute path in its op's identity: a project copied or moved elsewhere
    missed every cache entry of its kernel ops, and plan said the code changed."""
    import subprocess
    import sys

    said = []
    for where in ("a", "b/deeper"):
        folder = tmp_path / where
        folder.mkdir(parents=True)
        (folder / "ops.py").write_text(OPS)
        probe_code = ("import sys\nfrom hetflow.executors import ops, plugins\nplugins.load_plugin('ops.py', sys.argv[1])\n"
                      "print(ops.REGISTRY['t.marked'].identity)\n")
        done = subprocess.run([sys.executable, "-c", probe_code, str(folder)], capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        said.append(done.stdout.strip())
    assert said[0] == said[1] and said[0].startswith("sha256:"), said


VULKAN = probe(Vendor.vulkan)


@pytest.mark.skipif(not VULKAN.available, reason=f"vulkan executor unavailable here: {VULKAN.reason}")
def test_the_same_op_on_cpu_and_on_vulkan_gives_the_same_result(project, tmp_path):
    text = PIPELINE.replace("  other: {vendor: cpu}", "  other: {vendor: cpu}\n  gpu: {vendor: vulkan}")
    on_cpu = compiled(project(text))
    on_gpu = compiled(project(text.replace("args: {scale: 2, shift: 0.5}, executor: host",
                                           "args: {scale: 2, shift: 0.5}, executor: gpu"), "g.yaml"))
    placed = make_plan(on_gpu, probe)
    assert placed.nodes["y"].executor == "gpu" and placed.nodes["o"].executor == "other"
    a = execute(on_cpu, make_plan(on_cpu, probe), runs_dir=str(tmp_path / "a"), use_cache=False)
    b = execute(on_gpu, placed, runs_dir=str(tmp_path / "b"), use_cache=False)
    assert a.record["outputs"]["o"]["digest"] == b.record["outputs"]["o"]["digest"]
    # without a Vulkan kernel an op goes elsewhere, with the reason
    unplaced = compiled(project(text.replace("  o: {op: t.outer, inputs: [y, r], executor: other}",
                                             "  o: {op: t.outer, inputs: [y, r], vendor: [vulkan, cpu]}"), "u.yaml"))
    p = make_plan(unplaced, probe)
    assert p.nodes["o"].executor != "gpu"


def test_editing_the_op_reruns_exactly_what_uses_it_and_comments_rerun_nothing(project, tmp_path):
    path = project()
    runs = str(tmp_path / "runs")

    def go():
        m = compiled(path)
        return execute(m, make_plan(m, probe), runs_dir=runs)

    first = go()
    by_nodes = {tuple(k["nodes"]): pid for pid, k in first.record["cache"]["keys"].items()}
    assert len(first.record["cache"]["stored"]) == 3
    Path(path).write_text("# a comment\n" + Path(path).read_text().replace("outputs:", "# another\noutputs:"))
    assert go().record["cache"]["hits"] == sorted(first.record["cache"]["keys"], key=lambda p: int(p[1:]))
    ops_py = tmp_path / "ops.py"
    ops_py.write_text(ops_py.read_text().replace("return x * scale + shift", "return x * scale + shift + 1"))
    m = compiled(path)
    p = make_plan(m, probe)
    reasons = explain(partition_keys(p), Cache(os.path.join(runs, ".cache")), first.record)
    y_part = next(pid for pid, k in partition_keys(p).items() if "y" in k.nodes)
    assert reasons[y_part] == {"status": "will run", "reason": "code changed: op 't.scale_shift' (ops.py)"}
    code, out, _ = run_cli("plan", path, "--runs-dir", runs)
    assert code == 0 and "code changed: op 't.scale_shift' (ops.py)" in out
    third = execute(m, p, runs_dir=runs)
    r_part = by_nodes[("x", "r")]
    assert third.record["cache"]["hits"] == [r_part]
    o = np.load(os.path.join(third.run_dir, "o.npy"))
    assert o[1, 1] == (1 * 2 + 0.5 + 1) * 1


def test_an_op_that_raises_fails_its_stage_with_the_users_traceback(project, tmp_path):
    (tmp_path / "boom.py").write_text(textwrap.dedent("""\
        from hetflow import op


        def check(x):
            raise ValueError("negative input")


        @op("t.boom")
        def boom(xp, x):
            return check(x)
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, boom.py]")
                   .replace("op: relu, inputs: [x], executor: third", "op: t.boom, inputs: [x], executor: third, retries: 1"))
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"))
    assert code == 1
    lines = [line for line in err.strip().splitlines() if not line.startswith("[")]
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), start=1) if text.startswith("  r:"))
    assert lines[0] == (f"hetflow: run failed: {path}:{line}:3: stage 'r' failed: backend error: op 't.boom' raised "
                        "ValueError: negative input (boom.py:5)")
    assert lines[1].startswith("traceback: ") and lines[1].endswith("traceback.txt") and "Traceback" not in err
    record = json.loads(Path(lines[2].removeprefix("record: ")).read_text())
    assert record["error"]["op"] == "t.boom" and record["error"]["node"] == "r"
    assert record["nodes"]["r"]["attempts"] == 2
    trace = record["error"]["traceback"]
    assert f'File "{tmp_path}/boom.py", line 10, in boom' in trace and f'File "{tmp_path}/boom.py", line 5, in check' in trace
    assert "hetflow" not in trace.replace(str(tmp_path), "") and trace.endswith("ValueError: negative input\n")
    assert Path(lines[1].removeprefix("traceback: ")).read_text() == trace


def test_an_op_that_writes_into_its_input_fails_its_stage_and_leaves_the_other_stages_values_whole(project, tmp_path):
    # x was another stage's output, recorded with its digest and read by r too: zeroed in place, x and r were
    # recorded as what arange and relu had made, with all-zero values, and the run succeeded
    (tmp_path / "inplace.py").write_text(textwrap.dedent("""\
        from hetflow import op


        @op("t.zero")
        def zero(xp, x):
            x *= 0
            return x + 1


        @op("t.same")
        def same(xp, x):
            return x
        """))
    text = (PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, inplace.py]")
            .replace("op: relu, inputs: [x], executor: third", "op: relu, inputs: [s], executor: third")
            .replace("  r: {", "  s: {op: t.same, inputs: [x], executor: third}\n  r: {"))
    code, out, err = run_cli("run", project(text), "--runs-dir", str(tmp_path / "runs"))
    assert code == 0, err  # an op that hands its input on unchanged is fine
    zeroing = text.replace("op: t.same, inputs: [x]", "op: t.zero, inputs: [x]")
    code, out, err = run_cli("run", project(zeroing), "--runs-dir", str(tmp_path / "runs"))
    assert code == 1
    assert ("stage 's' failed: backend error: op 't.zero' wrote into one of its inputs (output array is read-only; "
            "inplace.py:6): an op's inputs are other stages' outputs, read-only to it; compute a new array") in err


def test_a_result_that_contradicts_the_declared_shape_or_dtype_is_a_run_time_error(project, tmp_path):
    (tmp_path / "liar.py").write_text(textwrap.dedent("""\
        from hetflow import op

        @op("t.liar", shape=lambda x: (x[0], 2))
        def liar(xp, x):
            return xp.stack([x, x, x], axis=1)

        @op("t.wide")
        def wide(xp, x):
            return x.astype("float64")
        """))
    for op_name, message in [("t.liar", "op 't.liar' returned shape [6, 3], but its shape rule declares [6, 2]"),
                             ("t.wide", "op 't.wide' returned float64 values for a fp32 stage")]:
        path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, liar.py]")
                       .replace("op: relu", f"op: {op_name}").replace("  o: {op: t.outer, inputs: [y, r], executor: other}\n", "")
                       .replace("outputs: {o: o, r: r}", "outputs: {r: r}"), f"{op_name}.yaml")
        code, _, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"))
        assert code == 1 and message in err


def test_plugins_load_on_the_workers_of_a_local_cluster(project, tmp_path):
    m = compiled(project())
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "a"), use_cache=False)
    with Cluster.local(2, 1) as cluster:
        placed = cluster.place(make_plan(m, cluster.probe), m)
        remote = execute(m, placed, runs_dir=str(tmp_path / "b"), cluster=cluster, use_cache=False)
    assert remote.record["outputs"]["o"]["digest"] == local.record["outputs"]["o"]["digest"]
    assert {t["worker"] for t in remote.record["tasks"] if t["kind"] == "partition"} - {None}


def test_an_installed_entry_point_is_discovered_without_importing_until_used(tmp_path, monkeypatch, manifest_file):
    site = tmp_path / "site"
    (site / "labops").mkdir(parents=True)
    (site / "labops" / "__init__.py").write_text("")
    (site / "labops" / "ops.py").write_text(
        "from hetflow import op\n\n\n@op('labx.neg')\ndef neg(xp, x):\n    return -x\n")
    info = site / "labops-1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: labops\nVersion: 1.2\n")
    (info / "entry_points.txt").write_text("[hetflow.ops]\nlabx = labops.ops\n")
    (info / "RECORD").write_text("labops/__init__.py,,\nlabops/ops.py,,\nlabops-1.2.dist-info/METADATA,,\n")
    (info / "top_level.txt").write_text("labops\n")
    monkeypatch.syspath_prepend(str(site))
    from hetflow.executors import plugins

    assert [e.name for e in plugins.entry_points()] == ["labx"] and "labops.ops" not in sys.modules
    path = manifest_file("version: 1\nname: ep\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                         "  x: {op: ones, args: {shape: [2]}}\n  y: {op: labx.neg, inputs: [x]}\noutputs: {y: y}\n")
    m = compiled(path)
    assert [(p.kind, p.distribution, p.version) for p in m.plugins] == [("entry point", "labops", "1.2")]
    result = execute(m, make_plan(m, probe), runs_dir=str(tmp_path / "runs"))
    assert np.load(os.path.join(result.run_dir, "y.npy")).tolist() == [-1.0, -1.0]
    code, out, _ = run_cli("executors", "--ops")
    assert code == 0 and any(line.startswith("labx.neg") and "from labops 1.2" in line for line in out.splitlines())


def test_sys_exit_in_an_op_or_a_plugin_fails_its_stage_or_check_not_the_process(project, tmp_path):
    (tmp_path / "quit.py").write_text(textwrap.dedent("""\
        import sys

        from hetflow import op


        @op("t.quit")
        def quit_(xp, x):
            sys.exit(3)
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, quit.py]")
                   .replace("op: relu, inputs: [x], executor: third", "op: t.quit, inputs: [x], executor: third"))
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"))
    assert code == 1, err
    assert "stage 'r' failed: backend error: op 't.quit' called sys.exit(3), which an op cannot: raise an exception " \
           "to fail its stage (quit.py:8)" in err
    record = json.loads(Path(err.strip().splitlines()[-1].removeprefix("record: ")).read_text())
    assert record["status"] == "failed" and record["error"]["op"] == "t.quit"
    (tmp_path / "leave.py").write_text("import sys\nsys.exit('no GPU here')\n")
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, leave.py]"), "leaving.yaml")
    code, _, err = run_cli("validate", path)
    assert code == 2 and f"{tmp_path}/leave.py:2: plugin 'leave.py' failed to import: SystemExit: no GPU here" in err


def test_a_plugin_that_raises_a_base_exception_of_its_own_as_it_loads_is_bad_input_not_a_traceback(project, tmp_path):
    """validate printed a Python traceback and exited 1: only Exception and SystemExit were taken for the plugin's."""
    (tmp_path / "boom.py").write_text("class Boom(BaseException):\n    pass\n\n\nraise Boom('not on this host')\n")
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, boom.py]"), "boom.yaml")
    for command in ("validate", "plan"):
        code, _, err = run_cli(command, path)
        assert code == 2 and "Traceback" not in err, err
        assert f"{tmp_path}/boom.py:5: plugin 'boom.py' failed to import: Boom: not on this host" in err


@pytest.mark.parametrize("raised", ["Mine('custom')", "GeneratorExit('closed')"])
def test_an_op_that_raises_a_base_exception_of_its_own_fails_its_stage(project, tmp_path, raised):
    """A class beside Exception passed every handler of the run: a raw traceback, no JSON, no stage named."""
    (tmp_path / "base.py").write_text(textwrap.dedent(f"""\
        from hetflow import op


        class Mine(BaseException):
            pass


        @op("t.base")
        def base(xp, x):
            raise {raised}
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, base.py]")
                   .replace("op: relu, inputs: [x], executor: third", "op: t.base, inputs: [x], executor: third"))
    code, out, err = run_cli("run", path, "--runs-dir", str(tmp_path / "runs"), "--json")
    assert code == 1 and "Traceback" not in err, err
    kind = raised.split("(")[0]
    said = json.loads(out)
    assert said["status"] == "failed" and said["error"].startswith(f"stage 'r' failed: backend error: op 't.base' "
                                                                   f"raised {kind}: ")
    record = json.loads(Path(said["record"]).read_text())
    assert record["status"] == "failed" and record["error"]["op"] == "t.base"


def test_what_an_op_or_a_plugin_prints_goes_to_stderr_and_leaves_stdout_the_commands(project, tmp_path):
    import subprocess
    import sys

    (tmp_path / "chatty.py").write_text(textwrap.dedent("""\
        from hetflow import op

        print("loading my ops")


        @op("t.chatty")
        def chatty(xp, x):
            print("computing", x.shape)
            return x
        """))
    path = project(PIPELINE.replace("plugins: [ops.py]", "plugins: [ops.py, chatty.py]")
                   .replace("op: relu, inputs: [x], executor: third", "op: t.chatty, inputs: [x], executor: third"))
    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", path, "--runs-dir", str(tmp_path / "runs"),
                           "--json", "--quiet", "--no-cache"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["status"] == "succeeded"  # stdout is one JSON object, nothing else
    assert "loading my ops" in done.stderr and "computing (6,)" in done.stderr


HELPED = """\
version: 1
name: helped
plugins: [ops1.py, ops2.py]
executors:
  a: {vendor: cpu}
  b: {vendor: cpu}
  c: {vendor: cpu}
stages:
  x: {op: arange, args: {stop: 4}, executor: c}
  one: {op: h.one, inputs: [x], executor: a}
  two: {op: h.two, inputs: [x], executor: b}
  lazy: {op: h.lazy, inputs: [x], executor: b}
outputs: {one: one, two: two, lazy: lazy}
"""


def test_every_module_beside_a_path_plugin_is_its_identity_shared_or_imported_inside_an_op(tmp_path):
    """An edited helper was a stale cache hit for every op but those of the first plugin to import it, for an op
    that imported it inside its body, and in a process that had loaded the plugin (which also kept running the
    helper as first imported)."""
    (tmp_path / "ops1.py").write_text("from hetflow import op\nimport helper\n\n\n@op('h.one')\n"
                                      "def one(xp, x):\n    return x + helper.FACTOR\n")
    (tmp_path / "ops2.py").write_text("from hetflow import op\nimport helper\n\n\n@op('h.two')\n"
                                      "def two(xp, x):\n    return x * helper.FACTOR\n\n\n@op('h.lazy')\n"
                                      "def lazy(xp, x):\n    import lazyhelper\n    return x - lazyhelper.OFFSET\n")
    (tmp_path / "helper.py").write_text("FACTOR = 2.0\n")
    (tmp_path / "lazyhelper.py").write_text("OFFSET = 10.0\n")
    (tmp_path / "m.yaml").write_text(HELPED)
    import hetflow

    runs, manifest = tmp_path / "runs", tmp_path / "m.yaml"
    sys.path.insert(0, str(tmp_path))
    try:
        first = hetflow.run(manifest, runs_dir=runs)
        assert first.outputs["two"].tolist() == [0, 2, 4, 6] and first.outputs["lazy"].tolist() == [-10, -9, -8, -7]
        again = hetflow.run(manifest, runs_dir=runs)
        assert len(json.loads(Path(again.record_path).read_text())["cache"]["hits"]) == 4
        (tmp_path / "helper.py").write_text("FACTOR = 3.0\n")
        (tmp_path / "lazyhelper.py").write_text("OFFSET = 20.0\n")
        edited = hetflow.run(manifest, runs_dir=runs)
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("helper", "lazyhelper"):
            sys.modules.pop(name, None)
    record = json.loads(Path(edited.record_path).read_text())
    assert record["cache"]["hits"] == [pid for pid, k in record["cache"]["keys"].items() if k["nodes"] == ["x"]]
    assert (edited.outputs["one"].tolist(), edited.outputs["two"].tolist(), edited.outputs["lazy"].tolist()) == (
        [3, 4, 5, 6], [0, 3, 6, 9], [-20, -19, -18, -17])
    assert {os.path.basename(f) for p in record["plugins"] for f in p["files"]} >= {"helper.py", "lazyhelper.py"}
    # a new process keys the lazy helper before any op imported it; every op beside it is keyed by it too
    (tmp_path / "lazyhelper.py").write_text("OFFSET = 30.0\n")
    import subprocess

    done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir", str(runs),
                           "--json", "--quiet"], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert done.returncode == 0, done.stderr
    fresh = json.loads(done.stdout)
    assert len(fresh["cache_hits"]) == 1
    assert np.load(os.path.join(runs, fresh["run_id"], "lazy.npy")).tolist() == [-30, -29, -28, -27]


def test_a_module_a_helper_package_imports_from_itself_is_part_of_the_identity(tmp_path):
    """The plugin names extlib.helper, which names extlib.deep: only helper.py was in the identity, and an edit to
    deep.py was a stale cache hit."""
    import subprocess

    ext, project = tmp_path / "ext" / "extlib", tmp_path / "project"
    ext.mkdir(parents=True)
    project.mkdir()
    (ext / "__init__.py").write_text("")
    (ext / "helper.py").write_text("from extlib import deep\n\n\ndef scale(x):\n    return x * deep.K\n")
    (ext / "deep.py").write_text("K = 2.0\n")
    (project / "ops.py").write_text("from extlib import helper\n\nfrom hetflow import op\n\n\n@op('t.ext')\n"
                                    "def ext(xp, x):\n    return helper.scale(x)\n")
    manifest = project / "m.yaml"
    manifest.write_text("version: 1\nname: ext\nplugins: [ops.py]\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  x: {op: ones, args: {shape: [2]}}\n  y: {op: t.ext, inputs: [x]}\noutputs: {y: y}\n")

    def run() -> dict:
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir",
                               str(tmp_path / "runs"), "--json", "--quiet"], capture_output=True, text=True,
                              env={**os.environ, "PYTHONPATH": str(ext.parent)}, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    first = run()
    (ext / "deep.py").write_text("K = 5.0\n")
    again = run()
    assert not again["cache_hits"], again
    assert np.load(tmp_path / "runs" / again["run_id"] / "y.npy").tolist() == [5.0, 5.0]
    assert np.load(tmp_path / "runs" / first["run_id"] / "y.npy").tolist() == [2.0, 2.0]


def test_a_module_plugins_package_is_its_identity_where_its_distribution_lists_none_of_it(tmp_path, manifest_file):
    """A package installed editable (``pip install -e``): its distribution lists a ``.pth`` and metadata, not the
    package's files, and no edit of the package changed the key. An edit after the process imported the
    package leaves it running the old code: its partitions are then not cached."""
    src, site = tmp_path / "src", tmp_path / "site"
    (src / "labed").mkdir(parents=True)
    (src / "labed" / "__init__.py").write_text("")
    (src / "labed" / "consts.py").write_text("FACTOR = 2.0\n")
    (src / "labed" / "ops.py").write_text("from hetflow import op\nfrom labed import consts\n\n\n@op('labed.scale')\n"
                                          "def scale(xp, x):\n    return x * consts.FACTOR\n")
    info = site / "labed-0.1.dist-info"
    info.mkdir(parents=True)
    (site / "__editable__.labed-0.1.pth").write_text(str(src) + "\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: labed\nVersion: 0.1\n")
    (info / "top_level.txt").write_text("labed\n")
    (info / "RECORD").write_text("__editable__.labed-0.1.pth,,\nlabed-0.1.dist-info/METADATA,,\n")
    path = manifest_file("version: 1\nname: ed\nplugins: [labed.ops]\nexecutors: {h: {vendor: cpu}, g: {vendor: cpu}}\n"
                         "stages:\n  x: {op: arange, args: {stop: 3}, executor: g}\n"
                         "  y: {op: labed.scale, inputs: [x], executor: h}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(src)])}
    import subprocess

    def run() -> dict:
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", path, "--runs-dir", str(runs),
                               "--json", "--quiet"], capture_output=True, text=True, env=env)
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        return {"hits": len(found["cache_hits"]), "y": np.load(os.path.join(runs, found["run_id"], "y.npy")).tolist()}

    assert run() == {"hits": 0, "y": [0, 2, 4]}
    assert run() == {"hits": 2, "y": [0, 2, 4]}
    (src / "labed" / "consts.py").write_text("FACTOR = 5.0\n")
    assert run() == {"hits": 1, "y": [0, 5, 10]}
    # in one process: imported, then edited on disk
    from hetflow.executors import plugins

    sys.path[:0] = [str(site), str(src)]
    try:
        loaded = plugins.load_module("labed.ops")
        assert ops.REGISTRY["labed.scale"].identity is not None and loaded.digest
        (src / "labed" / "consts.py").write_text("FACTOR = 7.0\n")
        plugins.load_module("labed.ops")
        assert ops.REGISTRY["labed.scale"].identity is None
        m = compiled(path)
        keys = partition_keys(make_plan(m, probe))
        (y_key,) = [k for k in keys.values() if "y" in k.nodes]
        assert y_key.key is None and "its module changed on disk since this process imported it" in y_key.reason
    finally:
        sys.path[:] = [p for p in sys.path if p not in (str(site), str(src))]
        for name in [n for n in sys.modules if n == "labed" or n.startswith("labed.")]:
            sys.modules.pop(name)
        with ops.REGISTRY_LOCK if hasattr(ops, "REGISTRY_LOCK") else plugins.REGISTRY_LOCK:
            ops.REGISTRY.pop("labed.scale", None)
        plugins._IMPORTED.pop("labed.ops", None)
        plugins._PLUGINS.pop(("module", "labed.ops"), None)


def test_a_helper_in_a_namespace_package_or_a_symlinked_folder_is_part_of_the_identity(tmp_path):
    """A subfolder without an __init__.py (a namespace package on Python 3) and a symlinked package folder were not
    read: an edit to a helper in either was a stale hit."""
    from hetflow.executors import codeid

    (tmp_path / "ops.py").write_text("import nsp.util\n")
    (tmp_path / "nsp").mkdir()
    (tmp_path / "nsp" / "util.py").write_text("K = 1\n")
    store = tmp_path / "elsewhere" / "helppkg"
    store.mkdir(parents=True)
    (store / "__init__.py").write_text("")
    (store / "c.py").write_text("K = 1\n")
    (tmp_path / "helppkg").symlink_to(store, target_is_directory=True)
    (tmp_path / "loop").symlink_to(tmp_path, target_is_directory=True)  # a link back up is read once
    found = {os.path.relpath(p, tmp_path) for p in codeid.python_files(str(tmp_path))}
    assert {"ops.py", os.path.join("nsp", "util.py"), os.path.join("helppkg", "c.py")} <= found, found
    before = codeid.combine(codeid.python_files(str(tmp_path)))
    (tmp_path / "nsp" / "util.py").write_text("K = 100\n")
    assert codeid.combine(codeid.python_files(str(tmp_path))) != before
    # a namespace package's folders nest through folders of no .py file: ns.inner.deep was not read at all
    (tmp_path / "ns" / "inner").mkdir(parents=True)
    (tmp_path / "ns" / "inner" / "deep.py").write_text("K = 1\n")
    assert os.path.join("ns", "inner", "deep.py") in {os.path.relpath(p, tmp_path)
                                                      for p in codeid.python_files(str(tmp_path))}
    before = codeid.combine(codeid.python_files(str(tmp_path)))
    (tmp_path / "ns" / "inner" / "deep.py").write_text("K = 2\n")
    assert codeid.combine(codeid.python_files(str(tmp_path))) != before


LAZY_OPS = """\
import os
import sys

from hetflow import op

HERE = os.path.dirname(os.path.abspath(__file__))


@op('t.lazy')
def lazy(xp, x):
    flag = os.path.join(HERE, 'edit-now')
    if os.path.exists(flag):  # the helper edited while the run runs, before the op's body imports it
        with open(os.path.join(HERE, 'lazyhelper.py'), 'w') as f:
            f.write('F = 1000.0\\n')
        os.remove(flag)
    sys.path.insert(0, HERE)
    import lazyhelper
    return x * lazyhelper.F
"""


def test_a_helper_edited_while_the_run_runs_is_not_stored_under_the_key_of_its_old_code(tmp_path):
    """The op's identity is its code when the plugin loaded; a helper its body imports is read when it runs. One
    edited in between was stored under the old code's key, and served to every later run of the old code."""
    import json
    import subprocess
    import sys

    (tmp_path / "ops.py").write_text(LAZY_OPS)
    (tmp_path / "lazyhelper.py").write_text("F = 2.0\n")
    (tmp_path / "edit-now").write_text("")
    manifest = tmp_path / "m.yaml"
    manifest.write_text("version: 1\nname: lazy\nplugins: [ops.py]\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                        "  x: {op: ones, args: {shape: [2]}}\n  y: {op: t.lazy, inputs: [x]}\noutputs: {y: y}\n")

    def run() -> dict:
        done = subprocess.run([sys.executable, "-m", "hetflow.engine.cli", "run", str(manifest), "--runs-dir",
                               str(tmp_path / "runs"), "--json", "--quiet"], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return json.loads(Path(json.loads(done.stdout)["record"]).read_text())

    first = run()
    assert not first["cache"]["stored"] and "changed on disk while the run ran" in str(first["cache"]["store_failed"])
    (tmp_path / "lazyhelper.py").write_text("F = 2.0\n")  # the code the first run's key named, back
    again = run()
    assert not again["cache"]["hits"]
    import hetflow

    assert hetflow.open_run(again["run_id"], tmp_path / "runs").outputs["y"].tolist() == [2.0, 2.0]


def test_two_projects_helpers_of_one_name_are_each_their_own_in_one_process(tmp_path):
    """A notebook ran project A, then project B: B's `import helper` got A's helper from sys.modules, its outputs
    A's numbers, while its record named B's helper.py as the code that ran."""
    import hetflow

    made = {}
    for name, factor in (("a", 2.0), ("b", 5.0)):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "helper.py").write_text(f"K = {factor}\n")
        (folder / "ops.py").write_text(f"import os\nimport sys\n\nsys.path.insert(0, os.path.dirname(__file__))\n"
                                       f"import helper  # noqa: E402\n\nfrom hetflow import op  # noqa: E402\n\n\n"
                                       f"@op('t.scale_{name}')\ndef scale(xp, x):\n    return x * helper.K\n")
        (folder / "m.yaml").write_text(f"version: 1\nname: {name}\nplugins: [ops.py]\nexecutors: {{h: {{vendor: cpu}}}}\n"
                                       f"stages:\n  x: {{op: ones, args: {{shape: [2]}}}}\n"
                                       f"  y: {{op: t.scale_{name}, inputs: [x]}}\noutputs: {{y: y}}\n")
        made[name] = folder
    try:
        a = hetflow.run(made["a"] / "m.yaml", runs_dir=tmp_path / "runs", cache=False)
        b = hetflow.run(made["b"] / "m.yaml", runs_dir=tmp_path / "runs", cache=False)
        again = hetflow.run(made["a"] / "m.yaml", runs_dir=tmp_path / "runs", cache=False)
    finally:
        sys.path[:] = [p for p in sys.path if p not in (str(made["a"]), str(made["b"]))]
        sys.modules.pop("helper", None)
    assert (a.outputs["y"].tolist(), b.outputs["y"].tolist(), again.outputs["y"].tolist()) == \
        ([2.0, 2.0], [5.0, 5.0], [2.0, 2.0])
