"""The fleet table: one aligned plain-text line per node, failures first in the operator's eye."""

from __future__ import annotations

import shutil
from typing import Any

from gpu_provision.verify.report import NodeRow, row

HEADERS = ("NODE", "STATUS", "GPUS", "PASS", "FAIL", "SKIP", "TIME", "FIRST FAILURE")

#: The width a table gets when the output is not a terminal (a file or a pipe keeps the whole reason).
UNBOUNDED_WIDTH = 160


def terminal_width() -> int:
    """The terminal's width in columns (``COLUMNS`` when set), or :data:`UNBOUNDED_WIDTH` off a terminal."""
    return shutil.get_terminal_size((UNBOUNDED_WIDTH, 24)).columns


def _gpus(r: NodeRow) -> str:
    expected = "?" if r.gpus_expected is None else str(r.gpus_expected)
    found = "?" if r.gpus_found is None else str(r.gpus_found)
    return f"{found}/{expected}"


def format_table(reports: list[dict[str, Any]], width: int = UNBOUNDED_WIDTH) -> str:
    """Render the reports as a table; GPUS is found/expected, the reason is cut so each line fits ``width``
    (kept at 20 characters at least, so a very narrow terminal still sees what failed)."""
    rows = [row(r) for r in sorted(reports, key=lambda r: r["node"])]
    cells = [HEADERS] + [(r.node, r.status.upper(), _gpus(r), str(r.passed), str(r.failed), str(r.skipped),
                          f"{r.wall_s:.1f}s", r.first_failure or "-") for r in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(HEADERS) - 1)]
    lines = []
    for line in cells:
        left = "  ".join(value.ljust(widths[i]) if i == 0 else value.rjust(widths[i]) if i >= 2 else
                         value.ljust(widths[i]) for i, value in enumerate(line[:-1]))
        room = max(width - len(left) - 2, 20)
        reason = line[-1] if len(line[-1]) <= room else line[-1][: room - 3] + "..."
        lines.append(f"{left}  {reason}".rstrip())
    total = len(rows)
    bad = sum(1 for r in rows if r.status != "pass")
    lines.append("")
    lines.append(f"{total - bad} of {total} node(s) passed" + (f", {bad} failed" if bad else ""))
    return "\n".join(lines)
