"""One exception family for everything a user can get wrong or a node can refuse.

Each layer adds context (file, node, stage) by wrapping, and the CLI prints one line per error; the traceback
appears only with ``-v``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Every character that ends a line for ``str.splitlines`` or a terminal (line feeds, carriage returns, vertical tab,
#: form feed, the C1 next-line, U+2028/U+2029), and every other control character.
_LINE_BREAKING = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def one_line(text: str) -> str:
    """``text`` on one line: each control or line-breaking character written as its escape (``\\n``, ``\\x85``).

    A value quoted from a cluster file (a key ``"a\\nb"``) or a node's output can hold any character; printed as it
    is, one problem would take several lines and a line could pass for another problem or erase what came before.
    """
    return _LINE_BREAKING.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


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
        return one_line(f"{self.file}:{self.line}:{self.column}: {self.path}: {self.message}")


class SpecError(GpuProvisionError):
    """A cluster file is invalid; carries every problem found, in file order (line, then column), one line each."""

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
