"""Check results and the per-node report document (schema ``verify-report.v1``).

A check is recorded with its measured and expected values and how long it took. ``Recorder.run`` turns an
exception inside a check into a failed check carrying the exception's text, so one broken reading never hides
the rest of the report.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable

SCHEMA_VERSION = "verify-report.v1"

PASS = "pass"
FAIL = "fail"
SKIP = "skip"


@dataclass
class Check:
    """One verification result: id (dotted), subject, status, measured and expected values, reason, duration."""

    id: str
    status: str
    measured: Any = None
    expected: Any = None
    reason: str = ""
    gpu: int | None = None
    mig_uuid: str | None = None
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form used in reports."""
        data = asdict(self)
        data["duration_s"] = round(self.duration_s, 4)
        return data


def passed(id: str, measured: Any, expected: Any, reason: str = "", **subject: Any) -> Check:
    """Build a passed check."""
    return Check(id=id, status=PASS, measured=measured, expected=expected, reason=reason, **subject)


def failed(id: str, measured: Any, expected: Any, reason: str, **subject: Any) -> Check:
    """Build a failed check; ``reason`` says what is wrong in words an operator can act on."""
    return Check(id=id, status=FAIL, measured=measured, expected=expected, reason=reason, **subject)


def skipped(id: str, reason: str, expected: Any = None, **subject: Any) -> Check:
    """Build a skipped check; ``reason`` says why it could not run."""
    return Check(id=id, status=SKIP, expected=expected, reason=reason, **subject)


def judge(id: str, ok: bool, measured: Any, expected: Any, reason_if_failed: str, **subject: Any) -> Check:
    """Pass when ``ok`` holds, else fail with ``reason_if_failed``."""
    if ok:
        return passed(id, measured, expected, **subject)
    return failed(id, measured, expected, reason_if_failed, **subject)


class Recorder:
    """Collects checks in order and times each group of checks produced by one callable."""

    def __init__(self) -> None:
        self.checks: list[Check] = []

    def add(self, check: Check) -> None:
        """Append one check as it is."""
        self.checks.append(check)

    def run(self, id: str, func: Callable[[], Check | list[Check]], **subject: Any) -> None:
        """Run ``func``; its checks get the elapsed time split among them, an exception becomes a failed check."""
        start = time.perf_counter()
        try:
            result = func()
        except Exception as exc:
            result = failed(id, None, None, f"check raised {type(exc).__name__}: {exc}", **subject)
        elapsed = time.perf_counter() - start
        produced = result if isinstance(result, list) else [result]
        for check in produced:
            if not check.duration_s:
                check.duration_s = elapsed / max(len(produced), 1)
            self.checks.append(check)


def summarize(checks: list[Check]) -> dict[str, int]:
    """Count checks per status."""
    counts = {PASS: 0, FAIL: 0, SKIP: 0, "total": len(checks)}
    for check in checks:
        counts[check.status] += 1
    return counts


def first_failure(checks: list[Check]) -> Check | None:
    """Return the first failed check, the one a fleet table shows."""
    return next((c for c in checks if c.status == FAIL), None)


def utc_now() -> str:
    """Return the current time as an ISO 8601 UTC timestamp."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_report(node: str, agent_version: str, started: str, wall_s: float, host: dict[str, Any],
                 checks: list[Check], error: str | None = None) -> dict[str, Any]:
    """Assemble the report document for one node."""
    counts = summarize(checks)
    status = "error" if error else (FAIL if counts[FAIL] else PASS)
    return {
        "schema": SCHEMA_VERSION,
        "node": node,
        "agent_version": agent_version,
        "started": started,
        "finished": utc_now(),
        "wall_s": round(wall_s, 3),
        "status": status,
        "error": error,
        "host": host,
        "summary": counts,
        "checks": [c.to_dict() for c in checks],
    }
