"""``gpu-provision verify`` over SSH: the ``verify`` stage on every host through the fleet runner, one report each.

Each reached host runs the stage's operations (uploads, the agent run) and its report is read from the agent
run the stage returns, by value. A host the runner could not reach gets an ``error`` report
with the runner's reason, worded as ``gpu-provision drift`` words it.
"""

from __future__ import annotations

import os
from typing import Any

from pyinfra.api import Inventory

from gpu_provision.errors import GpuProvisionError
from gpu_provision.fleet import FleetSettings, HostResult, Progress, Reached, load_inventory, run_fleet
from gpu_provision.verify.report import error_report, report_from_run


def use_expectations(inventory: Inventory, expect_files: dict[str, str], source: str) -> None:
    """Point the hosts named in ``expect_files`` (host name -> expectations file) at those files instead of the
    cluster file."""
    for name, path in expect_files.items():
        host = inventory.get_host(name, None)
        if host is None:
            raise GpuProvisionError(f"--expect {name}=...: no host {name!r} in {source}")
        host.data.gpu_provision_verify_expect = os.path.abspath(path)


def verify_host(reached: Reached, remote_dir: str | None = None,
                report_dir: str | None = None) -> dict[str, Any] | None:
    """Run the ``verify`` stage on one reached host; its report, or None for a host the cluster file gives no
    GPUs."""
    from gpu_provision.stages.verify import verify

    # The command judges the node by its report: a failing node is a row of the table, not a pyinfra error too.
    ran, _ = reached.apply(verify, remote_dir=remote_dir, report_dir=report_dir, fail_node=False)
    return None if ran is None else report_from_run(reached.host.name, ran)


def host_report(result: HostResult[dict[str, Any] | None]) -> dict[str, Any] | None:
    """A host's report from its fleet result: the agent's, an error report for an unreached host, or None for
    a host without GPUs."""
    if result.unreached is not None:
        return error_report(result.name, result.unreached)
    return result.value


def run(inventory: str, settings: FleetSettings | None = None, expect_files: dict[str, str] | None = None,
        report_dir: str | None = None, remote_dir: str | None = None,
        progress: Progress | None = None) -> list[dict[str, Any]]:
    """Connect to the inventory's hosts, ship and run the agent on each, return their reports (sorted by node).

    A host that cannot be reached, or whose agent printed no report, gets an ``error`` report, so every GPU
    host of the run appears in the result; hosts the cluster file gives no GPUs are left out. ``settings``
    default to the runner's without a command timeout: the agent bounds its own checks. ``progress`` hears how
    many hosts are done and failed (unreached, or a node that did not pass) as they finish.
    """
    loaded = load_inventory(inventory)
    use_expectations(loaded, expect_files or {}, inventory)
    fleet = run_fleet(loaded, lambda reached: verify_host(reached, remote_dir, report_dir),
                      settings or FleetSettings(command_timeout=None), progress=progress,
                      failed=lambda report: report is not None and report["status"] != "pass")
    reports = [r for r in map(host_report, fleet.hosts) if r is not None]
    return sorted(reports, key=lambda r: r["node"])
