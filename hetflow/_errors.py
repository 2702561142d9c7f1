"""The base of the errors hetflow reports to its user, in a module of its own.

:mod:`hetflow.engine.errors` holds the hierarchy; :mod:`hetflow.executors`,
which never imports the engine, raises errors of it too: a malformed
``@hetflow.op`` in a notebook is caught by ``except hetflow.HetflowError``
as every other error of the API is.
"""


class HetflowError(Exception):
    """Base of the errors hetflow reports to its user."""

    #: what the CLI exits with for it (``docs/reference/exit-codes.md``): a failure (1) unless a kind says otherwise;
    #: the CLI's own rules (``hetflow.engine.cli.outcomes``) are tested to agree
    exit_code = 1
