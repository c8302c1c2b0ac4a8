"""``verify`` stage: ship the verification agent and its expectations, run it, judge the node by its report.

Running the agent is a check, not a change (:func:`gpu_provision.operations.verify.agent_report`): on a converged node
this stage plans and runs with no change. The report is kept in the :class:`~gpu_provision.operations.verify.AgentRun`
the stage returns, read by value once it ran: by the judgement that fails the node and by the fleet table under
``pyinfra``, and by :mod:`gpu_provision.verify.collect` under ``gpu-provision verify``.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import pyinfra
from pyinfra import host, state
from pyinfra.api import deploy
from pyinfra.api.state import BaseStateCallback
from pyinfra.operations import files

from gpu_provision import bundle
from gpu_provision.desired import FileWant
from gpu_provision.operations import files as node_files
from gpu_provision.operations import verify as verification
from gpu_provision.verify import agent
from gpu_provision.verify.agentrun import AgentRun
from gpu_provision.verify.expect import expectations_for_host
from gpu_provision.verify.report import report_from_run
from gpu_provision.verify.table import format_table, terminal_width

#: How many failed checks the log line names before it points at the report for the rest.
NAMED_FAILURES = 5


def judge_report(target: Any, ran: AgentRun, report_dir: str | None = None) -> bool:
    """Read the report the agent run printed; save it under ``report_dir``; log one line; True when the node
    passed (no failed check, a usable report).

    The line of a node that did not pass names its failed checks with their reasons (the first
    :data:`NAMED_FAILURES`, then how many more and where the report is), or the agent's error: under the pyinfra
    CLI it is the one message a failed verification gets (see :func:`gpu_provision.operations.verify.fail_host`).
    """
    report = report_from_run(target.name, ran)
    saved = None
    if report_dir:
        os.makedirs(report_dir, exist_ok=True)
        saved = os.path.join(report_dir, f"{target.name}.json")
        with open(saved, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    summary = report["summary"]
    failed = [c for c in report["checks"] if c["status"] == "fail"]
    line = (f"verify {report['status']}: {summary['pass']} passed, {summary['fail']} failed, "
            f"{summary['skip']} skipped in {report['wall_s']:.1f}s")
    if report.get("error"):
        line += f"; {report['error']}"
    if failed:
        named = "; ".join(f"{c['id']}: {c['reason']}" for c in failed[:NAMED_FAILURES])
        line += f"; failed checks: {named}"
        if len(failed) > NAMED_FAILURES:
            line += f"; and {len(failed) - NAMED_FAILURES} more"
    if report["status"] != "pass" and saved:
        line += f" (report: {saved})"
    target.log_styled(line, fg="green" if report["status"] == "pass" else "red")
    return bool(report["status"] == "pass")


class FleetTable(BaseStateCallback):
    """Prints the fleet table once the last host's agent run is done (pyinfra CLI runs only; ``gpu-provision
    verify`` prints its own from the reports the fleet runner returns).

    It prints from the per-host callbacks, once every judged host's run is complete. The reports are read from
    each host's :class:`AgentRun`. The table goes to stderr with the rest of pyinfra's human-readable output, so
    that ``pyinfra --json`` keeps stdout for its JSON alone.
    """

    def __init__(self, op_hash: str):
        self.op_hash = op_hash
        self.runs: dict[str, AgentRun] = {}
        self.printed = False

    def operation_host_success(self, state: Any, host: Any, op_hash: str,  # type: ignore[override]
                               retry_count: int = 0) -> None:
        """A host passed its verification: print the table if it was the last one."""
        self._judged(state, host, op_hash)

    def operation_host_error(self, state: Any, host: Any, op_hash: str,  # type: ignore[override]
                             retry_count: int = 0, max_retries: int = 0) -> None:
        """A host failed its verification: print the table if it was the last one."""
        self._judged(state, host, op_hash)

    def _judged(self, state: Any, host: Any, op_hash: str) -> None:
        if op_hash != self.op_hash or self.printed:
            return
        judged = [h for h in state.inventory if self.op_hash in state.ops.get(h, {})]
        if any(h is not host and h in state.active_hosts
               and not state.ops[h][self.op_hash].operation_meta.is_complete() for h in judged):
            return
        self.printed = True
        runs = [(h.name, self.runs[h.name]) for h in judged if h.name in self.runs]
        reports = [report_from_run(name, ran) for name, ran in runs if ran.is_complete()]
        print("\n" + format_table(reports, terminal_width()) + "\n", file=sys.stderr, flush=True)


def _print_table_at_end(op_hash: str, ran: AgentRun) -> None:
    if not pyinfra.is_cli:
        return
    table = next((h for h in state.callback_handlers if isinstance(h, FleetTable)), None)
    if table is None:
        table = FleetTable(op_hash)
        state.add_callback_handler(table)
    table.runs[host.name] = ran


@deploy("Verify GPU node")
def verify(remote_dir: str | None = None, report_dir: str | None = None,
           fail_node: bool = True) -> AgentRun | None:
    """Keep the agent on the node, run it on this node's expectations, fail the node if any check failed.

    + remote_dir: the root-only directory where the node keeps the agent by digest and runs it (default: host data
      ``gpu_provision_verify_dir``, else ``/var/lib/gpu-provision/agent``, as ``gpu-provision verify``)
    + report_dir: controller directory to write ``<host>.json`` reports into (None: keep them in memory only)
    + fail_node: fail the node when its report is not a pass (False: the caller judges by the report, as
      ``gpu-provision verify`` does, so a failing node is a table row and not also a pyinfra error)

    Returns the agent run (None for a node without GPUs), whose report
    :func:`gpu_provision.verify.report.report_from_run` reads once it ran. The agent run never counts as a change.

    Example (last stage of ``deploys/gpu_node.py``): ``verify(report_dir="reports/verify")``.
    """
    expectations = expectations_for_host(host)
    if expectations is None:
        host.noop("the cluster file gives this node no GPUs: nothing to verify")
        return None
    # The agent lives where `gpu-provision verify` keeps it: by digest in a root-only directory, written atomically
    # (a same-directory temporary, renamed; pyinfra's own upload writes in place, or with sudo through a predictable
    # /tmp name and cp). The expectations travel in the command and live in a private run directory that the run
    # removes, so nothing of a run stays on the node.
    cache_dir = remote_dir or host.data.get("gpu_provision_verify_dir") or agent.AGENT_CACHE
    agent_path = f"{cache_dir}/{agent.agent_digest()}.pyz"
    files.directory(name="Verification agent directory", path=cache_dir, mode="0700", user="root",
                    group="root")
    node_files.wants(name="Verification agent", wants=[
        FileWant(agent_path, content=bundle.build(), mode="0600", backup=False)])
    ran = AgentRun()

    def judge(target: Any, run: AgentRun) -> bool:
        passed = judge_report(target, run, report_dir)
        return passed or not fail_node

    op = verification.agent_report(name="Run verification agent", agent_path=agent_path, expect_path="-", ran=ran,
                                   judge=judge, command=agent.run_command(expectations, cache_dir=cache_dir))
    _print_table_at_end(op._hash, ran)
    return ran
