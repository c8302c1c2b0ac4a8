"""A fake pyinfra host answering the node probe with a canned state, for operation tests (state in, commands out).

Shared by tests/operations, tests/stages and tests/k8s (tests/ is on the import path through tests/conftest.py).
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state

from gpu_provision.operations.atomic import AtomicWrite


class FakeHost:
    """Answers the NodeState fact with ``raw``; records noops, logs and the shell commands run in callbacks."""

    def __init__(self, raw: dict[str, Any], executing: bool = False, name: str = "node-1",
                 replies: dict[str, tuple[bool, list[str], list[str]]] | None = None):
        self.name = name
        self.executing_op_hash: str | None = None  # as a pyinfra host outside an operation
        self.raw = raw
        self.state = SimpleNamespace(is_executing=executing)
        self.noops: list[str] = []
        self.logs: list[str] = []
        self.ran: list[tuple[str, Any]] = []
        self.replies = replies or {}
        self.probes = 0

    def get_fact(self, fact: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        self.probes += 1
        return self.raw

    def noop(self, description: str) -> None:
        self.noops.append(description)

    def get_temp_filename(self, key: str = "", **_: Any) -> str:
        return "/tmp/pyinfra-upload"

    def log_styled(self, message: str, **_: Any) -> None:
        self.logs.append(message)

    def run_shell_command(self, command: Any, **kwargs: Any) -> tuple[bool, Any]:
        command = str(command)  # a plain string, or a command object as printed
        self.ran.append((command, kwargs.get("_stdin")))
        for prefix, (ok, stdout, stderr) in self.replies.items():
            if command.startswith(prefix):
                return ok, SimpleNamespace(stdout_lines=stdout, stderr_lines=stderr)
        return True, SimpleNamespace(stdout_lines=[], stderr_lines=[])


def render(command: Any) -> Any:
    """A yielded command as data: a string, ``["write", text, dest, "owner:group", mode]`` (an atomic write), ``["upload", text, dest]``
    or ``["call", function name]``."""
    if isinstance(command, str):
        return command.strip()
    if isinstance(command, AtomicWrite):
        return ["write", command.text, command.dest, f"{command.owner}:{command.group}", command.mode]
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FileUploadCommand):
        return ["upload", command.src.getvalue(), command.dest]
    if isinstance(command, FunctionCommand):
        return ["call", command.function.__name__]
    raise TypeError(command)


def run_op(op: Any, host: FakeHost, *args: Any, **kwargs: Any) -> list[Any]:
    """Run an operation's generator as pyinfra would for ``host``; its commands as data."""
    with ctx_state.use(host.state), ctx_host.use(host):
        return [render(c) for c in op._inner(*args, **kwargs)]


def raw_commands(op: Any, host: FakeHost, *args: Any, **kwargs: Any) -> list[Any]:
    """Like :func:`run_op` but the command objects themselves."""
    with ctx_state.use(host.state), ctx_host.use(host):
        return list(op._inner(*args, **kwargs))
