"""The Examples sections of the modules' docstrings run as doctests."""

import doctest
import importlib

import tempfile

import pytest

MODULES = [
    "hetflow",
    "hetflow.engine.api",
    "hetflow.engine.results",
    "hetflow.engine.run.inputs",
    "hetflow.engine.run.clusters",
    "hetflow.engine.examples",
    "hetflow.executors",
    "hetflow.executors.probing",
    "hetflow.executors.base",
    "hetflow.executors.ops",
    "hetflow.executors.opdecl",
    "hetflow.executors.builtin.loading",
    "hetflow.executors.userops",
    "hetflow.executors.codeid",
    "hetflow.executors.vulkan_device",
    "hetflow.executors.carriers",
    "hetflow.executors.cpu",
    "hetflow.executors.payload",
    "hetflow.engine.errors",
    "hetflow.engine.manifest.loader",
    "hetflow.engine.manifest.validate",
    "hetflow.engine.manifest.resolve",
    "hetflow.engine.manifest.semantics",
    "hetflow.engine.plan.planner",
    "hetflow.engine.plan.plandata",
    "hetflow.engine.store.cache",
    "hetflow.engine.plan.planview",
    "hetflow.engine.manifest.matrix",
    "hetflow.engine.batch.schedule",
    "hetflow.engine.manifest.cron",
    "hetflow.engine.batch.claims",
    "hetflow.engine.run.cancel",
    "hetflow.engine.run.events",
    "hetflow.engine.run.distributed",
    "hetflow.engine.run.recovery",
    "hetflow.engine.run.runtime",
    "hetflow.engine.store.records",
    "hetflow.engine.store.compare",
    "hetflow.engine.store.locks",
    "hetflow.engine.store.runs",
    "hetflow.engine.batch.sweeps",
    "hetflow.engine.run.threads",
    "hetflow.engine.run.malloc",
    "hetflow.engine.manifest.schemagen",
    "hetflow.engine.importers.onnxops",
    "hetflow.engine.importers.onnximport",
    "hetflow.engine.manifest.blocks",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' mkdtemp() folders go with the test's
    module = importlib.import_module(name)
    for public in getattr(module, "__all__", ()):  # names a module loads on first use are documented there too
        getattr(module, public)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0, f"{name} has no examples"
    assert result.failed == 0
