"""A fake pyinfra host whose node probe answers with a canned state, for operation tests (state in, commands out)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pyinfra.api import FileUploadCommand, FunctionCommand, StringCommand
from pyinfra.context import ctx_host, ctx_state


class FakeHost:
    """Answers the NodeState fact with ``raw`` and records noop descriptions and probe calls."""

    name = "node-1"

    def __init__(self, raw: dict[str, Any], executing: bool = False):
        self.raw = raw
        self.state = SimpleNamespace(is_executing=executing)
        self.noops: list[str] = []
        self.probes = 0

    def get_fact(self, fact: Any, *args: Any) -> dict[str, Any]:
        self.probes += 1
        return self.raw

    def noop(self, description: str) -> None:
        self.noops.append(description)

    def get_temp_filename(self, key: str = "", **_: Any) -> str:
        return "/tmp/pyinfra-upload"


def render(command: Any) -> Any:
    """A yielded command as test data: a string, ``["upload", text, dest]`` or ``["function", name]``."""
    if isinstance(command, str):
        return command.strip()
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FileUploadCommand):
        return ["upload", command.src.getvalue(), command.dest]
    if isinstance(command, FunctionCommand):
        return ["function", command.function.__name__]
    raise TypeError(command)


def run_op(op: Any, host: FakeHost, *args: Any, **kwargs: Any) -> list[Any]:
    """Run an operation's generator as pyinfra would for ``host`` and return its commands as data."""
    with ctx_state.use(host.state), ctx_host.use(host):
        return [render(c) for c in op._inner(*args, **kwargs)]
