"""A value the schema takes in one of several forms (a size or bytes, a list of devices or 'all', a scalar or a
list of them) is told what is wrong with it in words, at the value itself, by ``validate`` and ``plan`` alike."""

import io

import pytest

from hetflow.engine.cli import main


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def _manifest(tmp_path, executor="{vendor: cpu}", params="{n: 2}"):
    path = tmp_path / "m.yaml"
    path.write_text(f"version: 1\nname: m\nexecutors:\n  h: {executor}\nparams: {params}\n"
                    "stages:\n  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    return path


@pytest.mark.parametrize("executor, said", [
    # inside the list: the item, at its own column, not "must be 'all'"
    ("{vendor: cpu, devices: [-1]}", "4:30: error: executors.h.devices[0] must be at least 0, found -1"),
    ("{vendor: cpu, devices: [[0]]}", "4:30: error: executors.h.devices[0] must be an integer, found [0]"),
    ("{vendor: cpu, devices: {a: 1}}", "4:29: error: executors.h.devices must be a list of integers or 'all', "
                                       "found {'a': 1}"),
    ("{vendor: cpu, memory: 0}", "4:28: error: executors.h.memory must be at least 1, found 0"),
    ("{vendor: cpu, memory: 1.5}", "4:28: error: executors.h.memory must be an integer or a size with its unit "
                                   "('16GiB', '512MB'), found 1.5"),
    ("{vendor: cpu, memory_limit: [1GB, [2]]}", "4:40: error: executors.h.memory_limit[1] must be an integer or "
                                                "a size with its unit ('16GiB', '512MB'), found [2]"),
    ("{vendor: cpu, memory_limit: {a: 1}}", "4:34: error: executors.h.memory_limit must be an integer, a size with "
                                            "its unit ('16GiB', '512MB') or a list, found {'a': 1}"),
])
def test_a_value_of_several_forms_is_told_what_is_wrong_in_words_at_the_value(tmp_path, executor, said):
    path = _manifest(tmp_path, executor=executor)
    for command in (("validate",), ("plan", "--format", "json")):
        code, _, err = _cli(*command, str(path))
        assert code == 2 and f"{path}:{said}" in err, err
        assert "is not valid under any of the given schemas" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("params, said", [
    ("{s: [[1]]}", "5:14: error: params.s[0] must be a string, a number, a boolean or null, found [1]"),
    ("{s: {a: 1}}", "5:13: error: params.s must be a string, a number, a boolean, null or a list, found {'a': 1}"),
])
def test_a_param_that_is_no_scalar_nor_list_of_scalars_says_what_a_param_is(tmp_path, params, said):
    code, _, err = _cli("validate", str(_manifest(tmp_path, params=params)))
    assert code == 2 and said in err, err


def test_a_nested_list_given_with_p_is_refused_by_the_p_not_at_the_default_in_the_file(tmp_path):
    path = _manifest(tmp_path, params="{s: [2, 2]}")
    code, _, err = _cli("plan", str(path), "-p", "s=[[1], 2]")
    assert code == 2 and err.startswith("hetflow: error: -p s=[[1], 2]: a param's list holds single values"), err
    assert f"its default at {path}:5:13 is [2, 2]" in err and "params.s" not in err, err
    assert _cli("plan", str(path), "-p", "s=[1, 2]")[0] == 0


@pytest.mark.parametrize("line, said", [
    ('name: "my pipeline"', "2:7: error: name must start with a letter or digit and hold only letters, digits, '.', "
                            "'_' or '-' (it names the runs' ids and folders), found 'my pipeline'"),
    ('name: m\nplugins: [" ops.py"]', "3:11: error: plugins[0] must not start with a space, found ' ops.py'"),
])
def test_a_value_of_the_wrong_form_is_told_the_form_in_words_not_as_a_regular_expression(tmp_path, line, said):
    path = tmp_path / "m.yaml"
    path.write_text(f"version: 1\n{line}\nexecutors: {{h: {{vendor: cpu}}}}\n"
                    "stages:\n  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and f"{path}:{said}" in err and "does not match" not in err, err


@pytest.mark.parametrize("version, said", [("'1'", "must be 1, found '1'"), ("true", "must be 1, found True"),
                                           ("1.0", "must be an integer, found 1.0")])
def test_a_version_that_is_not_1_is_said_once(tmp_path, version, said):
    path = tmp_path / "m.yaml"
    path.write_text(f"version: {version}\nname: m\nexecutors: {{h: {{vendor: cpu}}}}\n"
                    "stages:\n  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    code, _, err = _cli("validate", str(path))
    assert code == 2 and err == f"{path}:1:10: error: version {said}\n", err
