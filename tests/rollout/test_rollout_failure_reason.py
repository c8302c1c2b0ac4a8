"""A node's change that fails on a real command: the rollout's reason names the operation, the command, its exit
status and the last lines it printed. The engine, RemoteNode's change, the fleet runner and its command log run as
in a rollout, on pyinfra's @local connector; only the deploy is one failing operation (and no GPU client is stopped
on this machine)."""

from __future__ import annotations

from typing import Any

import pytest
from pyinfra.api import Inventory
from pyinfra.operations import server

from gpu_provision.fleet import FleetSettings, Reached, run_fleet
from gpu_provision.rollout import execute
from gpu_provision.rollout.engine import NodeOps, Outcome, Policy, RolloutNode, RolloutRun
from gpu_provision.stages import pipeline

FAILING = "printf 'Reading package lists...\\nE: Unable to locate package nvidia-driver-580\\n' >&2; exit 100"


def failing_deploy(stages: Any = None, report_dir: Any = None) -> None:
    server.shell(name="Install the driver", commands=[FAILING])


def test_a_failed_change_is_reported_with_the_command_its_status_and_its_last_lines(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pipeline, "gpu_node", failing_deploy)
    monkeypatch.setattr(execute.RemoteNode, "_holders", lambda self: [])
    verified: list[str] = []
    monkeypatch.setattr(execute.RemoteNode, "verify", lambda self: verified.append(self.reached.host.name))

    def run_batch(names: list[str], work: Any) -> dict[str, Outcome]:
        def one(reached: Reached) -> Outcome:
            node: NodeOps = execute.RemoteNode(reached, stages=("preflight",))
            return work(reached.host.name, node)

        run = run_fleet(Inventory((["@local"], {})), one, FleetSettings())
        return {r.name: r.value for r in run.hosts if r.value is not None}

    lines: list[str] = []
    report = RolloutRun(Policy(), None, run_batch, log=lines.append).run([RolloutNode("@local", "none")])
    outcome = report.outcomes["@local"]
    assert outcome.result == "failed" and verified == []
    reason = outcome.reason
    assert reason.startswith("the deploy failed at Install the driver: printf 'Reading package lists...")
    assert "... exited 100: " in reason
    assert reason.endswith(": Reading package lists... / E: Unable to locate package nvidia-driver-580")
    assert f"@local: failed: {reason}" in lines
