"""Typed errors of the engine's passes.

Every pass raises one of these; only the CLI prints them and picks the
exit code. A :class:`Diagnostic` is one problem at one place of a
manifest, printed as ``FILE:LINE:COL: error: MESSAGE`` (1-based line and
column, the way compilers and editors read them).

Examples
--------
>>> str(Diagnostic(Origin("m.yaml", 3, 7), "unknown op 'relu2'"))
"m.yaml:3:7: error: unknown op 'relu2'"
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Origin", "Diagnostic", "HetflowError", "ManifestError", "UsageError", "RunFailed"]


@dataclass(frozen=True, order=True)
class Origin:
    """Where a value of a manifest was written."""

    file: str
    line: int
    col: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(frozen=True)
class Diagnostic:
    origin: Origin | None
    message: str
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.origin}: " if self.origin else ""
        return f"{where}{self.severity}: {self.message}"


class HetflowError(Exception):
    """Base of the errors hetflow reports to its user."""


class ManifestError(HetflowError):
    """A manifest is wrong; carries every problem found, in file order."""

    def __init__(self, diagnostics: list[Diagnostic]) -> None:
        self.diagnostics = sorted(
            diagnostics, key=lambda d: (d.origin or Origin("", 0, 0), d.message)
        )
        super().__init__("\n".join(str(d) for d in self.diagnostics))


class UsageError(HetflowError):
    """The command line is wrong (an unknown param, a bad value)."""


class RunFailed(HetflowError):
    """A stage failed while the pipeline ran; the run record says which and why."""

    def __init__(self, message: str, record_path: str | None = None) -> None:
        super().__init__(message)
        self.record_path = record_path
