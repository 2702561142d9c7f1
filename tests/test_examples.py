"""Every manifest shipped in the repository validates and plans; the quickstart runs."""

from pathlib import Path

import pytest

from hetflow.engine.manifest.validate import compile_manifest, load
from hetflow.engine.plan.planner import plan
from hetflow.engine.run.execute import execute
from hetflow.executors import probe

REPO = Path(__file__).resolve().parent.parent

MANIFESTS = sorted(p for d in ("examples", "pipelines") for p in (REPO / d).rglob("*.yaml"))


def test_the_repository_ships_manifests():
    names = {p.relative_to(REPO).as_posix() for p in MANIFESTS}
    assert "examples/quickstart.yaml" in names and any(n.startswith("pipelines/") for n in names)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_manifest_validates_and_plans(path):
    manifest = compile_manifest(load(path))
    p = plan(manifest, probe)
    assert p.nodes and set(p.outputs) == set(manifest.outputs)


def test_quickstart_shows_a_bridge_on_a_cpu_only_machine(tmp_path):
    manifest = compile_manifest(load(REPO / "examples" / "quickstart.yaml"))
    p = plan(manifest, probe)
    assert len(p.bridges) >= 1
    result = execute(manifest, p, runs_dir=str(tmp_path))
    assert result.status == "succeeded"
