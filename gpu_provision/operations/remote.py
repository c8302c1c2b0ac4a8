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

from collections.abc import Iterable, Mapping
from typing import Any

from pyinfra.api import StringCommand

from gpu_provision.hostcommand import (
    _STATUS_LINE,
    STATUS_MARK,
    HostCommand,
    hide_literal,
    outcome,
    text_of,
)

__all__ = ["STATUS_MARK", "HostCommand", "StatusCommand", "outcome", "run_on_host", "text_of", "without_status"]

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
