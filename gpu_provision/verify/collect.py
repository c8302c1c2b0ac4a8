"""Run the ``verify`` stage on an inventory through pyinfra's Python API and gather one report per node."""

from __future__ import annotations

import logging
import os
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.verify.report import error_report


def load_inventory(inventory: str, expect_files: dict[str, str] | None = None) -> Any:
    """Build a pyinfra Inventory from an inventory file (or any inventory string pyinfra's CLI accepts).

    ``expect_files`` maps host names to expectations files, overriding the cluster file for those hosts.
    """
    from pyinfra.api import State
    from pyinfra.context import ctx_state
    from pyinfra_cli.exceptions import CliError
    from pyinfra_cli.inventory import make_inventory

    try:
        # Inventory files are executed as pyinfra's CLI does, which needs a current state.
        with ctx_state.use(State(check_for_changes=False)):
            loaded = make_inventory(inventory, cwd=os.getcwd())
    except (CliError, OSError, SystemExit) as exc:
        raise GpuProvisionError(f"cannot load inventory {inventory}: {exc}") from None
    for name, path in (expect_files or {}).items():
        host = loaded.get_host(name, None)
        if host is None:
            raise GpuProvisionError(f"--expect {name}=...: no host {name!r} in {inventory}")
        host.data.gpu_provision_verify_expect = os.path.abspath(path)
    return loaded


def run(inventory: str, limit: list[str] | None = None, expect_files: dict[str, str] | None = None,
        report_dir: str | None = None, parallel: int | None = None,
        remote_dir: str | None = None) -> list[dict[str, Any]]:
    """Connect to the inventory's hosts, ship and run the agent on each, return their reports (sorted by node).

    A host that cannot be reached, or whose agent printed no report, gets an ``error`` report, so every GPU
    host of the run appears in the result; hosts the cluster file gives no GPUs are left out.
    """
    import pyinfra
    from pyinfra.api import Config, State
    from pyinfra.api.connect import connect_all, disconnect_all
    from pyinfra.api.deploy import add_deploy
    from pyinfra.api.exceptions import PyinfraError
    from pyinfra.api.operations import run_ops

    from gpu_provision.stages import verify as stage

    loaded = load_inventory(inventory, expect_files)
    hosts = list(loaded)
    if limit:
        hosts = [h for h in hosts if h.name in set(limit)]
        unknown = sorted(set(limit) - {h.name for h in hosts})
        if unknown:
            raise GpuProvisionError(f"--limit: no host {', '.join(unknown)} in {inventory}")
    if not hosts:
        raise GpuProvisionError(f"no hosts to verify in {inventory}")
    # Every node is judged on its own report: a failed node must not stop the others.
    config = Config(FAIL_PERCENT=100, PARALLEL=parallel or 0)
    state = State(check_for_changes=False)
    state.init(loaded, config, initial_limit=hosts)
    logging.getLogger("pyinfra").setLevel(logging.WARNING)
    pyinfra.is_cli = False
    stage.REPORTS.clear()
    unreachable: set[str] = set()
    try:
        try:
            connect_all(state)
        finally:
            unreachable = {h.name for h in state.failed_hosts}
        add_deploy(state, stage.verify, remote_dir=remote_dir, report_dir=report_dir)
        run_ops(state)
    except PyinfraError:
        pass  # "No hosts remaining!" once every node failed; the reports below say why
    finally:
        disconnect_all(state)
    reports = []
    for host in hosts:
        report = stage.REPORTS.get(host.name)
        if report is not None:
            reports.append(report)
        elif host.name in unreachable:
            reports.append(error_report(host.name, "host not reachable"))
        elif host in state.failed_hosts:
            reports.append(error_report(host.name, "an operation before the agent failed (see the log)"))
        # Otherwise the stage skipped the host: the cluster file gives it no GPUs.
    return sorted(reports, key=lambda r: r["node"])
