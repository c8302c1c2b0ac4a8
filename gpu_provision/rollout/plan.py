"""``gpu-provision rollout plan``: per node, what a rollout would change, what that disrupts, and its batch.

The changes are drift's differences (:func:`gpu_provision.drift.check_fleet`: the fleet runner, one probe per
node), each classed by :mod:`gpu_provision.rollout.disruption`; the batches come from
:func:`gpu_provision.rollout.batches.plan_batches` with the cluster file's ``rollout`` settings or the command
line's overrides. Nothing is changed.

Exit status: 0 nothing to roll, 1 changes planned, 2 a node not reached or not fully compared.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from gpu_provision.desired import Difference
from gpu_provision.drift.report import EXIT_DRIFT, EXIT_ERROR, EXIT_IN_SYNC, FleetReport, NodeReport
from gpu_provision.rollout.batches import Batch, Candidate, plan_batches
from gpu_provision.rollout.disruption import Disruption, classify, rule_for, worst
from gpu_provision.spec.model import Cluster

PLAN_VERSION = "gpu-provision.rollout-plan/v1"


@dataclass(frozen=True)
class Change:
    """One difference a rollout would close, with its disruption class and the table row's reason."""

    difference: Difference
    disruption: Disruption
    why: str

    def to_json(self) -> dict[str, Any]:
        """The change as drift words the difference, with its class."""
        d = self.difference
        return {"stage": d.stage, "kind": d.kind, "item": d.item, "expected": str(d.expected),
                "actual": str(d.actual), "disruption": self.disruption, "why": self.why}


@dataclass
class NodePlan:
    """One node's part of the plan: its changes and batch, or why it was not planned."""

    name: str
    group: str = ""
    role: str = "worker"
    changes: list[Change] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    checked: bool = True
    batch: int | None = None

    @property
    def disruption(self) -> Disruption:
        """The most disruptive class among the node's changes."""
        return worst(c.disruption for c in self.changes)

    @property
    def status(self) -> str:
        """``in-sync``, ``planned``, ``not-checked`` or ``error`` (compared in part: not planned)."""
        if not self.checked:
            return "not-checked"
        if self.problems:
            return "error"
        return "planned" if self.changes else "in-sync"

    def to_json(self) -> dict[str, Any]:
        """The node as a JSON object."""
        return {"name": self.name, "group": self.group or None, "role": self.role, "status": self.status,
                "disruption": self.disruption if self.changes else None, "batch": self.batch,
                "changes": [c.to_json() for c in self.changes], "problems": list(self.problems)}


@dataclass
class RolloutPlan:
    """The whole plan: nodes in inventory order, the batches, and the settings they were planned with."""

    nodes: list[NodePlan]
    batches: list[Batch]
    max_parallel: int
    max_unavailable: int | str
    wait_for_jobs_timeout: int = 0
    pod_selector: str | None = None
    drain_timeout: int = 0

    @property
    def exit_status(self) -> int:
        """0 nothing to roll, 1 changes planned, 2 a node not reached or not fully compared."""
        statuses = {n.status for n in self.nodes}
        if statuses & {"not-checked", "error"}:
            return EXIT_ERROR
        return EXIT_DRIFT if "planned" in statuses else EXIT_IN_SYNC

    def to_json(self) -> dict[str, Any]:
        """The plan as one JSON object."""
        counts = Counter(n.status for n in self.nodes)
        return {
            "version": PLAN_VERSION,
            "settings": {"max_parallel": self.max_parallel, "max_unavailable": self.max_unavailable,
                         "wait_for_jobs": {"timeout": self.wait_for_jobs_timeout, "pod_selector": self.pod_selector},
                         "drain": {"timeout": self.drain_timeout}},
            "summary": {status: counts.get(status, 0) for status in ("in-sync", "planned", "not-checked", "error")},
            "batches": [{"index": b.index, "disruptive": b.disruptive, "nodes": list(b.nodes)} for b in self.batches],
            "nodes": [n.to_json() for n in self.nodes],
            "exit_status": self.exit_status,
        }

    def render(self) -> str:
        """The plan as text: the batches first, then each node's changes with their classes."""
        planned = [n for n in self.nodes if n.status == "planned"]
        lines = [f"rollout plan: {len(planned)} node{'s' if len(planned) != 1 else ''} to change in "
                 f"{len(self.batches)} batch{'es' if len(self.batches) != 1 else ''} (max_parallel "
                 f"{self.max_parallel}, max_unavailable {self.max_unavailable})"]
        for batch in self.batches:
            what = "disrupts nothing, all at once" if not batch.disruptive else \
                f"{len(batch.nodes)} node{'s' if len(batch.nodes) != 1 else ''}"
            lines.append(f"  batch {batch.index} ({what}): {', '.join(batch.nodes)}")
        width = max((len(n.name) for n in self.nodes), default=4)
        for node in self.nodes:
            if node.status == "not-checked":
                lines.append(f"{node.name:<{width}}  not checked: {'; '.join(node.problems)}")
                continue
            if node.status == "in-sync":
                lines.append(f"{node.name:<{width}}  nothing to change")
                continue
            where = f"batch {node.batch}" if node.batch is not None else "not planned"
            lines.append(f"{node.name:<{width}}  {node.disruption}  {where}")
            width_class = max(len(c.disruption) for c in node.changes) if node.changes else 0
            lines.extend(f"  {c.disruption:<{width_class}}  {c.difference}" for c in node.changes)
            lines.extend(f"  problem: {p}" for p in node.problems)
        return "\n".join(lines)


def node_plan(report: NodeReport, cluster: Cluster) -> NodePlan:
    """A node's changes, classed, from its drift report (group and role from the cluster file)."""
    try:
        node = cluster.node(report.name)
        group, role = node.group or "", node.role
    except KeyError:
        group, role = "", "worker"
    changes = []
    for difference in report.differences:
        rule = rule_for(difference.kind, str(difference.item))
        changes.append(Change(difference, classify(difference), rule.why if rule else "no disruption"))
    return NodePlan(name=report.name, group=group, role=role, changes=changes, problems=list(report.problems),
                    checked=report.checked)


def plan_rollout(report: FleetReport, cluster: Cluster, max_parallel: int | None = None,
                 max_unavailable: int | str | None = None) -> RolloutPlan:
    """The rollout plan from a drift report: ``max_parallel`` and ``max_unavailable`` override the file's.

    Only nodes fully compared are batched; a node not reached or compared in part is listed with its problems
    and gets no batch. Percentages are taken of each group's size in the cluster file, whatever ``--limit`` says.
    """
    settings = cluster.rollout
    parallel = settings.max_parallel if max_parallel is None else max_parallel
    unavailable = settings.max_unavailable if max_unavailable is None else max_unavailable
    nodes = [node_plan(r, cluster) for r in report.nodes]
    sizes = Counter(n.group or "" for n in cluster.nodes)
    candidates = [Candidate(n.name, n.disruption, n.group, n.role == "control-plane")
                  for n in nodes if n.status == "planned"]
    batches = plan_batches(candidates, parallel, unavailable, sizes)
    where = {name: batch.index for batch in batches for name in batch.nodes}
    for node in nodes:
        node.batch = where.get(node.name)
    return RolloutPlan(nodes=nodes, batches=batches, max_parallel=parallel, max_unavailable=unavailable,
                       wait_for_jobs_timeout=settings.wait_for_jobs.timeout,
                       pod_selector=settings.wait_for_jobs.pod_selector, drain_timeout=settings.drain.timeout)
