"""Users' ops on Dask workers (issue 14): a worker that cannot import a plugin fails the run, naming itself and the module."""

import io
import json
import site
import sys
from pathlib import Path

import numpy as np

from hetflow.engine import cli
from hetflow.engine.run.distributed import PLUGIN_PREFIX, Cluster

MODULE = "hetflow_test_labonly_ops"

MANIFEST = f"""\
version: 1
name: labonly
plugins: [{MODULE}]
executors: {{h: {{vendor: cpu}}}}
stages:
  x: {{op: ones, args: {{shape: [3]}}}}
  y: {{op: labonly.neg, inputs: [x]}}
outputs: {{y: y}}
"""


def run_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(list(argv), out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _held_plugins(dask_scheduler=None):
    return [name for name in dask_scheduler.worker_plugins if name.startswith(PLUGIN_PREFIX)]


def test_a_worker_that_cannot_import_a_plugin_fails_the_run_naming_the_worker_and_the_module(tmp_path, monkeypatch):
    folder = tmp_path / "site"
    folder.mkdir()
    (folder / f"{MODULE}.py").write_text("from hetflow import op\n\n\n@op('labonly.neg')\ndef neg(xp, x):\n    return -x\n")
    path = tmp_path / "m.yaml"
    path.write_text(MANIFEST)
    runs = str(tmp_path / "runs")
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    # the workers start before the client can import the module: an installation only the client has
    with Cluster.local(1, 1) as cluster:
        monkeypatch.syspath_prepend(str(folder))
        assert run_cli("validate", str(path))[0] == 0
        [worker] = cluster.workers()
        code, _, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", runs)
        assert code == 1 and "Traceback" not in err and "internal error" not in err
        message = (f"worker {worker.name} ({worker.address}) cannot load plugin {MODULE!r} (module {MODULE}): "
                   f"plugin {MODULE!r}: no module named {MODULE!r} is installed in this Python")
        lines = [line for line in err.splitlines() if not line.startswith("[")]
        assert lines[0].startswith(f"hetflow: run failed: {message}"), err
        record_file = next(line.removeprefix("record: ") for line in lines if line.startswith("record: "))
        record = json.loads(Path(record_file).read_text())
        assert record["status"] == "failed" and record["error"]["message"].startswith(message)
        assert record["error"]["lost"] == {"worker": worker.address, "plugin": MODULE, "module": MODULE}
        assert {n["status"] for n in record["nodes"].values()} == {"not run"} and record["outputs"] == {}
        # the failed registration is not left on the scheduler to be handed to workers that join later
        assert cluster.client.run_on_scheduler(_held_plugins) == []
        # once the worker can import it, the same run on the same cluster succeeds
        cluster.client.run(site.addsitedir, str(folder))
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", runs)
        assert code == 0, err
        assert cluster.client.run_on_scheduler(_held_plugins) == []
    folder = Path(runs) / out.split()[-1]
    last = json.loads((folder / "record.json").read_text())
    assert last["status"] == "succeeded" and [p["module"] for p in last["plugins"]] == [MODULE]
    assert np.load(folder / "y.npy").tolist() == [-1.0, -1.0, -1.0]
