"""One command on one host outside an operation's yield, with its exit status, its output and one way to say it failed.

pyinfra runs the commands an operation yields with the operation's connector arguments; a command run from an
operation's body, a function command or a fleet command gets none unless it is given them, and pyinfra's
connectors (``ssh``, ``local``, ``docker``) keep the command's exit status to themselves: ``run_shell_command``
returns only ``return_code in _success_exit_codes`` (or ``== 0``) and a ``CommandOutput`` of lines, which has no
status. Every such command of this project therefore runs through :func:`run_on_host`: it takes the host's
connector arguments (:func:`gpu_provision.operations.commands.connector_arguments`: ``_sudo``,
``_sudo_password``, ``_sudo_user``, ...), runs the command as a :class:`StatusCommand` (the node's shell prints the
exit status as the last line of standard error, taken off again here) and returns a :class:`HostCommand` whose
``failure`` reads ``COMMAND exited N: last lines``, secrets hidden by the one redaction
(:mod:`gpu_provision.node.redact`) and the sudo password never shown.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyinfra.api import StringCommand

from gpu_provision.node.redact import HIDDEN, redact

#: How the node's shell reports a command's exit status (the last line of its standard error).
STATUS_MARK = "gpu-provision-exit-status:"
_STATUS_LINE = re.compile(re.escape(STATUS_MARK) + r"(\d+)$")
#: Lines of output a failure message carries.
TAIL_LINES = 5
#: Characters of the command a failure message shows.
COMMAND_CHARS = 80


class StatusCommand(StringCommand):
    """A command whose shell reports its exit status on standard error.

    It runs in a subshell (so an ``exit`` inside it ends only the subshell) followed by one ``printf`` of the
    status. Printed and logged (``str``, pyinfra's ``>>>`` lines) it is the command as given.
    """

    def __init__(self, command: str | StringCommand, **arguments: Any) -> None:
        self.command = command if isinstance(command, StringCommand) else StringCommand(command)
        super().__init__(self.command, **arguments)

    def get_raw_value(self) -> str:
        """The command as the node's shell runs it."""
        return f"(\n{self.command.get_raw_value()}\n); s=$?; printf '\\n{STATUS_MARK}%s\\n' \"$s\" >&2; exit $s"

    def get_masked_value(self) -> str:
        """The command as given (secrets masked as pyinfra masks them)."""
        return self.command.get_masked_value()


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


def shorten(command: str) -> str:
    """``command``'s first line, cut to :data:`COMMAND_CHARS` characters."""
    first = command.strip().split("\n", 1)[0]
    if first != command.strip() or len(first) > COMMAND_CHARS:
        return first[:COMMAND_CHARS].rstrip() + "..."
    return first


@dataclass(frozen=True)
class HostCommand:
    """A command's outcome on a host.

    ``stdout`` and ``stderr`` are what it printed (the sudo password hidden), for the caller to parse; ``command``,
    ``tail`` and ``failure`` are for messages and have every secret hidden. ``exit_status`` is None when no status
    came back (``error`` then says why, when the connection or the timeout ended the command).
    """

    ok: bool
    exit_status: int | None
    command: str
    stdout: str
    stderr: str
    tail: tuple[str, ...]
    error: str | None = None

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
    tail = tuple(hide(line.strip(), secrets) for line in printed[-TAIL_LINES:])
    return HostCommand(ok, status, shorten(hide(command, secrets)), "\n".join(stdout), "\n".join(stderr), tail,
                       None if error is None else hide(error, secrets))


def run_on_host(host: Any, command: str | StringCommand, arguments: Mapping[str, Any] | None = None,
                stdin: str | None = None, timeout: float | None = None, secrets: Iterable[str] = (),
                print_output: bool = False, print_input: bool = False) -> HostCommand:
    """Run ``command`` on ``host`` (outside an operation's yield) and return what came of it.

    + arguments: the connector arguments it carries; None: those of the operation ``host`` executes, else the
      host's own (:func:`gpu_provision.operations.commands.connector_arguments`)
    + stdin: text for its standard input (replaces any ``_stdin`` in ``arguments``)
    + timeout: seconds it may run (replaces any ``_timeout`` in ``arguments``)
    + secrets: values to hide in its messages besides those the redaction knows (a join token it passes)

    A dropped connection or the timeout is a result too (``error``), so every caller words it the same way.
    """
    from gpu_provision.operations.commands import connector_arguments

    if arguments is None:
        arguments = connector_arguments(host.state, host, host.executing_op_hash)
    given = dict(arguments)
    if stdin is not None:
        given["_stdin"] = stdin
    if timeout is not None:
        given["_timeout"] = timeout
    password = (str(given["_sudo_password"]),) if given.get("_sudo_password") else ()
    hidden = (*secrets, *password)
    wrapped = StatusCommand(command)
    try:
        ok, output = host.run_shell_command(wrapped, print_output=print_output, print_input=print_input, **given)
    except (OSError, TimeoutError) as exc:
        return outcome(str(wrapped), False, [], [], hidden, f"{type(exc).__name__}: {exc}" if str(exc)
                       else type(exc).__name__)
    # A connector that failed before the command ran may give no output at all.
    stdout = [hide_literal(line, password) for line in text_of(getattr(output, "stdout_lines", ()))]
    stderr = [hide_literal(line, password) for line in text_of(getattr(output, "stderr_lines", ()))]
    return outcome(str(wrapped), bool(ok), stdout, stderr, hidden)



def without_status(output: Any) -> tuple[int | None, Any]:
    """The exit status a :class:`StatusCommand` reported in pyinfra's ``output`` and ``output`` without the report
    (an output of another shape comes back as it is)."""
    lines = getattr(output, "combined_lines", None)
    if lines is None:
        return None, output
    stderr = [i for i, line in enumerate(lines) if line.buffer_name == "stderr"]
    for place in reversed(range(len(stderr))):
        found = _STATUS_LINE.search(lines[stderr[place]].line)
        if found:
            drop = {stderr[place]}
            if place > 0 and not lines[stderr[place - 1]].line.strip():
                drop.add(stderr[place - 1])
            return int(found.group(1)), type(output)([line for i, line in enumerate(lines) if i not in drop])
    return None, output
