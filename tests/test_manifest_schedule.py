"""A ``schedule:`` whose cron is written but holds no field is bad input wherever a command reads it."""

import io

import pytest

from hetflow.engine import cli

MANIFEST = """\
version: 1
name: blank
executors: {host: {vendor: cpu}}
stages:
  y: {op: random.normal, args: {shape: [2], seed: 0}}
outputs: {y: y}
schedule: {cron: CRON}
"""


def main(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("cron", ['"    "', '"\\t"', '" \\n "'], ids=["spaces", "tab", "newline"])
def test_a_cron_of_blanks_is_refused_at_its_place_by_every_command(tmp_path, cron):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.replace("CRON", cron))
    runs = tmp_path / "runs"
    for argv in (("validate", str(path)), ("plan", str(path)), ("schedule", "list", str(path)),
                 ("schedule", "status", str(path), "--runs-dir", str(runs)),
                 ("schedule", "run-due", str(path), "--runs-dir", str(runs))):
        code, out, err = main(*argv)
        assert code == 2, (argv, code, err)
        assert f"{path}:7:18: error: schedule.cron" in err and "holds only blanks" in err, (argv, err)
        assert "Traceback" not in out + err and "internal error" not in err, (argv, err)
    assert not runs.exists()
