"""A fleet's drift report: per node, what differs (expected vs actual) or why it was not checked.

Exit status follows ``diff(1)``: 0 every node checked and in sync, 1 drift found, 2 trouble (a node could not be
checked or a part of it could not be compared), whatever else was found.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_provision.desired import Difference
from gpu_provision.diff import difference_lines, plain

EXIT_IN_SYNC = 0
EXIT_DRIFT = 1
EXIT_ERROR = 2

REPORT_VERSION = "gpu-provision.drift/v1"

Status = Literal["in-sync", "drift", "not-checked", "error"]


@dataclass
class NodeReport:
    """One node's outcome.

    ``not-checked``: the node was never compared (unreachable, login refused, probe failed or timed out);
    ``error``: it was compared but some part could not be (a stage or probe section failed), so its
    differences may be incomplete.
    """

    name: str
    address: str
    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Unified diffs (secrets hidden) of differing files' content, by path.
    diffs: dict[str, str] = field(default_factory=dict)
    checked: bool = True
    #: Remote commands this check ran on the node.
    commands: int = 0
    seconds: float = 0.0

    @property
    def status(self) -> Status:
        """``in-sync``, ``drift``, ``not-checked`` or ``error``."""
        if not self.checked:
            return "not-checked"
        if self.problems:
            return "error"
        return "drift" if self.differences else "in-sync"

    def to_json(self) -> dict[str, Any]:
        """The node as a JSON object (see :data:`gpu_provision.drift.schema.REPORT_SCHEMA`)."""
        return {
            "name": self.name,
            "address": self.address,
            "status": self.status,
            "differences": [
                {"stage": d.stage, "kind": d.kind, "item": d.item, "expected": plain(d.expected),
                 "actual": plain(d.actual), **({"file": d.source} if d.source else {}), **self.diff_of(d)}
                for d in self.differences
            ],
            "problems": list(self.problems),
            "commands": self.commands,
            "seconds": round(self.seconds, 3),
        }


    def diff_of(self, difference: Difference) -> dict[str, str]:
        """``{"diff": ...}`` for a file whose content differs and can be shown, else nothing."""
        text = self.diffs.get(difference.item) if difference.kind == "file" else None
        return {"diff": text} if text else {}


def _gpu_index(item: str) -> int | None:
    head, _, index = item.partition(" ")
    return int(index) if head == "GPU" and index.isdigit() else None


def _collapsed(differences: list[Difference]) -> list[tuple[Difference, str]]:
    """Each difference with the item to print; consecutive GPUs that differ alike share a line (``GPU 0-7``)."""
    out: list[tuple[Difference, str]] = []
    run: list[Difference] = []

    def flush() -> None:
        if run:
            first, last = run[0], run[-1]
            out.append((first, first.item if len(run) == 1 else f"{first.item}-{_gpu_index(last.item)}"))
            run.clear()

    for diff in differences:
        index = _gpu_index(diff.item)
        previous = _gpu_index(run[-1].item) if run else None
        alike = (diff.stage, diff.kind, diff.expected, diff.actual) == (
            (run[0].stage, run[0].kind, run[0].expected, run[0].actual) if run else None)
        if run and not (alike and index is not None and previous is not None and index == previous + 1):
            flush()
        if index is None:
            out.append((diff, diff.item))
        else:
            run.append(diff)
    flush()
    return out


@dataclass
class FleetReport:
    """Every node's outcome, in inventory order, with the stages compared and the run's own figures."""

    nodes: list[NodeReport]
    stages: list[str]
    seconds: float = 0.0
    parallel: int = 0
    connect_timeout: float = 0.0

    def counts(self) -> dict[str, int]:
        """Number of nodes per status."""
        out = {"in-sync": 0, "drift": 0, "not-checked": 0, "error": 0}
        for node in self.nodes:
            out[node.status] += 1
        return out

    @property
    def exit_status(self) -> int:
        """0 in sync, 1 drift, 2 trouble (some node not checked or not fully compared)."""
        counts = self.counts()
        if counts["not-checked"] or counts["error"]:
            return EXIT_ERROR
        return EXIT_DRIFT if counts["drift"] else EXIT_IN_SYNC

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON object."""
        return {
            "version": REPORT_VERSION,
            "stages": list(self.stages),
            "summary": {**self.counts(), "nodes": len(self.nodes),
                        "differences": sum(len(n.differences) for n in self.nodes)},
            "exit_status": self.exit_status,
            "seconds": round(self.seconds, 3),
            "parallel": self.parallel,
            "connect_timeout": self.connect_timeout,
            "nodes": [n.to_json() for n in self.nodes],
        }

    def render(self) -> str:
        """The report as text: one block per node, differences as ``stage kind item: expected X, found Y``, a
        file's differing content as a unified diff under its line."""
        lines = []
        width = max((len(n.name) for n in self.nodes), default=4)
        for node in self.nodes:
            cost = f"{node.commands} command{'s' if node.commands != 1 else ''}, {node.seconds:.2f} s"
            if node.status == "not-checked":
                lines.append(f"{node.name:<{width}}  not checked: {'; '.join(node.problems)}")
                continue
            head = {"in-sync": "in sync", "drift": f"drift ({len(node.differences)})",
                    "error": f"incomplete ({len(node.differences)} differences)"}[node.status]
            lines.append(f"{node.name:<{width}}  {head}  [{cost}]")
            for diff, item in _collapsed(node.differences):
                where = f"{diff.stage}: " if diff.stage else ""
                head, *content = difference_lines(diff, node.diff_of(diff).get("diff"), item)
                lines.append(f"  {where}{head}")
                lines.extend(f"  {line}" for line in content)
            lines.extend(f"  problem: {p}" for p in node.problems)
        counts = self.counts()
        parts = [f"{counts['in-sync']} in sync", f"{counts['drift']} with drift"]
        if counts["error"]:
            parts.append(f"{counts['error']} incomplete")
        if counts["not-checked"]:
            parts.append(f"{counts['not-checked']} not checked")
        lines.append(f"{len(self.nodes)} node{'s' if len(self.nodes) != 1 else ''}: {', '.join(parts)} "
                     f"({self.seconds:.2f} s)")
        return "\n".join(lines)
