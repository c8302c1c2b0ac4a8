"""``VerifyReport``: run the verification agent on a node and return its JSON report."""

from __future__ import annotations

from typing import Any

from pyinfra.api import FactBase

from gpu_provision import bundle
from gpu_provision.verify.report import error_report, parse_report


class VerifyReport(FactBase):
    """The node's verification report (schema ``verify-report.v1``) from the shipped agent.

    The agent's exit status (1 when a check failed) is carried by the report's ``status``, so the command always
    succeeds and a node with failures still returns its report. Output that is not a valid report becomes an
    ``error`` report saying why.

    .. code:: python

        {"schema": "verify-report.v1", "node": "gpu-01", "status": "pass", "wall_s": 1.35,
         "summary": {"pass": 17, "fail": 0, "skip": 4, "total": 21},
         "checks": [{"id": "gpu0.cuda.vector_add", "status": "pass", ...}, ...], ...}
    """

    def command(self, agent_path: str, expect_path: str, node: str = "") -> str:  # type: ignore[override]
        """Run the agent on the expectations file; ``node`` names error reports made on the controller."""
        self._node = node
        # Exit 1 (a check failed) and 2 (agent error) still print a report; anything else means no agent ran.
        return (bundle.command("verify", "--expect", expect_path, bundle=agent_path) +
                " || test $? -le 2 || echo 'verification agent did not run (is python3 installed?)'")

    def default(self) -> dict[str, Any]:  # type: ignore[override]
        """An error report: the command succeeded but printed nothing."""
        return error_report(getattr(self, "_node", "") or "unknown", "the verification agent printed nothing")

    def process(self, output: list[str]) -> dict[str, Any]:  # type: ignore[override]
        """The parsed, schema-checked report (an error report when the output is not one)."""
        return parse_report(getattr(self, "_node", "") or "unknown", "\n".join(output))
