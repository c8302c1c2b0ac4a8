"""One exception family for everything a user can get wrong or a node can refuse.

Each layer adds context (file, node, stage) by wrapping, and the CLI prints one line per error; the traceback
appears only with ``-v``.
"""

from __future__ import annotations

from dataclasses import dataclass


class GpuProvisionError(Exception):
    """Base of every error this project reports to a user as a one-line message."""


@dataclass(frozen=True)
class SpecProblem:
    """One problem found in a cluster file, located as precisely as the YAML allows."""

    file: str
    line: int
    column: int
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.column}: {self.path}: {self.message}"


class SpecError(GpuProvisionError):
    """A cluster file is invalid; carries every problem found, in file order (line, then column)."""

    def __init__(self, problems: list[SpecProblem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class MigLayoutError(GpuProvisionError):
    """A MIG layout cannot be placed on a GPU model; says which profile failed and what would fit."""

    def __init__(self, message: str, *, profile: str | None = None, taken: list[tuple[str, int, int]] | None = None,
                 suggestion: dict[str, int] | None = None):
        self.profile = profile
        self.taken = taken or []
        self.suggestion = suggestion
        super().__init__(message)
