"""``verify`` stage: ship the verification agent and its expectations, run it, judge the node by its report.

The agent runs inside a ``python.call`` callback, i.e. at execution time, after the uploads before it; a fact
asked for in deploy code would run at prepare time, before the agent is on the node.
"""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import pyinfra
from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.api.state import BaseStateCallback
from pyinfra.operations import files, python

from gpu_provision import bundle
from gpu_provision.facts.verify import VerifyReport
from gpu_provision.verify.expect import expectations_for_host
from gpu_provision.verify.report import error_report
from gpu_provision.verify.table import format_table

REMOTE_DIR = "/var/lib/gpu-provision/verify"

#: Reports collected in this process, by host name (read by ``gpu-provision verify`` for its table).
REPORTS: dict[str, dict[str, Any]] = {}


def collect_report(state: Any, host: Any, agent_path: str, expect_path: str,
                   report_dir: str | None = None) -> bool:
    """Run the agent through the ``VerifyReport`` fact; keep the report; fail the host when a check failed."""
    try:
        report = host.get_fact(VerifyReport, agent_path=agent_path, expect_path=expect_path, node=host.name)
    except Exception as exc:  # an unreachable node must still appear in the fleet table
        report = error_report(host.name, f"agent run failed: {type(exc).__name__}: {exc}")
    REPORTS[host.name] = report
    if report_dir:
        os.makedirs(report_dir, exist_ok=True)
        with open(os.path.join(report_dir, f"{host.name}.json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    summary = report["summary"]
    first = next((c for c in report["checks"] if c["status"] == "fail"), None)
    line = (f"verify {report['status']}: {summary['pass']} passed, {summary['fail']} failed, "
            f"{summary['skip']} skipped in {report['wall_s']:.1f}s")
    if first or report.get("error"):
        line += f"; first failure: {first['id'] + ': ' + first['reason'] if first else report['error']}"
    host.log_styled(line, fg="green" if report["status"] == "pass" else "red")
    return bool(report["status"] == "pass")


class FleetTable(BaseStateCallback):
    """Prints the fleet table once the agent operation has finished on every host (pyinfra CLI runs only;
    ``gpu-provision verify`` prints its own)."""

    def __init__(self, op_hash: str):
        self.op_hash = op_hash

    def operation_end(self, state: Any, op_hash: str) -> None:  # type: ignore[override]
        """Print the table after the agent operation, once every host has reported."""
        if op_hash == self.op_hash and REPORTS:
            print("\n" + format_table(list(REPORTS.values())) + "\n", file=sys.stdout, flush=True)


def _print_table_at_end(op_hash: str) -> None:
    if pyinfra.is_cli and not any(isinstance(h, FleetTable) for h in state.callback_handlers):
        state.add_callback_handler(FleetTable(op_hash))


@deploy("Verify GPU node")
def verify(remote_dir: str | None = None, report_dir: str | None = None) -> None:
    """Ship the agent and this node's expectations, run the agent, fail the node if any check failed.

    + remote_dir: where the node bundle (the agent) and the expectations live on the node (default: host data
      ``gpu_provision_verify_dir``, else the bundle's one install location and ``/var/lib/gpu-provision/verify``)
    + report_dir: controller directory to write ``<host>.json`` reports into (None: keep them in memory only)

    Example (last stage of ``deploys/gpu_node.py``): ``verify(report_dir="reports/verify")``.
    """
    expectations = expectations_for_host(host)
    if expectations is None:
        host.noop("the cluster file gives this node no GPUs: nothing to verify")
        return
    chosen_dir = remote_dir or host.data.get("gpu_provision_verify_dir")
    agent_path = f"{chosen_dir}/{bundle.BUNDLE_NAME}" if chosen_dir else bundle.BUNDLE_PATH
    remote_dir = chosen_dir or REMOTE_DIR
    expect_path = f"{remote_dir}/expect.json"
    files.directory(name="Verification agent directory", path=remote_dir, mode="0755")
    files.put(name="Verification agent", src=io.BytesIO(bundle.build()), dest=agent_path, mode="0755")
    files.put(name="Verification expectations", src=io.BytesIO(expectations.encode()),
              dest=expect_path, mode="0644")
    run = python.call(name="Run verification agent", function=collect_report, agent_path=agent_path,
                      expect_path=expect_path, report_dir=report_dir)
    _print_table_at_end(run._hash)
