"""What one run of the verification agent printed, kept by value for :func:`gpu_provision.verify.report.report_from_run`.

It belongs to the agent, not to an operation: the verify stage's operation fills one in
(:func:`gpu_provision.operations.verify.agent_report`), and so does the fleet command, which runs no operation
(:mod:`gpu_provision.verify.collect`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class AgentRun:
    """What one agent run printed, filled in when it ran (read it as pyinfra's ``OperationMeta`` is read:
    :meth:`is_complete`, :meth:`did_succeed`, ``stdout``, ``stderr_lines``); ``failure`` says how the command
    failed (command, exit status, last lines), empty when it did not."""

    complete: bool = False
    succeeded: bool = False
    stdout: str = ""
    stderr_lines: list[str] = field(default_factory=list)
    failure: str = ""

    def is_complete(self) -> bool:
        """Whether the agent command ran (an earlier failed operation keeps it from running)."""
        return self.complete

    def did_succeed(self) -> bool:
        """Whether the command succeeded, i.e. printed a report or said why none came."""
        return self.succeeded

    def record(self, ran: Any) -> None:
        """Keep what a :class:`gpu_provision.operations.remote.HostCommand` of the agent's command says."""
        self.complete, self.succeeded, self.stdout = True, bool(ran.ok), ran.stdout
        self.stderr_lines = ran.stderr_lines if ran.error is None else [ran.error]
        self.failure = "" if ran.ok else ran.failure
