"""The code identity of a user's op, which every cache key of a partition running it holds, tells apart two plugins
of one folder that define one op name: each is its own code, with its own cache entries."""

import pytest

import hetflow

MANIFEST = '''version: 1
name: same-folder
plugins: [{plugin}]
executors: {{host: {{vendor: cpu}}}}
stages:
  x: {{op: random.normal, args: {{shape: [3], seed: 1}}}}
  y: {{op: lab.f, inputs: [x]}}
outputs: {{x: x, y: y}}
'''


def test_two_plugins_of_one_folder_defining_one_op_name_do_not_share_cache_entries(tmp_path, registry):
    for plugin, factor in (("a.py", 2), ("b.py", 3)):
        (tmp_path / plugin).write_text(f"from hetflow import op\n\n\n@op('lab.f')\ndef f(xp, x):\n    return x * {factor}\n")
        (tmp_path / f"m_{plugin[0]}.yaml").write_text(MANIFEST.format(plugin=plugin))
    runs = tmp_path / "runs"
    first = hetflow.run(tmp_path / "m_a.yaml", runs_dir=runs)
    assert first.record["cache"]["stored"] == ["p0"]
    second = hetflow.run(tmp_path / "m_b.yaml", runs_dir=runs)
    # b.py's op ran, not a.py's result taken from the cache under a key that named the same code
    assert second.record["cache"]["hits"] == []
    assert (second.outputs["y"] == second.outputs["x"] * 3).all()
    assert first.record["cache"]["keys"]["p0"]["code"] != second.record["cache"]["keys"]["p0"]["code"]


def test_an_installed_module_whose_op_another_module_took_over_gets_it_back_for_its_own_manifest(
        tmp_path, registry, monkeypatch):
    import sys

    monkeypatch.syspath_prepend(str(tmp_path))
    for letter, factor in (("a", 2), ("b", 3)):
        module = f"takeback_{letter}"
        monkeypatch.delitem(sys.modules, module, raising=False)
        (tmp_path / f"{module}.py").write_text(f"from hetflow import op\n\n\n@op('lab.f')\ndef f(xp, x):\n"
                                               f"    return x * {factor}\n")
        (tmp_path / f"m_{letter}.yaml").write_text(MANIFEST.format(plugin=module))
    runs = tmp_path / "runs"
    try:
        for letter, factor in (("a", 2), ("b", 3), ("a", 2)):
            # the third: takeback_a, imported by the first, defines no op when imported again
            r = hetflow.run(tmp_path / f"m_{letter}.yaml", runs_dir=runs, cache=False)
            assert r.status == "succeeded"
            assert (r.outputs["y"] == r.outputs["x"] * factor).all(), letter
    finally:
        for letter in "ab":
            sys.modules.pop(f"takeback_{letter}", None)


def test_a_path_plugin_imports_a_module_beside_it_where_the_search_path_holds_neither_folder(tmp_path, registry):
    """The CLI's search path holds neither the manifest's folder nor the working one: `import helper` at the top
    of a plugin failed with "No module named 'helper'" though helper.py was beside it."""
    import sys

    (tmp_path / "sidehelper.py").write_text("FACTOR = 5\n")
    (tmp_path / "ops.py").write_text("import sidehelper\nfrom hetflow import op\n\n\n@op('lab.f')\ndef f(xp, x):\n"
                                     "    return x * sidehelper.FACTOR\n")
    (tmp_path / "m.yaml").write_text(MANIFEST.format(plugin="ops.py"))
    assert str(tmp_path) not in sys.path
    try:
        r = hetflow.run(tmp_path / "m.yaml", runs_dir=tmp_path / "runs")
        assert r.status == "succeeded"
        assert (r.outputs["y"] == r.outputs["x"] * 5).all()
        # only while it loaded: no other plugin's import finds this folder's modules afterwards
        assert str(tmp_path) not in sys.path
        assert any(p.get("files") and any(f.endswith("sidehelper.py") for f in p["files"]) for p in r.record["plugins"])
    finally:
        sys.modules.pop("sidehelper", None)


def test_a_plugin_load_stopped_by_ctrl_c_leaves_the_ops_of_the_load_before(tmp_path, registry):
    """The ops it had defined when the Ctrl-C came stayed registered, without their identity; the file put back as
    it was then loaded "as known", and its manifest ran the interrupted version's code."""
    plugin, manifest = tmp_path / "ops.py", tmp_path / "m.yaml"
    first = "from hetflow import op\n\n\n@op('lab.f')\ndef f(xp, x):\n    return x * 2\n"
    plugin.write_text(first)
    manifest.write_text(MANIFEST.format(plugin="ops.py"))
    hetflow.validate(manifest)
    plugin.write_text("from hetflow import op\n\n\n@op('lab.f')\ndef f(xp, x):\n    return x * 3\n\n\n"
                      "raise KeyboardInterrupt\n")
    with pytest.raises(KeyboardInterrupt):
        hetflow.validate(manifest)
    plugin.write_text(first)
    r = hetflow.run(manifest, runs_dir=tmp_path / "runs")
    assert (r.outputs["y"] == r.outputs["x"] * 2).all()
    assert r.record["cache"]["stored"] == ["p0"]
