"""Check results and the per-node report document (schema ``verify-report.v1``).

A check is recorded with its measured and expected values and how long it took. ``Recorder.run`` turns an
exception inside a check into a failed check carrying the exception's text, so one broken reading never hides
the rest of the report.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time: each import is paid on every node, every run
    from typing import Any, Callable

SCHEMA_VERSION = "verify-report.v1"

PASS = "pass"
FAIL = "fail"
SKIP = "skip"


class Check:
    """One verification result: id (dotted), subject, status, measured and expected values, reason, duration.

    A plain class rather than a dataclass: importing ``dataclasses`` (and ``inspect`` with it) cost each run on
    each node more than all of its checks.
    """

    __slots__ = FIELDS = ("id", "status", "measured", "expected", "reason", "gpu", "mig_uuid", "duration_s")

    def __init__(self, id: str, status: str, measured: Any = None, expected: Any = None, reason: str = "",
                 gpu: int | None = None, mig_uuid: str | None = None, duration_s: float = 0.0) -> None:
        self.id = id
        self.status = status
        self.measured = measured
        self.expected = expected
        self.reason = reason
        self.gpu = gpu
        self.mig_uuid = mig_uuid
        self.duration_s = duration_s

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.FIELDS)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and self._values() == other._values()  # type: ignore[attr-defined]

    __hash__ = None  # type: ignore[assignment]  # mutable (the recorder sets the duration), as a dataclass is

    def __repr__(self) -> str:
        return "Check(" + ", ".join(f"{name}={value!r}" for name, value in zip(self.FIELDS, self._values())) + ")"

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON-ready form used in reports."""
        data = dict(zip(self.FIELDS, self._values()))
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
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z"


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
