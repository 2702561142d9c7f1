"""An executor's ``memory:`` that comes to no byte is refused at its own place, as ``memory: 0`` is."""

import io

import pytest

from hetflow.engine import cli

MANIFEST = """\
version: 1
name: mem
executors:
  host: {vendor: cpu, memory: MEMORY}
stages:
  y: {op: random.normal, args: {shape: [64, 64], seed: 0}}
outputs: {y: y}
"""


def main(*argv):
    out, err = io.StringIO(), io.StringIO()
    return cli.main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("memory", ["0B", "0.5B", "0KiB", "0 GB"])
def test_a_memory_of_no_byte_is_refused_at_the_memory_line(tmp_path, memory):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.replace("MEMORY", repr(memory)))
    for command in ("validate", "plan"):
        code, out, err = main(command, str(path))
        assert code == 2, (command, err)
        assert err.startswith(f"{path}:4:31: error: executors.host.memory is {memory!r}, less than 1 byte"), err
        assert "Traceback" not in out + err


def test_a_memory_of_one_byte_is_still_its_own_limit(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST.replace("MEMORY", "1B"))
    code, _, err = main("validate", str(path))
    assert code == 2 and f"{path}:6:3: error: stage 'y' needs at least 16.0 KiB" in err, err
    assert f"the most, 1 B, by executor 'host' at {path}:4:31" in err, err
