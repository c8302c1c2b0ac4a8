"""``gpu-provision verify`` over SSH: the verification agent on every host through the fleet runner, one report each.

Each reached host gets one short command that runs the node's own copy of the agent (:mod:`.agent`: kept by
digest in a root-only directory) on the host's expectations. Only a node without this version's copy gets the
agent, once (one more command carrying it, then the short command again), so repeated runs cost one command per
node and no upload. The report comes back by value. A host the runner could not reach gets an ``error`` report
with the runner's reason, worded as ``gpu-provision drift`` words it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from pyinfra.api import Inventory

from gpu_provision.errors import GpuProvisionError
from gpu_provision.fleet import FleetSettings, HostResult, Progress, Reached, load_inventory, run_fleet
from gpu_provision.operations.commands import connector_arguments
from gpu_provision.operations.remote import run_on_host
from gpu_provision.verify import agent
from gpu_provision.verify.agentrun import AgentRun
from gpu_provision.verify.report import error_report, report_from_run


def use_expectations(inventory: Inventory, expect_files: dict[str, str], source: str) -> None:
    """Point the hosts named in ``expect_files`` (host name -> expectations file) at those files instead of the
    cluster file."""
    for name, path in expect_files.items():
        host = inventory.get_host(name, None)
        if host is None:
            raise GpuProvisionError(f"--expect {name}=...: no host {name!r} in {source}")
        host.data.gpu_provision_verify_expect = os.path.abspath(path)


def verify_host(reached: Reached, remote_dir: str | None = None, report_dir: str | None = None,
                keep: bool = False) -> dict[str, Any] | None:
    """Run the agent on one reached host; its report, or None for a host the cluster file gives no GPUs.

    ``remote_dir`` is the node's agent cache (default :data:`gpu_provision.verify.agent.AGENT_CACHE`); ``keep``
    leaves the run's expectations and report there; ``report_dir`` also saves the report on the controller.
    """
    from gpu_provision.verify.expect import expectations_for_host

    host = reached.host
    expectations = expectations_for_host(host)
    if expectations is None:
        return None
    cache_dir = remote_dir or host.data.get("gpu_provision_verify_dir") or agent.AGENT_CACHE
    ran = _run(reached, agent.run_command(expectations, keep, cache_dir))
    if ran.succeeded and agent.is_miss(ran.stdout):
        script, data = agent.install_command(cache_dir)
        installed = _run(reached, script, stdin=data)
        ran = _run(reached, agent.run_command(expectations, keep, cache_dir)) if installed.succeeded else installed
        if ran.succeeded and agent.is_miss(ran.stdout):
            ran.stdout = ""
            ran.stderr_lines = [f"the agent was installed but {cache_dir} is not root's alone (mode 0700)"]
            ran.succeeded = False
    report = report_from_run(host.name, ran)
    if report_dir:
        os.makedirs(report_dir, exist_ok=True)
        with open(os.path.join(report_dir, f"{host.name}.json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    return report


def _run(reached: Reached, command: str, stdin: str | None = None) -> AgentRun:
    """Run ``command`` on the host with its connector arguments from the inventory (``_sudo``, ``_timeout``,
    ...) and ``stdin``, as an operation would; what it printed, as an :class:`AgentRun`."""
    host = reached.host
    arguments = {k: v for k, v in connector_arguments(reached.state, host, None).items() if k != "_stdin"}
    ran = AgentRun()
    ran.record(run_on_host(host, command, arguments, stdin=stdin))
    return ran


def host_report(result: HostResult[dict[str, Any] | None]) -> dict[str, Any] | None:
    """A host's report from its fleet result: the agent's, an error report for an unreached host, or None for
    a host without GPUs."""
    if result.unreached is not None:
        return error_report(result.name, result.unreached)
    return result.value


def run(inventory: str, settings: FleetSettings | None = None, expect_files: dict[str, str] | None = None,
        report_dir: str | None = None, remote_dir: str | None = None,
        progress: Progress | None = None, keep: bool = False) -> list[dict[str, Any]]:
    """Connect to the inventory's hosts, ship and run the agent on each, return their reports (sorted by node).

    A host that cannot be reached, or whose agent printed no report, gets an ``error`` report, so every GPU
    host of the run appears in the result; hosts the cluster file gives no GPUs are left out. ``keep`` leaves each
    run's expectations and report on the nodes (see :mod:`.agent`). ``settings``
    default to the runner's without a command timeout: the agent bounds its own checks. ``progress`` hears how
    many hosts are done and failed (unreached, or a node that did not pass) as they finish.
    """
    loaded = load_inventory(inventory)
    use_expectations(loaded, expect_files or {}, inventory)
    fleet = run_fleet(loaded, lambda reached: verify_host(reached, remote_dir, report_dir, keep),
                      settings or FleetSettings(command_timeout=None), progress=progress,
                      failed=lambda report: report is not None and report["status"] != "pass")
    reports = [r for r in map(host_report, fleet.hosts) if r is not None]
    return sorted(reports, key=lambda r: r["node"])
