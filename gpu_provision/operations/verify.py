"""The verification agent run: an operation that checks and never counts as a change.

The agent is a measurement, so a converged node must plan and run with no change at all (``--dry`` lists nothing,
the results table shows "No Change"). The operation therefore yields no command for pyinfra to count: when the
deploy executes, it runs the agent itself through the host's connector, with the operation's own connector arguments
(``_sudo`` and the rest, so a non-root login still runs it as root), and keeps what the agent printed in an
:class:`AgentRun` the caller holds. A node whose report is judged bad is marked failed (:func:`fail_host`), not
through a failing command: pyinfra would report that as "Error: executed 0 commands" and,
once no node is left, "No hosts remaining!", which read as a crash for what is a finding the judge has already named.
The report travels back by value in that :class:`AgentRun`: :func:`gpu_provision.verify.report.report_from_run`
reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from pyinfra.api import operation

from gpu_provision import bundle
from gpu_provision.operations.commands import this_host
from gpu_provision.operations.remote import run_on_host
from gpu_provision.verify.agentrun import AgentRun


def agent_command(agent_path: str, expect_path: str) -> str:
    """The shell command that runs the agent (the node bundle's ``verify`` entry) on an expectations file and
    prints its report.

    The agent's exit status (1 when a check failed, 2 when the agent itself failed) is carried by the report's
    ``status``, so the command succeeds whenever a report was printed. Any other status (127: no ``python3``)
    is the command's own, so the run's failure names the command, that status and its last lines.
    """
    return (bundle.command("verify", "--expect", expect_path, bundle=agent_path)
            + ' || { s=$?; [ "$s" -le 2 ] || exit "$s"; }')


def run_agent(host: Any, command: str, ran: AgentRun) -> None:
    """Run ``command`` on ``host`` with the executing operation's connector arguments and record it in ``ran``."""
    ran.record(run_on_host(host, command, print_output=host.state.print_output, print_input=host.state.print_input))


def fail_host(host: Any) -> None:
    """Mark ``host`` failed for the run without failing the operation that found it bad.

    pyinfra's CLI exits 1 whenever ``state.failed_hosts`` is not empty, and its ``--json`` output lists the host
    under ``failed_hosts``; the judge has logged which checks failed, so pyinfra adds no error line of its own. The
    host stays active: what follows verification still runs there (the deploy's release of the node's run lock,
    which a host taken out of the run would keep until it is stale).
    """
    host.state.failed_hosts.add(host)


@operation(is_idempotent=False)
def agent_report(agent_path: str, expect_path: str, ran: AgentRun,
                 judge: Callable[[Any, AgentRun], bool] | None = None,
                 command: str | None = None) -> Generator[Any, None, None]:
    """Run the verification agent as a check: the report lands in ``ran``; nothing counts as a change.

    + agent_path: the node bundle on the node
    + expect_path: the node's expectations file on the node
    + ran: where the run's output is kept (schema ``verify-report.v1`` on stdout), read once the deploy executed
    + judge: called with the host and ``ran`` after the run; when it returns False the node is marked failed
      (:func:`fail_host`: the run's exit status is 1; None: never)
    + command: the shell command that runs the agent and prints its report, instead of running ``agent_path`` on
      ``expect_path`` (the verify stage passes the short command of the agent kept by digest,
      :func:`gpu_provision.verify.agent.run_command`, which carries the expectations itself)

    Runs on every execution (a verification is a measurement, never "already done") and never in a plan
    (``--dry`` runs nothing on nodes). The agent runs with this operation's connector arguments (``_sudo``,
    ``_timeout``, ...).

    .. code:: python

        ran = AgentRun()
        verify.agent_report(name="Verification agent", agent_path="/usr/local/lib/gpu-provision/gpu-provision-node.pyz",
                            expect_path="/var/lib/gpu-provision/verify/expect.json", ran=ran)
        # after execution: report_from_run(host.name, ran)
    """
    host = this_host()
    if host.executing_op_hash is None:  # planning: a check plans no change
        return
    run_agent(host, command or agent_command(agent_path, expect_path), ran)
    if judge is not None and not judge(host, ran):
        fail_host(host)
    yield from ()
