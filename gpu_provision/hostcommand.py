"""A command's outcome on a host and the one way to say it failed: ``COMMAND exited N: last lines``, secrets hidden.

Kept apart from :mod:`gpu_provision.operations.remote` (which runs commands through pyinfra's connectors) so that a
path that runs its command without pyinfra (``gpu-provision verify @local``) words a failure the same way without
loading pyinfra. The status line :data:`STATUS_MARK` is what :class:`gpu_provision.operations.remote.StatusCommand`
makes the node's shell print.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpu_provision.node.redact import HIDDEN, redact

#: How the node's shell reports a command's exit status (the last line of its standard error).
STATUS_MARK = "gpu-provision-exit-status:"
_STATUS_LINE = re.compile(re.escape(STATUS_MARK) + r"(\d+)$")
#: Lines of output a failure message carries.
TAIL_LINES = 5
#: Characters of the command a failure message shows.
COMMAND_CHARS = 80


def text_of(lines: Iterable[Any]) -> list[str]:
    """Output lines as strings (pyinfra's ``OutputLine`` objects or plain strings)."""
    return [str(getattr(line, "line", line)) for line in lines]


def split_status(stderr: Sequence[str]) -> tuple[int | None, list[str]]:
    """The exit status a :class:`StatusCommand` reported and its standard error without the report (and the blank
    line before it); None when no status came back (the command was not a :class:`StatusCommand`, or the
    connection went before it ended)."""
    lines = list(stderr)
    for index in range(len(lines) - 1, -1, -1):
        found = _STATUS_LINE.search(lines[index])
        if found:
            rest = lines[:index] + lines[index + 1:]
            if index > 0 and not lines[index - 1].strip():
                rest = lines[:index - 1] + lines[index + 1:]
            return int(found.group(1)), rest
    return None, lines


def hide_literal(line: str, values: Iterable[str]) -> str:
    """``line`` with each of ``values`` replaced by ``***`` (nothing else: the caller may still parse it)."""
    for value in values:
        if value:
            line = line.replace(value, HIDDEN)
    return line


def hide(text: str, secrets: Iterable[str]) -> str:
    """``text`` with the one redaction's secrets and each of ``secrets`` (literal values) replaced by ``***``."""
    return redact(hide_literal(text, secrets))


def shorten(command: str, secrets: Iterable[str] = ()) -> str:
    """``command``'s first line with its secrets hidden (:func:`hide`), cut to :data:`COMMAND_CHARS` characters.

    Only the first line is shown, so only it is searched: the redaction's patterns match within a line (a JSON
    string holds no line break), and a command's later lines can be long (the verification agent's carries its
    expectations as a few kilobytes of base64, where the patterns cost milliseconds per host and run)."""
    whole = command.strip()
    first = whole.split("\n", 1)[0]
    shown = hide(first, secrets)
    if first != whole or len(shown) > COMMAND_CHARS:
        return shown[:COMMAND_CHARS].rstrip() + "..."
    return shown


@dataclass(frozen=True)
class HostCommand:
    """A command's outcome on a host.

    ``stdout`` and ``stderr`` are what it printed (the sudo password hidden), for the caller to parse; ``command``,
    ``tail`` and ``failure`` are for messages and have every secret hidden. ``exit_status`` is None when no status
    came back (``error`` then says why, when the connection or the timeout ended the command). The tail is hidden
    when first asked for: most commands succeed and are never told, and a long last line (the verification agent's
    report) made the redaction a millisecond or more per host and run.
    """

    ok: bool
    exit_status: int | None
    command: str
    stdout: str
    stderr: str
    #: The last lines printed, as printed (kept out of the repr); :attr:`tail` is what messages show of them.
    printed_tail: tuple[str, ...] = field(repr=False)
    error: str | None = None
    #: Literal values hidden besides the redaction's patterns (kept out of the repr).
    secrets: tuple[str, ...] = field(default=(), repr=False)

    @cached_property
    def tail(self) -> tuple[str, ...]:
        """The last lines printed (at most :data:`TAIL_LINES`, stripped) with every secret hidden."""
        return tuple(hide(line, self.secrets) for line in self.printed_tail)

    @property
    def stdout_lines(self) -> list[str]:
        """``stdout`` line by line."""
        return self.stdout.split("\n") if self.stdout else []

    @property
    def stderr_lines(self) -> list[str]:
        """``stderr`` line by line."""
        return self.stderr.split("\n") if self.stderr else []

    @property
    def failure(self) -> str:
        """``COMMAND exited N: last lines`` (or why it did not finish), the one way a failed command is told."""
        if self.error is not None:
            return f"{self.command} did not finish: {self.error}"
        if self.exit_status is None:
            said = "failed (no exit status came back)"
        else:
            said = f"exited {self.exit_status}"
        return f"{self.command} {said}: " + (" / ".join(self.tail) if self.tail else "no output")


def outcome(command: str, ok: bool, stdout: Sequence[str], stderr: Sequence[str], secrets: Iterable[str] = (),
            error: str | None = None) -> HostCommand:
    """A :class:`HostCommand` from what a connector returned (``stderr`` may still hold the status report)."""
    secrets = tuple(secrets)
    status, stderr = split_status(stderr)
    if status is None and ok and error is None:
        status = 0
    printed = [line for line in [*stdout, *stderr] if line.strip()]
    tail = tuple(line.strip() for line in printed[-TAIL_LINES:])
    return HostCommand(ok, status, shorten(command, secrets), "\n".join(stdout), "\n".join(stderr), tail,
                       None if error is None else hide(error, secrets), secrets)
