"""``validate`` knows what ``plan`` knows (issue 29): each case that ``validate`` once passed and ``plan`` or
``run`` refused is now refused by all three with one message, for a single manifest and at every matrix point."""

import io
import json
import os

import pytest

from hetflow.engine import api, cli
from hetflow.executors import probe
from hetflow.executors.base import Vendor

NOT_CHECKED = ("not checked without the machine: which vendor each executor gets there, whether it has the devices "
               "each executor names (device:, devices:) and their memory, and what each partition holds at once where "
               "the machine places its stages (hetflow plan checks them)\n")


def main(*argv, cwd=None):
    out, err = io.StringIO(), io.StringIO()
    here = os.getcwd()
    os.chdir(cwd or here)
    try:
        code = cli.main(list(argv), out=out, err=err)
    finally:
        os.chdir(here)
    return code, out.getvalue(), err.getvalue()


def refused_alike(tmp_path, name, expected):
    """``validate``, ``plan`` and ``run`` of ``name`` (in ``tmp_path``) exit 2 with ``expected`` on stderr, and
    nothing is written."""
    for command in (["validate"], ["plan", "--runs-dir", "runs"], ["run", "--runs-dir", "runs"]):
        code, out, err = main(command[0], name, *command[1:], cwd=tmp_path)
        assert (code, err) == (2, expected), (command, out)
        assert "Traceback" not in err
    assert not (tmp_path / "runs").exists()


def write(tmp_path, text, name="m.yaml"):
    (tmp_path / name).write_text(text)
    return name


SINGLE = """\
version: 1
name: single
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [16, 64]}}
  w: {op: ones, args: {shape: [256, 64]}}
  y: {op: matmul, inputs: [x, w]}
  r: {op: reshape, inputs: [x], args: {shape: [16, 4, 15]}}
outputs: {y: y, r: r}
"""


def test_matmul_inner_dimensions_and_a_bad_reshape(tmp_path):
    name = write(tmp_path, SINGLE)
    refused_alike(tmp_path, name, (
        "m.yaml:7:27: error: stage 'y': matmul: inner dimensions differ: [16, 64] @ [256, 64]\n"
        "m.yaml:8:28: error: stage 'r': reshape: cannot reshape [16, 64] into [16, 4, 15]\n"))


def test_a_valid_manifest_is_ok_and_says_what_it_could_not_check(tmp_path):
    name = write(tmp_path, SINGLE.replace("[256, 64]", "[64, 8]").replace("[16, 4, 15]", "[16, 4, 16]"))
    assert main("validate", name, cwd=tmp_path) == (0, f"{name}: ok\n" + NOT_CHECKED, "")


VULKAN = """\
version: 1
name: vk
executors:
  accel: {vendor: [vulkan, cpu]}
  host: {vendor: cpu}
stages:
  x: {op: ones, args: {shape: [16, 64]}, executor: host}
  m: {op: mod, inputs: [x], args: {value: 3.0}, executor: accel}
  i: {op: cast, inputs: [x], dtype: int64, executor: accel}
outputs: {m: m, i: i}
"""

WHERE_VULKAN = "(on a machine where executor 'accel' gets vulkan, the first of [vulkan, cpu] the machine offers)"


def test_a_pinned_stage_is_checked_against_every_vendor_its_executor_may_get(tmp_path):
    name = write(tmp_path, VULKAN)
    supported = "fp32, fp16, bf16, fp8e4m3, fp8e5m2, int8, int4, int16, int32, uint8, bool"
    code, out, err = main("validate", name, cwd=tmp_path)
    assert (code, out) == (2, "")
    assert err == (
        f"m.yaml:8:3: error: stage 'm' uses op 'mod', which executor 'accel' (vulkan) does not run; pin the stage to "
        f"an executor whose vendor runs the op (a cpu one runs every op) {WHERE_VULKAN}\n"
        f"m.yaml:9:3: error: stage 'i' produces int64, which executor 'accel' (vulkan) does not support "
        f"(supported: {supported}); give the stage a dtype: from those, or pin it to an executor that holds int64 "
        f"{WHERE_VULKAN}\n")
    if probe(Vendor.vulkan).available:  # this machine resolves 'accel' to Vulkan: plan says the same, less the machine
        code, _, plan_err = main("plan", name, "--runs-dir", "runs", cwd=tmp_path)
        assert (code, plan_err) == (2, err.replace(f" {WHERE_VULKAN}", ""))
    # on the CPU alone both stages run: no vendor of the list refuses them
    only_cpu = write(tmp_path, VULKAN.replace("[vulkan, cpu]", "[cpu, vulkan]"), "cpu.yaml")
    code, out, err = main("validate", only_cpu, cwd=tmp_path)
    assert (code, out) == (0, f"{only_cpu}: ok\n" + NOT_CHECKED)
    assert err == ("cpu.yaml:4:19: warning: executor 'accel' lists vulkan after cpu, which every machine has: "
                   "it is never chosen\n")


PLUGIN = '''\
from hetflow import op


@op("t.expand")
def expand(xp, x):
    return x[:, None] * xp.ones(64, dtype=x.dtype)
'''


#: the plugin op feeds an add whose other input is [16, 64]: what the op gives must broadcast with it
PLUGGED = """\
version: 1
name: plug
plugins: [ops.py]
executors: {host: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [16]}}
  p: {op: t.expand, inputs: [x]}
  b: {op: ones, args: {shape: [16, 64]}}
  z: {op: add, inputs: [p, b]}
outputs: {z: z}
"""


def test_a_plugin_op_without_a_shape_rule_is_reported_at_its_own_stage(tmp_path):
    (tmp_path / "ops.py").write_text(PLUGIN)
    name = write(tmp_path, PLUGGED)
    refused_alike(tmp_path, name, (
        "m.yaml:7:11: error: op 't.expand' has no shape rule; the default rule (its first input's shape) gave [16] "
        "for stage 'p', and stage 'z' (m.yaml:9:24) cannot take it: shapes [16] and [16, 64] do not broadcast; "
        "give the op a shape= that says what its function returns\n"))


def test_a_plugin_op_whose_shape_rule_is_wrong_names_the_rule_and_what_it_gave(tmp_path):
    (tmp_path / "ops.py").write_text(PLUGIN.replace('@op("t.expand")', '@op("t.expand", shape=lambda x: (x[0], 32))'))
    name = write(tmp_path, PLUGGED)
    refused_alike(tmp_path, name, (
        "m.yaml:9:24: error: stage 'z': shapes [16, 32] and [16, 64] do not broadcast (input 'p' is [16, 32], from "
        f"the shape rule of op 't.expand' at {tmp_path / 'ops.py'}:4)\n"))


SWEEP = """\
version: 1
name: rf
params: {features: 32, scale: 0.1, ridge: 0.001}
matrix:
  features: [32, 64, 512]
  scale: [0.1, 1.0, 10.0]
  ridge: [1e-3, 1e-2, 1e-1]
executors: {host: {vendor: cpu}}
stages:
  x: {op: random.normal, args: {shape: [16, 64], seed: 0}}
  w: {op: random.normal, args: {shape: [64, "${features}"], seed: 1, std: "${scale}"}}
  h: {op: matmul, inputs: [x, w]}
  v: {op: random.normal, args: {shape: [64, 1], seed: 2}}
  y: {op: matmul, inputs: [h, v]}
  r: {op: mul, inputs: [y], args: {value: "${ridge}"}}
outputs: {r: r}
"""

AT_32 = ("m.yaml:14:27: error: stage 'y': matmul: inner dimensions differ: [16, 32] @ [64, 1] [9 of 27 points: "
         "rf[features=32,scale=0.1,ridge=0.001], rf[features=32,scale=0.1,ridge=0.01], "
         "rf[features=32,scale=0.1,ridge=0.1] and 6 more, where features=32: matrix at m.yaml:5:14]\n")
AT_512 = ("m.yaml:14:27: error: stage 'y': matmul: inner dimensions differ: [16, 512] @ [64, 1] [9 of 27 points: "
          "rf[features=512,scale=0.1,ridge=0.001], rf[features=512,scale=0.1,ridge=0.01], "
          "rf[features=512,scale=0.1,ridge=0.1] and 6 more, where features=512: matrix at m.yaml:5:22]\n")


def test_every_point_is_checked_and_each_problem_names_its_points_and_matrix_line(tmp_path):
    name = write(tmp_path, SWEEP)
    assert main("validate", name, cwd=tmp_path) == (2, "", AT_32 + AT_512)


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_a_27_point_sweep_with_a_shape_error_never_starts(tmp_path, parallel):
    name = write(tmp_path, SWEEP)
    code, out, err = main("run", name, "--runs-dir", "runs", "--parallel", parallel, cwd=tmp_path)
    assert (code, out, err) == (2, "", AT_32 + AT_512)
    assert not (tmp_path / "runs").exists()


def test_plan_and_run_of_one_point_name_the_point(tmp_path):
    name = write(tmp_path, SWEEP)
    point = "features=512,scale=1.0,ridge=1e-2"
    expected = ("m.yaml:14:27: error: stage 'y': matmul: inner dimensions differ: [16, 512] @ [64, 1] "
                "[point rf[features=512,scale=1.0,ridge=0.01]; matrix at m.yaml:4:1]\n")
    for command in ("plan", "run"):
        assert main(command, name, "--point", point, "--runs-dir", "runs", cwd=tmp_path) == (2, "", expected)
    assert not (tmp_path / "runs").exists()
    # the point that fits plans, 1e-2 read as the number it is
    code, out, err = main("plan", name, "--point", "features=64,scale=1.0,ridge=1e-2", "--runs-dir", "runs", cwd=tmp_path)
    assert (code, err) == (0, "") and "rf[features=64,scale=1.0,ridge=0.01]" in out


def test_numbers_in_exponent_form_are_numbers_at_every_point(tmp_path):
    name = write(tmp_path, SWEEP.replace("[32, 64, 512]", "[64]"))
    assert main("validate", name, cwd=tmp_path) == (0, f"{name}: ok\n" + NOT_CHECKED, "")
    assert api.validate(tmp_path / name) == []


def test_matrix_key_and_exclude_typos_are_errors_at_their_lines(tmp_path):
    name = write(tmp_path, SWEEP.replace("  ridge: [1e-3", "  rigde: [1e-3").replace(
        "executors:", "  exclude: [{sclae: 1.0}]\nexecutors:"))
    expected = ("m.yaml:7:3: error: matrix key 'rigde' is not a declared param (declared: features, scale, ridge)\n"
                "m.yaml:8:14: error: matrix exclude key 'sclae' is not a declared param (declared: features, scale, "
                "ridge)\n")
    for command in (["validate"], ["plan", "--runs-dir", "runs"], ["run", "--runs-dir", "runs"]):
        assert main(command[0], name, *command[1:], cwd=tmp_path) == (2, "", expected), command
    assert not (tmp_path / "runs").exists()


def test_a_matrix_value_of_the_wrong_kind_is_an_error_at_its_matrix_line(tmp_path):
    name = write(tmp_path, SWEEP.replace("[32, 64, 512]", '[64, "128", 128.0]').replace("[64, 1]", '["${features}", 1]'))
    # the string "128" is shown quoted in its points' names: bare, it would read as the number
    points = '[3 of 27 points: rf[features="128",scale=0.1,ridge=0.001], rf[features="128",scale=0.1,ridge=0.01], ' \
             'rf[features="128",scale=0.1,ridge=0.1] and 6 more]'
    floats = points.replace('features="128",', "features=128.0,")
    expected = (
        "m.yaml:5:18: error: matrix value \"128\" of param 'features' is a string, where its default 32 is an integer; "
        "at m.yaml:11:40: argument 'shape' of op 'random.normal' must be a list of non-negative integers, got "
        "[64, '128']; at m.yaml:13:40: argument 'shape' of op 'random.normal' must be a list of non-negative integers, "
        f"got ['128', 1] {points.replace('3 of', '9 of')}\n"
        "m.yaml:5:25: error: matrix value 128.0 of param 'features' is a float, where its default 32 is an integer; "
        "at m.yaml:11:40: argument 'shape' of op 'random.normal' must be a list of non-negative integers, got "
        "[64, 128.0]; at m.yaml:13:40: argument 'shape' of op 'random.normal' must be a list of non-negative integers, "
        f"got [128.0, 1] {floats.replace('3 of', '9 of')}\n")
    for command in (["validate"], ["run", "--runs-dir", "runs"]):
        assert main(command[0], name, *command[1:], cwd=tmp_path) == (2, "", expected), command
    assert not (tmp_path / "runs").exists()


MEMORY = """\
version: 1
name: memory
params: {n: 131072}
executors:
  small: {vendor: cpu, memory: 1MiB}
  roomy: {vendor: cpu, memory: 4MiB}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
  y: {op: relu, inputs: [x], executor: small}
  z: {op: add, inputs: [x, y]}
outputs: {z: z}
"""


def test_a_stage_past_the_memory_its_executor_declares_is_refused_alike(tmp_path):
    # y (512 KiB) and its input x (512 KiB) fit small's 1 MiB; at twice the size they cannot, wherever x goes
    name = write(tmp_path, MEMORY.replace("n: 131072", "n: 262144"))
    refused_alike(tmp_path, name, (
        "m.yaml:9:3: error: stage 'y' needs at least 2.0 MiB of live activations while it runs (its output 1.0 MiB "
        "and its inputs 'x' 1.0 MiB), more than the 1.0 MiB executor 'small' declares at m.yaml:5:32; raise that "
        "memory: or make the stage's tensors smaller\n"))


def test_a_stage_free_to_go_anywhere_is_refused_only_past_every_executors_memory(tmp_path):
    # z reads x and y: 3 x 1.5 MiB fits no executor; x alone (1.5 MiB) fits roomy, and y, pinned to small, does not
    name = write(tmp_path, MEMORY.replace("n: 131072", "n: 393216"))
    refused_alike(tmp_path, name, (
        "m.yaml:9:3: error: stage 'y' needs at least 3.0 MiB of live activations while it runs (its output 1.5 MiB "
        "and its inputs 'x' 1.5 MiB), more than the 1.0 MiB executor 'small' declares at m.yaml:5:32; raise that "
        "memory: or make the stage's tensors smaller\n"
        "m.yaml:10:3: error: stage 'z' needs at least 4.5 MiB of live activations while it runs (its output 1.5 MiB "
        "and its inputs 'x' 1.5 MiB, 'y' 1.5 MiB), more than any executor declares (the most, 4.0 MiB, by executor "
        "'roomy' at m.yaml:6:32); raise that memory: or make the stage's tensors smaller\n"))
    # an executor without a declared memory may hold it: its device's memory, which only the machine says
    free = write(tmp_path, MEMORY.replace("n: 131072", "n: 393216").replace(", executor: small", "").replace(
        "  roomy: {vendor: cpu, memory: 4MiB}", "  roomy: {vendor: cpu}"), "free.yaml")
    assert main("validate", free, cwd=tmp_path) == (0, f"{free}: ok\n" + NOT_CHECKED, "")


CHAIN = """\
version: 1
name: chain
params: {n: 131072}
executors: {small: {vendor: cpu, memory: 1MiB}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
  y: {op: relu, inputs: [x]}
  w: {op: relu, inputs: [y]}
outputs: {w: w}
"""


def test_a_partition_over_its_only_executors_memory_is_refused_by_validate_as_by_plan(tmp_path):
    # each stage fits small's 1 MiB; the partition that holds x, y and z at once (1.5 MiB) does not, and with
    # one executor that partition is known without the machine
    name = write(tmp_path, CHAIN)
    refused_alike(tmp_path, name, (
        "m.yaml:6:3: error: partition p0 on executor 'small' holds 1.5 MiB of live activations at its peak (0 inputs "
        "and 3 stage outputs, the largest 'x' at 512.0 KiB), more than the executor's 1.0 MiB (declared at "
        "m.yaml:4:42); pin some of these stages to another executor, or raise the executor's memory:\n"))
    # at the matrix points where it is over, named as validate names every point's problem
    points = write(tmp_path, CHAIN.replace("params: {n: 131072}", "params: {n: 1024}\nmatrix: {n: [1024, 131072]}"),
                   "points.yaml")
    code, out, err = main("validate", points, cwd=tmp_path)
    assert code == 2 and "error: partition p0 on executor 'small' holds 1.5 MiB" in err and "n=131072" in err, err
    code, out, err = main("plan", points, "--runs-dir", "runs", "--point", "n=131072", cwd=tmp_path)
    assert code == 2 and "error: partition p0 on executor 'small' holds 1.5 MiB" in err, err
    # pinned stages are placed without the machine too, on any number of executors
    pinned = write(tmp_path, CHAIN.replace("executors: {small: {vendor: cpu, memory: 1MiB}}",
                                           "executors: {other: {vendor: cpu}, small: {vendor: cpu, memory: 1MiB}}")
                   .replace("]}}\n", "]}, executor: small}\n").replace("[x]}", "[x], executor: small}")
                   .replace("[y]}", "[y], executor: small}"), "pinned.yaml")
    code, out, err = main("validate", pinned, cwd=tmp_path)
    assert code == 2 and "error: partition p0 on executor 'small' holds 1.5 MiB" in err, err
    # and so is a stage colocated with a pinned one: it runs where that one does
    colocated = write(tmp_path, open(tmp_path / pinned).read().replace("[x], executor: small}", "[x], colocate_with: w}"),
                      "colocated.yaml")
    for command in (["validate"], ["plan", "--runs-dir", "runs"]):
        code, out, err = main(command[0], colocated, *command[1:], cwd=tmp_path)
        assert code == 2 and "error: partition p0 on executor 'small' holds 1.5 MiB" in err, (command, err)


def test_a_device_the_machine_may_lack_is_left_to_the_plan_and_validate_says_so(tmp_path):
    # device 7 exists on some machines: validate cannot refuse it, and its last line says it did not check it
    name = write(tmp_path, SINGLE.replace("{host: {vendor: cpu}}", "{host: {vendor: cpu, device: 7}}").replace(
        "  y: {op: matmul, inputs: [x, w]}\n  r: {op: reshape, inputs: [x], args: {shape: [16, 4, 15]}}\n", "").replace(
        "outputs: {y: y, r: r}", "outputs: {x: x}"))
    assert main("validate", name, cwd=tmp_path) == (0, f"{name}: ok\n" + NOT_CHECKED, "")
    assert "whether it has the devices each executor names (device:, devices:)" in NOT_CHECKED
    code, out, err = main("plan", name, "--runs-dir", "runs", cwd=tmp_path)
    assert code == 2 and "executor 'host' (cpu): " in err and "device 7" in err, err


def test_a_partition_the_cost_model_makes_is_left_to_the_plan(tmp_path):
    # y and w may go to either executor: which partition holds what is the machine's placement
    name = write(tmp_path, CHAIN.replace("executors: {small: {vendor: cpu, memory: 1MiB}}",
                                         "executors: {small: {vendor: cpu, memory: 1MiB}, other: {vendor: cpu}}"))
    assert main("validate", name, cwd=tmp_path) == (0, f"{name}: ok\n" + NOT_CHECKED, "")


@pytest.mark.parametrize("executors, stage, said", [
    # the only executor, not pinned: another executor is what helps
    ("{accel: {vendor: vulkan}}", "{op: concat, inputs: [x, x], args: {axis: 0}}",
     "stage 'y' uses op 'concat', which executor 'accel' (vulkan) does not run; declare an executor whose vendor "
     "runs the op (a cpu one runs every op)"),
    ("{accel: {vendor: vulkan}, host: {vendor: cpu}}",
     "{op: add, inputs: [x], args: {value: 5000000000}, dtype: int32, executor: accel}",
     "stage 'y' cannot run on executor 'accel' (vulkan): op 'add' computes int32 with the value 5000000000 in "
     "float64 or int64; pin it to another executor (a cpu one computes it as written)"),
    ("{a: {vendor: vulkan}, b: {vendor: vulkan}}", "{op: add, inputs: [x], args: {value: 5000000000}, dtype: int32}",
     "(declare a cpu executor, which computes it as written)"),
    ("{accel: {vendor: vulkan}}", "{op: argmax, inputs: [x], args: {axis: 0}}",
     "stage 'y' produces int64, which executor 'accel' (vulkan) does not support (supported: fp32, fp16, bf16, "
     "fp8e4m3, fp8e5m2, int8, int4, int16, int32, uint8, bool); give the stage a dtype: from those, or declare an "
     "executor that holds int64 (a cpu one holds every dtype)"),
])
def test_a_stage_no_executor_runs_is_told_what_to_do_about_it(tmp_path, executors, stage, said):
    name = write(tmp_path, f"version: 1\nname: r\nexecutors: {executors}\nstages:\n"
                           f"  x: {{op: ones, args: {{shape: [4]}}, dtype: int32}}\n  y: {stage}\noutputs: {{y: y}}\n")
    code, _, err = main("validate", name, cwd=tmp_path)
    assert code == 2 and said in err, err
    if probe(Vendor.vulkan).available:  # plan says the same here
        code, _, plan_err = main("plan", name, "--runs-dir", "runs", cwd=tmp_path)
        assert (code, plan_err) == (2, err)


WITNESS_ON_VULKAN = """\
version: 1
name: w
executors:
  host: {{vendor: cpu}}
  vk: {{vendor: vulkan}}
emulators:
  g: {{isa: rv64imac, backend: fast, program: {elf}, chunk_steps: 1024, max_steps: 100000}}
stages:
  run: {{phase: execute, emulator: g}}
  tr: {{phase: witness, inputs: [run]}}
  c: {{op: cast, inputs: [tr], dtype: int32{pin}}}
  r: {{op: cast, inputs: [run.registers], dtype: int32{pin}}}
outputs: {{c: c, r: r}}
"""


def test_an_emulator_phases_int64_array_is_not_bridged_to_an_executor_without_int64(tmp_path):
    """validate and plan passed a cast pinned to Vulkan of a witness table or the registers (int64), and the run
    failed at the bridge: 'import of 'run.registers': executor does not support dtype int64'."""
    elf = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "guests", "fib.elf")
    supported = "fp32, fp16, bf16, fp8e4m3, fp8e5m2, int8, int4, int16, int32, uint8, bool"
    name = write(tmp_path, WITNESS_ON_VULKAN.format(elf=elf, pin=", executor: vk"))
    expected = "".join(
        f"m.yaml:{line}:25: error: stage {sid!r} takes {ref!r} at int64, which executor 'vk' (vulkan) cannot import "
        f"(supported: {supported}); cast it to a supported dtype first, or run the stage elsewhere\n"
        for line, sid, ref in ((11, "c", "tr"), (12, "r", "run.registers")))
    if probe(Vendor.vulkan).available:
        refused_alike(tmp_path, name, expected)
    else:
        assert main("validate", name, cwd=tmp_path)[:2] == (2, "")
    # not pinned, they run where int64 arrives: on the host
    free = write(tmp_path, WITNESS_ON_VULKAN.format(elf=elf, pin=""), "free.yaml")
    code, out, _ = main("plan", free, "--runs-dir", "runs", "--format", "json", cwd=tmp_path)
    assert code == 0 and {n: d["executor"] for n, d in json.loads(out)["nodes"].items()} == {"c": "host", "r": "host"}
