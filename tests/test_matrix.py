"""Matrix sweeps: expansion as GitHub Actions defines it, stable names, the cap, errors at original positions."""

import io
import json
from pathlib import Path

import pytest

import hetflow
from hetflow.engine import cli
from hetflow.engine.manifest import matrix
from hetflow.engine.errors import ManifestError, UsageError
from hetflow.engine.manifest.validate import compile_manifest, load

SWEEP = """
version: 1
name: sweep
params: {n: 2, scale: 1.0, tag: a}
matrix:
  n: [2, 3]
  scale: [1.0, 2.0]
executors: {a: {vendor: cpu}, b: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}, executor: a}
  k: {op: random.uniform, args: {shape: [1], seed: 0, low: "${scale}", high: "${scale}"}, executor: b}
  y: {op: mul, inputs: [x, k]}
  s: {op: sum, inputs: [y]}
outputs: {s: s}
"""


def main(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def test_cartesian_product_in_key_order(manifest_file):
    points = matrix.expand(load(manifest_file(SWEEP)))
    assert [p.name for p in points] == [
        "sweep[n=2,scale=1.0]", "sweep[n=2,scale=2.0]", "sweep[n=3,scale=1.0]", "sweep[n=3,scale=2.0]"]
    assert points[1].values == {"n": 2, "scale": 2.0}


def test_include_and_exclude_follow_github_actions(manifest_file):
    text = SWEEP.replace("  scale: [1.0, 2.0]\n", "  scale: [1.0, 2.0]\n  exclude: [{n: 3, scale: 2.0}]\n"
                         "  include: [{scale: 1.0, tag: b}, {n: 4, scale: 0.5}, {n: 2, scale: 2.0, tag: c}]\n")
    points = matrix.expand(load(manifest_file(text)))
    assert [p.name for p in points] == [
        "sweep[n=2,scale=1.0,tag=b]",   # include 1 adds tag to every point with scale 1.0
        "sweep[n=2,scale=2.0,tag=c]",   # include 3 fits this point without overwriting n or scale
        "sweep[n=3,scale=1.0,tag=b]",
        "sweep[n=4,scale=0.5]",         # include 2 fits no point: a new one
    ]


def test_the_cap_and_raising_it(manifest_file):
    path = manifest_file(SWEEP.replace("n: [2, 3]", "n: [" + ", ".join(map(str, range(1, 151))) + "]"))
    with pytest.raises(UsageError, match="expands to 300 points, more than the cap of 256; raise it with max_points=N"):
        matrix.expand(load(path))
    code, _, err = main("run", path, "--runs-dir", str(Path(path).parent / "runs"))
    line = next(i for i, text in enumerate(Path(path).read_text().splitlines(), 1) if text.startswith("matrix:"))
    assert (code, err) == (2, f"hetflow: error: {path}:{line}:1: the matrix expands to 300 points, more than the cap "
                              "of 256; raise it with --max-points N\n")
    assert len(matrix.expand(load(path), max_points=300)) == 300
    for cap in ("0", "-3"):
        code, _, err = main("run", path, "--max-points", cap, "--runs-dir", str(Path(path).parent / "runs"))
        assert code == 2 and err == "hetflow: error: --max-points must be at least 1\n"


def test_a_matrix_of_a_billion_points_is_refused_at_once_not_built(manifest_file):
    """Three axes of 1,000 values each: validate, plan and run built all 10^9 combinations in memory before the
    cap was looked at (an hour and all the machine's memory); now each says it at once."""
    axis = "[" + ", ".join(map(str, range(1000))) + "]"
    text = SWEEP.replace("n: [2, 3]", f"n: {axis}").replace("scale: [1.0, 2.0]", f"scale: {axis}") \
        .replace("  scale:", f"  tag: {axis}\n  scale:", 1)
    path = manifest_file(text)
    for argv, cap in ((["validate", path], 65536), (["plan", path], 65536), (["run", path], 256)):
        code, _, err = main(*argv, "--runs-dir", str(Path(path).parent / "runs")) if argv[0] != "validate" \
            else main(*argv)
        assert code == 2, err
        assert f"the matrix expands to 1,000,000,000 points, more than the cap of {cap}" in err, err
        assert argv[0] != "run" or err.endswith("; raise it with --max-points N\n"), err
    # with an exclude entry the count is not known without the combinations: the first past the cap says it
    excluded = manifest_file(text.replace("  scale:", "  exclude: [{n: 1}]\n  scale:", 1))
    with pytest.raises(UsageError, match=r"the matrix expands to more than 256 points \(its axes make 1,000,000,000 "
                                         r"combinations\), more than the cap of 256; raise it with max_points=N"):
        matrix.expand(load(excluded))
    small = manifest_file(SWEEP.replace("n: [2, 3]", "n: " + axis).replace("  scale:", "  exclude: [{n: 1}]\n  scale:", 1))
    with pytest.raises(UsageError, match=r"the matrix expands to more than 256 points \(its axes make 2,000 "):
        matrix.expand(load(small))
    assert len(matrix.expand(load(small), max_points=2000)) == 1998


def test_matrix_key_must_be_a_param(manifest_file):
    path = manifest_file(SWEEP.replace("  n: [2, 3]", "  m: [2, 3]"))
    with pytest.raises(ManifestError) as info:
        matrix.expand(load(path))
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:6:3: error: matrix key 'm' is not a declared param (declared: n, scale, tag)"]


def test_error_inside_a_point_points_at_the_original_manifest(manifest_file):
    path = manifest_file(SWEEP.replace("n: [2, 3]", "n: [2, -1]"))
    doc = load(path)
    bad = matrix.select(matrix.expand(doc), "n=-1,scale=1.0")
    compile_manifest(doc, matrix.expand(doc)[0].values)
    with pytest.raises(ManifestError) as info:
        compile_manifest(doc, bad.values)
    assert [str(d) for d in info.value.diagnostics] == [
        f"{path}:10:31: error: argument 'shape' of op 'ones' must be a list of non-negative integers, got [-1]"]


def test_sweep_runs_every_point_and_writes_a_summary(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    code, out, err = main("run", manifest_file(SWEEP), "--runs-dir", runs, "--quiet")
    assert code == 0, err
    sweep_id = out.strip().splitlines()[-1]
    summary = json.loads((Path(runs) / sweep_id / "sweep.json").read_text())
    assert summary["status"] == "succeeded" and summary["params"] == ["n", "scale"]
    assert [p["name"] for p in summary["points"]] == [p.name for p in matrix.expand(load(manifest_file(SWEEP)))]
    sums = {}
    for row in summary["points"]:
        record = json.loads((Path(runs) / row["record"]).read_text())
        assert record["matrix_point"] == {"name": row["name"], "values": row["values"], "sweep": sweep_id}
        assert record["outputs"]["s"]["digest"] == row["outputs"]["s"]
        from hetflow.engine.store.records import load_output
        sums[row["name"]] = float(load_output(str(Path(runs) / row["run_id"]), "s"))
    assert sums == {"sweep[n=2,scale=1.0]": 2.0, "sweep[n=2,scale=2.0]": 4.0,
                    "sweep[n=3,scale=1.0]": 3.0, "sweep[n=3,scale=2.0]": 6.0}
    code, out, _ = main("runs", "--runs-dir", runs)
    assert code == 0 and sweep_id in out and "4 points" in out and "sweep[n=3,scale=2.0]" in out
    code, out, _ = main("runs", "show", sweep_id, "--runs-dir", runs)
    assert code == 0 and out.startswith(f"sweep {sweep_id}: succeeded  manifest sweep")
    assert len([line for line in out.splitlines() if "  succeeded  " in line]) == 4


def test_point_runs_one(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    code, out, err = main("run", manifest_file(SWEEP), "--runs-dir", runs, "--quiet", "--point", "n=3,scale=2.0", "--json")
    assert code == 0, err
    data = json.loads(out)
    record = json.loads(Path(data["record"]).read_text())
    assert record["matrix_point"]["name"] == "sweep[n=3,scale=2.0]"
    code, _, err = main("run", manifest_file(SWEEP), "--runs-dir", runs, "--point", "n=9")
    assert code == 2 and "no matrix point 'n=9'" in err


def test_point_keys_in_any_order_and_partial_points(manifest_file, tmp_path):
    runs = str(tmp_path / "runs")
    path = manifest_file(SWEEP)
    code, out, err = main("run", path, "--runs-dir", runs, "--quiet", "--point", "scale=2.0,n=3", "--json")
    assert code == 0, err
    assert json.loads(Path(json.loads(out)["record"]).read_text())["matrix_point"]["name"] == "sweep[n=3,scale=2.0]"
    doc = load(path)
    points = matrix.expand(doc)
    assert matrix.select(points, "sweep[scale=1.0,n=2]").name == "sweep[n=2,scale=1.0]"
    code, _, err = main("plan", path, "--point", "n=3")
    assert code == 2
    assert "--point n=3 matches 2 points (sweep[n=3,scale=1.0], sweep[n=3,scale=2.0]); give more keys" in err
    code, _, err = main("plan", path, "--point", "width=3")
    assert code == 2 and "'width' is not a matrix key (keys: n, scale)" in err
    one = manifest_file(SWEEP.replace("  scale: [1.0, 2.0]\n", ""), "one.yaml")
    code, out, err = main("plan", one, "--point", "n=3")
    assert code == 0 and out.startswith("matrix point sweep[n=3]\n")


def test_a_point_named_under_another_manifests_name_is_refused(manifest_file, tmp_path):
    # the pairs match a point of this manifest; the name before them is another's, so the point is not this one's
    runs = tmp_path / "runs"
    path = manifest_file(SWEEP)
    said = ("names a point of 'other', not of this manifest 'sweep' (points: sweep[n=2,scale=1.0], "
            "sweep[n=2,scale=2.0], sweep[n=3,scale=1.0], sweep[n=3,scale=2.0])")
    for command in ("plan", "run"):
        code, out, err = main(command, path, "--runs-dir", str(runs), "--point", "other[n=3,scale=2.0]")
        assert (code, out, err) == (2, "", f"hetflow: error: --point other[n=3,scale=2.0] {said}\n")
    with pytest.raises(UsageError) as e:
        hetflow.run(path, point="other[scale=2.0,n=3]", runs_dir=runs)
    assert str(e.value) == f"point='other[scale=2.0,n=3]' {said}"
    assert not runs.exists()
    assert hetflow.plan(path, point="sweep[scale=2.0,n=3]", runs_dir=runs).point == "sweep[n=3,scale=2.0]"


LISTS = """
version: 1
name: lists
params: {shape: [2, 2], v: 1.0}
executors: {a: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: "${shape}"}}
outputs: {x: x}
"""


def test_p_takes_yaml_flow_lists_and_maps_and_its_errors_name_the_argument(manifest_file, tmp_path):
    path = manifest_file(LISTS)
    runs = str(tmp_path / "runs")
    code, out, err = main("run", path, "--runs-dir", runs, "--quiet", "--json", "-p", "shape=[3, 4]", "-p", "v=2")
    assert code == 0, err
    record = json.loads(Path(json.loads(out)["record"]).read_text())
    assert record["params"] == {"shape": [3, 4], "v": 2} and record["outputs"]["x"]["shape"] == [3, 4]
    code, _, err = main("run", path, "--runs-dir", runs, "-p", "shape=[3, 4")
    assert code == 2 and err.startswith("hetflow: error: -p shape=[3, 4: the value is not a valid YAML flow list at column")
    code, _, err = main("run", path, "--runs-dir", runs, "-p", "shape=8")
    assert code == 2
    assert (f"hetflow: error: -p shape=8: param 'shape' is a list, such as -p 'shape=[8, 8]' (its default at "
            f"{path}:4:17 is [2, 2])") in err
    code, _, err = main("run", path, "--runs-dir", runs, "-p", "v={a: 1}")
    assert code == 2 and '-p v={"a": 1}: param \'v\' is a single value, not a list or map (its default at ' in err


PARAM = """
version: 1
name: param
params: {n: 4, lr: 0.5, tag: a}
executors: {a: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: ["${n}"]}}
  k: {op: random.uniform, args: {shape: [1], seed: 0, low: "${lr}", high: "${lr}"}}
outputs: {x: x, k: k}
"""


def test_a_p_value_of_another_kind_that_breaks_a_check_is_the_p_arguments_problem(manifest_file, tmp_path):
    # n=true reaches the shape as [True]: the -p gave it, as a matrix value of that kind is its matrix line's
    path = manifest_file(PARAM)
    runs = tmp_path / "runs"
    said = (f"-p n=true: param 'n' is a boolean here, where its default 4 at {path}:4:13 is an integer; at "
            f"{path}:7:31: argument 'shape' of op 'ones' must be a list of non-negative integers, got [True]")
    for command in ("plan", "run"):
        code, out, err = main(command, path, "--runs-dir", str(runs), "-p", "n=true", "-p", "tag=1")
        assert (code, out, err) == (2, "", f"hetflow: error: {said}\n")
    for call in (hetflow.validate, hetflow.plan, hetflow.run):
        with pytest.raises(UsageError) as e:
            call(path, {"n": True}, **({} if call is hetflow.validate else {"runs_dir": runs}))
        assert str(e.value) == said.replace("-p n=true", "params={'n': True}")  # named as the caller gave it
    assert not runs.exists()
    # the other -p problems are named to a Python caller as it gave them too, never as a -p it did not type
    for params, text in (({"m": 3}, "params={'m': 3}: "), ({"n": [4]}, "params={'n': [4]}: param 'n' is a single ")):
        with pytest.raises(UsageError) as e:
            hetflow.validate(path, params)
        assert str(e.value).startswith(text), e.value
    # a value of another kind that breaks nothing is taken: an integer for a float, a number for a text
    code, out, err = main("plan", path, "--runs-dir", str(runs), "-p", "lr=1", "-p", "tag=1")
    assert code == 0, err


def test_a_sweep_says_why_each_point_failed_and_exits_as_its_runs_would(manifest_file, tmp_path):
    (tmp_path / "picky.py").write_text(
        "from hetflow import op\n\n\n"
        "@op('t.positive')\n"
        "def positive(xp, x):\n"
        "    if float(x.sum()) < 0:\n"
        "        raise ValueError('a negative total')\n"
        "    return x\n")
    path = manifest_file(SWEEP.replace("executors:", "plugins: [picky.py]\nexecutors:")
                         .replace("scale: [1.0, 2.0]", "scale: [1.0, -1.0]")
                         .replace("s: {op: sum, inputs: [y]}", "s: {op: sum, inputs: [y]}\n  c: {op: t.positive, inputs: [s]}")
                         .replace("outputs: {s: s}", "outputs: {c: c}"))
    runs = tmp_path / "runs"
    code, out, err = main("run", path, "--runs-dir", str(runs), "--quiet")
    assert code == 1, err
    said = err.strip().splitlines()
    assert len(said) == 2 and all(line.endswith("raised ValueError: a negative total (picky.py:7)") for line in said), err
    assert [line.split(" failed: ")[0] for line in said] == ["hetflow: point sweep[n=2,scale=-1.0]",
                                                            "hetflow: point sweep[n=3,scale=-1.0]"]
    summary = json.loads((runs / out.strip().splitlines()[-1] / "sweep.json").read_text())
    assert {p["name"]: p.get("exit_code") for p in summary["points"]} == {
        "sweep[n=2,scale=1.0]": None, "sweep[n=2,scale=-1.0]": 1, "sweep[n=3,scale=1.0]": None, "sweep[n=3,scale=-1.0]": 1}
    code, shown, _ = main("runs", "show", summary["sweep_id"], "--runs-dir", str(runs))
    lines = shown.splitlines()
    failed = next(i for i, line in enumerate(lines) if "sweep[n=2,scale=-1.0]  failed" in line)
    assert code == 0 and lines[failed + 1].strip().endswith("raised ValueError: a negative total (picky.py:7)")


@pytest.mark.parametrize("written, said", [
    ("  n: {range: [2, 5]}", ":6:6: error: matrix.n must be a list, found {'range': [2, 5]}"),
    ("  n: []", ":6:6: error: matrix.n must have at least 1 item, found 0"),
    ("  exclude: [{n: 2}]", ":5:1: error: the matrix makes no point: it gives no declared param a list of values, "
                            "and has no include entry"),
    ("  n: [2, 3]\n  exclude: [{n: 2}, {n: 3}]",
     ":5:1: error: the matrix makes no point: exclude drops every one of its 2 combinations"),
])
def test_a_matrix_that_makes_no_point_is_bad_input_everywhere(manifest_file, tmp_path, written, said):
    """With no point nothing was compiled, so nothing checked the matrix: validate said ok, and run and plan
    failed with an internal error (IndexError) and a crash log."""
    text = SWEEP.replace("  n: [2, 3]\n  scale: [1.0, 2.0]", written)
    path = manifest_file(text)
    runs = tmp_path / "runs"
    for argv in (["validate", path], ["plan", path, "--runs-dir", str(runs)], ["run", path, "--runs-dir", str(runs)]):
        code, out, err = main(*argv)
        assert code == 2 and err.startswith(path + said), (argv, err)
        assert "internal error" not in err
    assert not runs.exists()
    with pytest.raises(ManifestError) as caught:
        import hetflow

        hetflow.sweep(path, runs_dir=runs)
    assert str(caught.value).startswith(path + said)


def test_values_that_differ_are_points_of_their_own_and_exclude_matches_the_value_itself(manifest_file):
    """tag: [1, "1", true, 1.0] were three points ("1" shown as 1 and merged into it), and exclude {tag: 1} dropped
    1, true and 1.0: Python's 1 == True == 1.0."""
    text = ("version: 1\nname: t\nparams: {tag: x}\nmatrix:\n  tag: [1, \"1\", true, 1.0, \"a,b\", gelu]\n"
            "executors: {a: {vendor: cpu}}\nstages:\n  x: {op: ones, args: {shape: [1]}}\noutputs: {x: x}\n")
    points = matrix.expand(load(manifest_file(text)))
    assert [p.name for p in points] == ['t[tag=1]', 't[tag="1"]', 't[tag=true]', 't[tag=1.0]', 't[tag="a,b"]',
                                        't[tag=gelu]']
    assert [type(p.values["tag"]) for p in points] == [int, str, bool, float, str, str]
    kept = matrix.expand(load(manifest_file(text.replace("1.0, \"a,b\", gelu]", "1.0, \"a,b\", gelu]\n"
                                                         "  exclude: [{tag: 1}]"))))
    assert [p.values["tag"] for p in kept] == ["1", True, 1.0, "a,b", "gelu"]
    assert matrix.select(points, 'tag="1"').values["tag"] == "1" and matrix.select(points, "t[tag=1]").values["tag"] == 1
