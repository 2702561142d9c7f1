"""An existing cluster: `dask scheduler` and `dask worker` processes started here on loopback.

Nothing is preloaded on the workers: hetflow brings its worker plugin from
the client. One worker carries the resource ``executor-accel=1``.
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hetflow.engine import cli
from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan as make_plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe

pytest.importorskip("distributed")

from hetflow.engine.run.distributed import Cluster  # noqa: E402

from test_distributed import SPLIT  # noqa: E402

START_TIMEOUT_S = 90


def _stop(procs):
    # killed, not asked to close: a Dask process asked to close may take 10 s, and nothing here needs its close
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait(30)


@contextlib.contextmanager
def by_hand(folder: Path, *workers: list[str]):
    """``dask scheduler`` on loopback writing ``folder/scheduler.json``, then one ``dask worker`` per argument
    list; yields the scheduler file's path, every process killed after."""
    file = folder / "scheduler.json"
    log = open(folder / "cluster.log", "w")
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], stdout=log, stderr=subprocess.STDOUT)]
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs[0].poll() is None, (folder / "cluster.log").read_text()
            time.sleep(0.1)
        for extra in workers:
            procs.append(subprocess.Popen([*dask, "worker", "--scheduler-file", str(file), "--nthreads", "1", "--host",
                                           "127.0.0.1", "--no-dashboard", *extra], stdout=log, stderr=subprocess.STDOUT))
        yield file
    finally:
        _stop(procs)
        log.close()


@pytest.fixture(scope="module")
def existing(tmp_path_factory):
    with by_hand(tmp_path_factory.mktemp("cluster"), ["--name", "w0", "--no-nanny"],
                 ["--name", "w1", "--no-nanny", "--resources", "executor-accel=1"]) as file:
        cluster = Cluster.connect(str(file), timeout=START_TIMEOUT_S)
        try:
            cluster.client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            yield cluster, str(file)
        finally:
            cluster.close()


def test_existing_cluster_gives_the_threaded_digests_and_honours_worker_resources(existing, manifest_file, tmp_path):
    cluster, _ = existing
    m = compile_manifest(load(manifest_file(SPLIT)))
    local = execute(m, make_plan(m, probe), runs_dir=str(tmp_path))
    placed = cluster.place(make_plan(m, cluster.probe), m)
    assert placed.executors["accel"].worker_name == "w1"
    assert placed.executors["accel"].worker_reason == "worker resource executor-accel; worker w1"
    assert placed.executors["host"].worker_name == "w0"
    remote = execute(m, placed, runs_dir=str(tmp_path), cluster=cluster)
    assert {k: v["digest"] for k, v in remote.record["outputs"].items()} == \
        {k: v["digest"] for k, v in local.record["outputs"].items()}
    assert remote.record["scheduler"]["kind"] == "cluster"
    assert {w["name"]: w["resources"] for w in remote.record["scheduler"]["workers"]} == \
        {"w0": {}, "w1": {"executor-accel": 1}}
    # workers of this installation: nothing of theirs differs from the record's own versions
    assert all("versions" not in w for w in remote.record["scheduler"]["workers"])
    by_executor = {e.name: e.worker for e in placed.executors.values()}
    assert all(t["worker"] == by_executor[t["executor"]] for t in remote.record["tasks"])
    assert remote.record["live_activations_after"] == {"accel": 0, "host": 0}


def test_cli_run_on_the_scheduler_file_with_json_events(existing, manifest_file, tmp_path):
    _, file = existing
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["run", manifest_file(SPLIT), "--scheduler", file, "--runs-dir", str(tmp_path),
                     "--log-format", "json", "--json"], out=out, err=err)
    assert code == 0, err.getvalue()
    result = json.loads(out.getvalue())
    events = [json.loads(line) for line in err.getvalue().splitlines()]
    assert events[0]["kind"] == "run" and events[0]["mode"] == "cluster" and events[0]["workers"] == 2
    workers = {e["worker"] for e in events if e["kind"] != "run"}
    assert len(workers) == 2 and all(w.startswith("tcp://127.0.0.1:") for w in workers)
    record = json.loads(Path(result["record"]).read_text())
    assert record["status"] == "succeeded" and record["scheduler"]["address"].startswith("tcp://127.0.0.1:")


def test_verify_of_a_run_on_a_cluster_started_by_hand_reruns_at_its_workers_threads(manifest_file, tmp_path):
    """Dask's nanny starts each worker's BLAS at one thread: verify reran in this process on every core, and the
    quickstart itself was a MISMATCH ("thread pools differ: blas 1 -> 2")."""
    with by_hand(tmp_path, []) as file:  # a worker with its nanny, as `dask worker` starts one
        path = manifest_file("version: 1\nname: mm\nexecutors: {h: {vendor: cpu}}\nstages:\n"
                             "  a: {op: random.normal, args: {shape: [384, 384], seed: 1}}\n"
                             "  b: {op: random.normal, args: {shape: [384, 384], seed: 2}}\n"
                             "  y: {op: matmul, inputs: [a, b]}\noutputs: {y: y}\n")
        runs = tmp_path / "runs"
        out, err = io.StringIO(), io.StringIO()
        assert cli.main(["run", path, "--scheduler", str(file), "--runs-dir", str(runs), "--quiet", "--no-cache"],
                        out=out, err=err) == 0, err.getvalue()
    run_id = out.getvalue().split()[-1]
    record = json.loads((runs / run_id / "record.json").read_text())
    assert record["threads"]["set_by"] == "cluster" and record["threads"]["blas"] == 1, record["threads"]
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["verify", run_id, "--runs-dir", str(runs), "--json"], out=out, err=err)
    said = json.loads(out.getvalue())
    assert code == 0 and said["match"] is True, said
    assert json.loads((runs / said["rerun_id"] / "record.json").read_text())["threads"]["blas"] == 1


def _installation(folder: Path, version: str, pyyaml: str | None = None) -> Path:
    """Another installation of hetflow, as a worker started by hand may import it first: this one's code (its
    subpackages linked, not copied) under ``version``; with ``pyyaml``, a PyYAML distribution of that version
    found before this environment's."""
    import importlib

    import hetflow

    package = folder / "hetflow"
    package.mkdir(parents=True)
    (package / "__init__.py").write_bytes(Path(hetflow.__file__).read_bytes())
    (package / "_version.py").write_text(f"__version__ = {version!r}\n")
    for sub in ("engine", "executors", "schemas", "examples", "pipelines"):
        (package / sub).symlink_to(list(importlib.import_module(f"hetflow.{sub}").__path__)[0], target_is_directory=True)
    if pyyaml:
        info = folder / f"PyYAML-{pyyaml}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: PyYAML\nVersion: {pyyaml}\n")
    return folder


def test_a_worker_of_another_hetflow_is_refused_and_other_library_versions_are_recorded(manifest_file, tmp_path):
    """A cluster started by hand whose workers import another installation: a worker of another hetflow version
    is refused before anything runs, naming it; one whose libraries differ runs, and the record names the
    differences, so that its ``versions`` (this process's) do not speak for the workers."""
    from hetflow._version import __version__

    file = tmp_path / "scheduler.json"
    log = open(tmp_path / "cluster.log", "w")
    dask = [sys.executable, "-m", "dask"]
    procs = [subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard",
                               "--scheduler-file", str(file)], stdout=log, stderr=subprocess.STDOUT)]

    def worker(name: str, pythonpath: Path | None = None) -> None:
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
        procs.append(subprocess.Popen(
            [*dask, "worker", "--scheduler-file", str(file), "--name", name, "--nthreads", "1", "--no-nanny",
             "--host", "127.0.0.1", "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env,
            cwd=tmp_path))  # not the checkout: ``python -m`` puts the working folder before PYTHONPATH

    path = manifest_file(SPLIT)
    runs = tmp_path / "runs"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs[0].poll() is None, (tmp_path / "cluster.log").read_text()
            time.sleep(0.1)
        worker("libs", _installation(tmp_path / "libs", __version__, pyyaml="0.0.1"))
        worker("older", _installation(tmp_path / "older", "0.0.9"))
        with Cluster.connect(str(file), timeout=START_TIMEOUT_S) as cluster:
            cluster.client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            out, err = io.StringIO(), io.StringIO()
            code = cli.main(["run", path, "--scheduler", str(file), "--runs-dir", str(runs)], out=out, err=err)
            assert code == 2, err.getvalue()
            assert "worker older (tcp://127.0.0.1:" in err.getvalue()
            assert f"runs hetflow 0.0.9, this process hetflow {__version__}: install the same hetflow" in err.getvalue()
            assert "Traceback" not in err.getvalue()
            assert not [p for p in runs.glob("*") if not p.name.startswith(".")], "refused before a run folder was made"

            procs[-1].kill()
            procs[-1].wait(30)
            deadline = time.time() + START_TIMEOUT_S
            while len(cluster.client.scheduler_info(n_workers=-1)["workers"]) > 1 and time.time() < deadline:
                time.sleep(0.1)
        out, err = io.StringIO(), io.StringIO()
        code = cli.main(["run", path, "--scheduler", str(file), "--runs-dir", str(runs), "--json"], out=out, err=err)
        assert code == 0, err.getvalue()
        record = json.loads(Path(json.loads(out.getvalue())["record"]).read_text())
        by_name = {w["name"]: w for w in record["scheduler"]["workers"]}
        assert sorted(by_name) == ["libs"]
        assert by_name["libs"]["versions"] == {"pyyaml": "0.0.1"}
        # the same run in this process: `runs diff` names the worker's version among what changed
        out, err = io.StringIO(), io.StringIO()
        assert cli.main(["run", path, "--runs-dir", str(runs), "--no-cache", "--quiet"], out=out, err=err) == 0, err.getvalue()
        threaded = out.getvalue().strip().splitlines()[-1]
        out, err = io.StringIO(), io.StringIO()
        assert cli.main(["runs", "diff", record["run_id"], threaded, "--runs-dir", str(runs), "--json"],
                        out=out, err=err) == 0, err.getvalue()
        mine = record["versions"]["pyyaml"]
        assert json.loads(out.getvalue())["versions"] == [["pyyaml", f"{mine} (worker libs: 0.0.1)", mine]]
    finally:
        for p in procs:  # killed: asked to stop, a worker takes seconds to leave, and nothing here needs that
            p.kill()
            p.wait(30)
        log.close()


def test_a_worker_of_another_hetflow_that_joins_mid_run_is_not_handed_a_lost_workers_executors(manifest_file,
                                                                                                tmp_path):
    """Placement asks every worker its hetflow; a worker started by hand after the run began was not asked, and
    a recovery from a lost worker handed it the executors: the run finished on another hetflow's code under a
    record naming this one's. Now it is asked when it is first seen, and not used; the run fails saying why."""
    file = tmp_path / "scheduler.json"
    log = open(tmp_path / "cluster.log", "w")
    dask = [sys.executable, "-m", "dask"]
    procs = {"scheduler": subprocess.Popen([*dask, "scheduler", "--host", "127.0.0.1", "--port", "0",
                                            "--no-dashboard", "--scheduler-file", str(file)],
                                           stdout=log, stderr=subprocess.STDOUT)}

    def worker(name: str, pythonpath: Path | None = None) -> None:
        env = dict(os.environ)
        if pythonpath is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
        procs[name] = subprocess.Popen(
            [*dask, "worker", "--scheduler-file", str(file), "--name", name, "--nthreads", "1", "--no-nanny",
             "--host", "127.0.0.1", "--no-dashboard"], stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)

    stages = ["  x: {op: random.normal, args: {shape: [768, 768], seed: 1, std: 0.03}}",
              "  w: {op: random.normal, args: {shape: [768, 768], seed: 2, std: 0.03}}"]
    stages += [f"  m{i}: {{op: matmul, inputs: [{'x' if i == 0 else f'm{i - 1}'}, w], cache: false}}"
               for i in range(600)]
    path = manifest_file("version: 1\nname: long\nexecutors: {a: {vendor: cpu}}\nstages:\n" + "\n".join(stages)
                         + "\noutputs: {y: m599}\n")
    runs = tmp_path / "runs"
    try:
        deadline = time.time() + START_TIMEOUT_S
        while not file.exists() and time.time() < deadline:
            assert procs["scheduler"].poll() is None, (tmp_path / "cluster.log").read_text()
            time.sleep(0.1)
        worker("host")
        with Cluster.connect(str(file), timeout=START_TIMEOUT_S) as cluster:
            cluster.client.wait_for_workers(1, timeout=START_TIMEOUT_S)
            run = subprocess.Popen([sys.executable, "-m", "hetflow.engine.cli", "run", path, "--scheduler", str(file),
                                    "--runs-dir", str(runs), "--log-format", "json"],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for line in run.stderr:
                if line.startswith("{") and json.loads(line).get("kind") == "partition":
                    break
            worker("older", _installation(tmp_path / "older", "0.0.9"))
            cluster.client.wait_for_workers(2, timeout=START_TIMEOUT_S)
            procs["host"].kill()  # no nanny: its executor must move to a live worker, and only "older" is one
            out, err = run.communicate(timeout=120)
    finally:
        for p in procs.values():
            p.kill()
            p.wait(30)
        log.close()
    assert run.returncode == 1, err[-3000:]
    assert "Traceback" not in err and "internal error" not in err
    record = json.loads(next(runs.glob("*/record.json")).read_text())
    assert record["status"] == "failed"
    message = record["error"]["message"]
    assert "no live worker can host executor 'a'" in message, message
    assert "not used: worker older (tcp://127.0.0.1:" in message and "runs hetflow 0.0.9" in message, message
    assert not [e for e in record["tasks"] if e.get("kind") == "partition" and e.get("status") == "succeeded"]
