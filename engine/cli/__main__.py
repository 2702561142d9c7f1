"""``python -m hetflow.engine.cli``: how ``hetflow schedule`` starts a slot's run."""

from hetflow.engine.cli.main import entry

entry()
