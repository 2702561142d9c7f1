"""``hetflow plan -o FILE`` writes the plan there, never over the manifest it plans."""

import io

from hetflow.engine.cli import main


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def _manifest(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: m\nexecutors:\n  h: {vendor: cpu}\n"
                    "stages:\n  x: {op: ones, args: {shape: [2]}}\noutputs: {x: x}\n")
    return path


def test_plan_o_naming_the_manifest_itself_is_refused_and_the_manifest_kept(tmp_path):
    """``hetflow plan m.yaml -o m.yaml`` replaced the manifest with the plan's text."""
    path = _manifest(tmp_path)
    text = path.read_text()
    link = tmp_path / "link.yaml"
    link.symlink_to(path)
    for output, fmt in ((str(path), "text"), (str(link), "json"), (str(tmp_path / "." / "m.yaml"), "dot")):
        code, out, err = _cli("plan", str(path), "--format", fmt, "-o", output)
        assert code == 2 and err.startswith(f"hetflow: error: -o {output} is the manifest being planned"), err
        assert f"(-o m.plan.{'txt' if fmt == 'text' else fmt})" in err and out == ""
        assert path.read_text() == text
    assert _cli("plan", str(path), "-o", str(tmp_path / "m.json"))[0] == 0
