"""A key written with a line break or a control character in it (``"o\\n": y``) is refused, and every line
of the refusal still begins with FILE:LINE:COL: the key is quoted wherever a message names its place."""

import io

from hetflow.engine import cli

MANIFEST = r"""version: 1
name: keys
executors:
  host: {vendor: cpu}
  "gpu\nX": {vendor: cpux}
stages:
  y: {op: random.normal, args: {shape: [2], seed: 0}, executor: host}
outputs: {"o\n\e[2J": "y z", "p q": [y]}
"""


def test_every_line_of_the_refusal_is_located_when_keys_hold_line_breaks(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    out, err = io.StringIO(), io.StringIO()
    assert cli.main(["validate", str(path)], out=out, err=err) == 2
    lines = err.getvalue().splitlines()
    assert lines and all(line.startswith(f"{path}:") for line in lines), lines
    text = err.getvalue()
    assert f"{path}:5:22: error: executors['gpu\\nX'].vendor must be one of" in text, text
    assert f"{path}:8:23: error: outputs['o\\n\\x1b[2J'] must be a name, found 'y z'" in text, text
    assert f"{path}:8:37: error: outputs['p q'] must be a string" in text, text
