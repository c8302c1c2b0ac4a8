"""The verification agent run: an operation, because the agent starts containers and pods on the node.

Its report is the operation's output: once the operation has run, :func:`gpu_provision.verify.report.report_from_run`
reads the report from its stdout, so the report travels back by value (to ``gpu-provision verify`` through the fleet
runner, to the stage's judgement and fleet table under ``pyinfra``).
"""

from __future__ import annotations

import shlex
from collections.abc import Generator

from pyinfra.api import operation

from gpu_provision import bundle

#: What the command prints when no agent ran at all (it still succeeds, so the report says why).
NOT_RUN = "verification agent did not run (is python3 installed?)"


def agent_command(agent_path: str, expect_path: str) -> str:
    """The shell command that runs the agent (the node bundle's ``verify`` entry) on an expectations file and
    prints its report.

    The agent's exit status (1 when a check failed, 2 when the agent itself failed) is carried by the report's
    ``status``, so the command succeeds whenever a report was printed; anything else prints :data:`NOT_RUN`.
    """
    return (bundle.command("verify", "--expect", expect_path, bundle=agent_path)
            + f" || test $? -le 2 || echo {shlex.quote(NOT_RUN)}")


@operation(is_idempotent=False)
def agent_report(agent_path: str, expect_path: str) -> Generator[str, None, None]:
    """Run the verification agent; the operation's stdout is the node's report (schema ``verify-report.v1``).

    + agent_path: the node bundle on the node
    + expect_path: the node's expectations file on the node

    Always runs (a verification is a measurement, never "already done"). The operation succeeds whenever the agent
    printed a report, failing checks included: judge the node by the report.

    .. code:: python

        ran = verify.agent_report(agent_path="/usr/local/lib/gpu-provision/gpu-provision-node.pyz",
                                  expect_path="/var/lib/gpu-provision/verify/expect.json")
        # after execution: report_from_run(host.name, ran)
    """
    yield agent_command(agent_path, expect_path)
