"""Reading agent reports on the controller: parse, validate against the JSON Schema, summarize for the table."""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from typing import Any

from gpu_provision.spec.accept import acceptor
from gpu_provision.spec.schema import load_schema

SCHEMA_FILE = "verify-report.v1.schema.json"


def schema() -> dict[str, Any]:
    """The report's JSON Schema (``gpu_provision/schemas/verify-report.v1.schema.json``), read from the package."""
    return load_schema(SCHEMA_FILE)


def schema_problems(report: Any) -> list[str]:
    """Every way ``report`` breaks the schema, as ``path: message`` lines (empty when valid).

    A report the compiled check accepts has none; jsonschema (imported only then) finds and words the others.
    """
    if acceptor(SCHEMA_FILE)(report):
        return []
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema(), format_checker=jsonschema.FormatChecker())
    return [f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
            for error in sorted(validator.iter_errors(report), key=lambda e: list(e.absolute_path))]


def now_stamp() -> str:
    """This moment as reports write their times (UTC, milliseconds, ``Z``)."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def error_report(node: str, message: str) -> dict[str, Any]:
    """A schema-valid report for a node whose agent produced no usable report (status ``error``)."""
    now = now_stamp()
    return {"schema": "verify-report.v1", "node": node, "agent_version": "unknown", "started": now,
            "finished": now, "wall_s": 0.0, "status": "error", "error": message, "host": {},
            "summary": {"pass": 0, "fail": 0, "skip": 0, "total": 0}, "checks": []}


def parse_report(node: str, text: str) -> dict[str, Any]:
    """Parse the agent's stdout; anything that is not a valid report becomes an error report saying why."""
    start = text.find("{")
    if start < 0:
        tail = text.strip().splitlines()[-1:] or ["no output"]
        return error_report(node, f"agent printed no report: {tail[0][:200]}")
    try:
        report = json.loads(text[start:])
    except ValueError as exc:
        return error_report(node, f"agent output is not JSON: {exc}")
    problems = schema_problems(report)
    if problems:
        return error_report(node, f"agent report breaks the schema: {problems[0]}")
    result: dict[str, Any] = report
    return result


NO_OUTPUT = "the verification agent printed nothing"
#: Why a node has no report when its agent run never came: an operation before it failed on that node.
NOT_RUN = ("the verification agent did not run: an operation before it failed on this node; fix that operation's "
           "error, printed under its name, and run again")


def report_from_run(node: str, ran: Any) -> dict[str, Any]:
    """The report an agent run printed, read from its operation's result (pyinfra's ``OperationMeta``) once it
    ran; an error report saying why when the run never came (an earlier operation failed), failed or printed
    nothing."""
    if not ran.is_complete():
        return error_report(node, NOT_RUN)
    if not ran.did_succeed():
        if getattr(ran, "failure", ""):
            return error_report(node, f"agent run failed: {ran.failure}")
        tail = [line for line in ran.stderr_lines if line.strip()][-1:] or ["the command failed or timed out"]
        return error_report(node, f"agent run failed: {tail[0][:200]}")
    if not ran.stdout.strip():
        return error_report(node, NO_OUTPUT)
    return parse_report(node, ran.stdout)


@dataclass(frozen=True)
class NodeRow:
    """One line of the fleet table."""

    node: str
    gpus_expected: int | None
    gpus_found: int | None
    passed: int
    failed: int
    skipped: int
    status: str
    first_failure: str
    wall_s: float


def _expected_count(report: dict[str, Any]) -> int | None:
    for check in report["checks"]:
        if check["id"] == "node.gpu.count":
            return check["expected"] if isinstance(check["expected"], int) else None
    return None


def row(report: dict[str, Any]) -> NodeRow:
    """Summarize one report for the fleet table; the first failure shows as ``id: reason``."""
    summary = report["summary"]
    first = next((c for c in report["checks"] if c["status"] == "fail"), None)
    reason = f"{first['id']}: {first['reason']}" if first else (report.get("error") or "")
    found = report.get("host", {}).get("gpus")
    return NodeRow(node=report["node"], gpus_expected=_expected_count(report),
                   gpus_found=len(found) if isinstance(found, list) else None, passed=summary["pass"],
                   failed=summary["fail"], skipped=summary["skip"], status=report["status"],
                   first_failure=reason, wall_s=float(report.get("wall_s") or 0.0))


def fleet_ok(reports: list[dict[str, Any]]) -> bool:
    """True when every node passed (no failed check, no agent error)."""
    return bool(reports) and all(r["status"] == "pass" for r in reports)


def fleet_status(reports: list[dict[str, Any]]) -> int:
    """The command's exit status: 0 every node passed, 1 a check failed, 2 a node has no usable report (not
    reached, or its agent failed), as ``drift`` counts a node it could not check."""
    if any(r["status"] == "error" for r in reports):
        return 2
    return 0 if fleet_ok(reports) else 1
