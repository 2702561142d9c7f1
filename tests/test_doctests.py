"""The Examples sections of the modules' docstrings run as doctests."""

import doctest
import importlib

import tempfile

import pytest

MODULES = [
    "hetflow",
    "hetflow.engine.api",
    "hetflow.engine.results",
    "hetflow.engine.inputs",
    "hetflow.engine.clusters",
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
    "hetflow.engine.loader",
    "hetflow.engine.manifest",
    "hetflow.engine.resolve",
    "hetflow.engine.semantics",
    "hetflow.engine.planner",
    "hetflow.engine.plandata",
    "hetflow.engine.cache",
    "hetflow.engine.planview",
    "hetflow.engine.matrix",
    "hetflow.engine.schedule",
    "hetflow.engine.cron",
    "hetflow.engine.claims",
    "hetflow.engine.cancel",
    "hetflow.engine.events",
    "hetflow.engine.distributed",
    "hetflow.engine.recovery",
    "hetflow.engine.runtime",
    "hetflow.engine.records",
    "hetflow.engine.compare",
    "hetflow.engine.locks",
    "hetflow.engine.runs",
    "hetflow.engine.sweeps",
    "hetflow.engine.threads",
    "hetflow.engine.schemagen",
    "hetflow.engine.onnxops",
    "hetflow.engine.onnximport",
    "hetflow.engine.blocks",
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
