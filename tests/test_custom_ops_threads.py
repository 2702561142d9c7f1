"""Users' ops of one name from two plugins, run from two threads of one process: the registry holds one op a name,
so a run must compute with its own plugin's code to its end, as its record and its cache keys say it did."""

import os
import textwrap
import threading

import numpy as np
import pytest

import hetflow

# the op of the plugin in folder "slow" holds its first call until the test lets it go, so that the other plugin
# is loaded while that run is between its two stages
OPS = '''
import os, time
from hetflow import op

HERE = os.path.dirname(os.path.abspath(__file__))


@op("dup.scale")
def scale(xp, x):
    if {wait} and not os.path.exists(os.path.join(HERE, "started")):
        open(os.path.join(HERE, "started"), "w").close()
        for _ in range(6000):
            if os.path.exists(os.path.join(HERE, "go")):
                break
            time.sleep(0.01)
    return x * {factor}
'''

MANIFEST = '''
version: 1
name: dup-{name}
plugins: [ops.py]
executors: {{host: {{vendor: cpu}}}}
stages:
  x: {{op: random.normal, args: {{shape: [4], seed: 1}}}}
  y: {{op: dup.scale, inputs: [x]}}
  z: {{op: dup.scale, inputs: [y]}}
outputs: {{x: x, z: z}}
'''


def _project(root, name: str, factor: int, wait: bool) -> str:
    folder = root / name
    folder.mkdir()
    (folder / "ops.py").write_text(textwrap.dedent(OPS.format(factor=factor, wait=wait)))
    (folder / "m.yaml").write_text(MANIFEST.format(name=name))
    return str(folder / "m.yaml")


def test_a_plugin_loaded_while_another_plugins_op_of_its_name_runs_is_refused_and_the_run_keeps_its_code(
        tmp_path, registry):
    slow = _project(tmp_path, "slow", 2, wait=True)
    other = _project(tmp_path, "other", 3, wait=False)
    runs = str(tmp_path / "runs")
    done: dict = {}

    def background() -> None:
        try:
            done["run"] = hetflow.run(slow, runs_dir=runs)
        except BaseException as e:  # noqa: BLE001 - said by the assertions below
            done["error"] = e

    thread = threading.Thread(target=background)
    thread.start()
    try:
        started = tmp_path / "slow" / "started"
        for _ in range(6000):
            if started.exists() or not thread.is_alive():
                break
            thread.join(0.01)
        assert started.exists(), done
        with pytest.raises(hetflow.ManifestError) as caught:
            hetflow.run(other, runs_dir=runs)
        said = str(caught.value)
        assert "ops.py" in said and "'dup.scale' is in use by a run in this process" in said
        assert not os.path.exists(runs) or not [d for d in os.listdir(runs) if "dup-other" in d]
    finally:
        (tmp_path / "slow" / "go").touch()
        thread.join()
    r = done.get("run")
    assert r is not None, done
    assert r.status == "succeeded"
    # both stages ran the slow plugin's op (x * 2 * 2), not the other's (* 3) that was loaded in between
    np.testing.assert_allclose(r.outputs["z"], r.outputs["x"] * 4, rtol=1e-6)
    # once it ended, the other manifest runs with its own code
    again = hetflow.run(other, runs_dir=runs)
    np.testing.assert_allclose(again.outputs["z"], again.outputs["x"] * 9, rtol=1e-6)
    # and the first again with its own, not a cache entry made with the other's
    third = hetflow.run(slow, runs_dir=runs, cache=False)
    np.testing.assert_allclose(third.outputs["z"], third.outputs["x"] * 4, rtol=1e-6)
