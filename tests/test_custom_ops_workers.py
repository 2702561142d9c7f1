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


PATH_PLUGIN_MANIFEST = """\
version: 1
name: helped
plugins: [ops.py]
executors: {h: {vendor: cpu}}
stages:
  x: {op: ones, args: {shape: [3]}}
  y: {op: helped.shift, inputs: [x]}
outputs: {y: y}
"""


def test_a_worker_whose_helper_module_is_another_than_the_clients_is_refused_not_cached_as_the_clients(
        tmp_path, monkeypatch):
    """A path plugin travels as its bytes, but the helper it imports comes from the worker's search path: a worker
    with an older helper.py computed with it, and its results were stored under the key of the client's code and
    served to later runs, in-process ones too."""
    # the helper is not beside the plugin (whose folder a worker on this machine searches first, as the client
    # does) but in a library folder on the client's search path, and an older one on the worker's
    project, new, old = tmp_path / "project", tmp_path / "new", tmp_path / "old"
    for folder, offset in ((new, 5), (old, 1)):
        folder.mkdir()
        (folder / "hetflow_test_shift_helper.py").write_text(f"OFFSET = {offset}\n")
    project.mkdir()
    (project / "ops.py").write_text("from hetflow import op\nfrom hetflow_test_shift_helper import OFFSET\n\n\n"
                                    "@op('helped.shift')\ndef shift(xp, x):\n    return x + OFFSET\n")
    path = project / "m.yaml"
    path.write_text(PATH_PLUGIN_MANIFEST)
    runs = str(tmp_path / "runs")
    monkeypatch.delitem(sys.modules, "hetflow_test_shift_helper", raising=False)
    monkeypatch.syspath_prepend(str(new))
    with Cluster.local(1, 1) as cluster:
        [worker] = cluster.workers()
        # exec by name: a bound method of the client's sys.path would travel as a copy of the list
        cluster.client.run(exec, f"import sys; sys.path.insert(0, {str(old)!r})")
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", runs)
        assert code == 1 and "Traceback" not in err, err
        lines = [line for line in err.splitlines() if not line.startswith("[")]
        assert lines[0].startswith(
            f"hetflow: run failed: worker {worker.name} ({worker.address}) has other code for plugin 'ops.py' than "
            f"this machine: module hetflow_test_shift_helper: here {new / 'hetflow_test_shift_helper.py'} (sha256:"), err
        assert f"there {old / 'hetflow_test_shift_helper.py'} (sha256:" in lines[0]
        # the worker given the client's helper runs, and computes with it
        cluster.client.run(exec, f"import sys; sys.path.remove({str(old)!r}); "
                                 "sys.modules.pop('hetflow_test_shift_helper', None)")
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", runs)
        assert code == 0, err
    folder = Path(runs) / out.split()[-1]
    assert np.load(folder / "y.npy").tolist() == [6.0, 6.0, 6.0]


def test_a_worker_with_another_copy_of_a_module_plugin_is_refused(tmp_path, monkeypatch):
    name = "hetflow_test_labmod_ops"
    new, old = tmp_path / "new", tmp_path / "old"
    for folder, offset in ((new, 5), (old, 1)):
        folder.mkdir()
        (folder / f"{name}.py").write_text(f"from hetflow import op\n\n\n@op('labmod.shift')\ndef shift(xp, x):\n"
                                           f"    return x + {offset}\n")
    path = tmp_path / "m.yaml"
    path.write_text(PATH_PLUGIN_MANIFEST.replace("ops.py", name).replace("helped.shift", "labmod.shift"))
    monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.syspath_prepend(str(new))
    with Cluster.local(1, 1) as cluster:
        [worker] = cluster.workers()
        cluster.client.run(exec, f"import sys; sys.path.insert(0, {str(old)!r})")
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", str(tmp_path / "r"))
        assert code == 1 and "Traceback" not in err, err
        lines = [line for line in err.splitlines() if not line.startswith("[")]
        assert lines[0].startswith(f"hetflow: run failed: worker {worker.name} ({worker.address}) has other code for "
                                   f"plugin {name!r} than this machine: file {name}.py: here {new / (name + '.py')} "
                                   "(sha256:"), err
        assert f"there {old / (name + '.py')} (sha256:" in lines[0]


def test_a_relative_runs_dir_puts_a_cluster_runs_cache_entries_where_its_record_says(tmp_path, monkeypatch):
    """The workers, in their own working folder, stored the entries under theirs while the record named the
    client's: plan said "no cache entry", and later runs elsewhere hit the stray ones."""
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: rel\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                    "  x: {op: ones, args: {shape: [3]}}\n  y: {op: neg, inputs: [x]}\noutputs: {y: y}\n")
    with Cluster.local(1, 1) as cluster:
        elsewhere = cluster.client.run(exec, "import os; os.chdir(os.path.expanduser('~'))")
        assert elsewhere
        monkeypatch.chdir(tmp_path)
        code, out, err = run_cli("run", "m.yaml", "--scheduler", cluster.address, "--runs-dir", "rr", "--json")
        assert code == 0, err
    record = json.loads((tmp_path / "rr" / json.loads(out)["run_id"] / "record.json").read_text())
    assert record["cache"]["dir"] == str(tmp_path / "rr" / ".cache") and record["cache"]["stored"]
    stored = [p for p in (tmp_path / "rr" / ".cache").rglob("entry.json")]
    assert len(stored) == len(record["cache"]["stored"])


def test_a_partition_a_worker_computes_with_other_libraries_is_not_stored_under_the_clients_key(tmp_path):
    """A worker with another numpy computed a partition, stored under the key naming the client's numpy and served
    to the client's later runs."""
    path = tmp_path / "m.yaml"
    path.write_text("version: 1\nname: libs\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                    "  x: {op: ones, args: {shape: [3]}}\n  y: {op: neg, inputs: [x]}\noutputs: {y: y}\n")
    runs = tmp_path / "runs"
    with Cluster.local(1, 1) as cluster:
        cluster.client.run(exec, "import hetflow.engine.store.cache as c; c.computing_versions = "
                                 "lambda v, real=c.computing_versions: real(v).replace('numpy ', 'numpy 0.0.1+')")
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", str(runs), "--json")
        assert code == 0, err
    record = json.loads((runs / json.loads(out)["run_id"] / "record.json").read_text())
    assert record["cache"]["stored"] == []
    (why,) = record["cache"]["store_failed"].values()
    assert why.startswith("computed with other libraries than its key names (numpy ") and "-> 0.0.1+" in why
    code, out, err = run_cli("run", str(path), "--runs-dir", str(runs), "--json")
    assert code == 0, err
    assert json.loads((runs / json.loads(out)["run_id"] / "record.json").read_text())["cache"]["hits"] == []


def test_a_worker_whose_helper_is_the_same_code_from_another_folder_runs(tmp_path, monkeypatch):
    """The same bytes found elsewhere on a worker (a project installed there, checked out here) are the same
    code: the run goes on."""
    new, copy = tmp_path / "new", tmp_path / "copy"
    for folder in (new, copy):
        folder.mkdir()
        (folder / "hetflow_test_same_helper.py").write_text("OFFSET = 5\n")
    (new / "ops.py").write_text("from hetflow import op\nfrom hetflow_test_same_helper import OFFSET\n\n\n"
                                "@op('helped.shift')\ndef shift(xp, x):\n    return x + OFFSET\n")
    path = new / "m.yaml"
    path.write_text(PATH_PLUGIN_MANIFEST)
    monkeypatch.delitem(sys.modules, "hetflow_test_same_helper", raising=False)
    monkeypatch.syspath_prepend(str(new))
    with Cluster.local(1, 1) as cluster:
        cluster.client.run(exec, f"import sys; sys.path.insert(0, {str(copy)!r})")
        code, out, err = run_cli("run", str(path), "--scheduler", cluster.address, "--runs-dir", str(tmp_path / "r"))
        assert code == 0, err
    assert np.load(tmp_path / "r" / out.split()[-1] / "y.npy").tolist() == [6.0, 6.0, 6.0]
