"""``gpu-provision rollout plan``: per node, what a rollout would change, what that disrupts, and its batch.

The changes are drift's differences (:func:`gpu_provision.drift.check_fleet`: the fleet runner, one probe per
node), each classed by :mod:`gpu_provision.rollout.disruption`, a file's content shown as drift shows it (a unified
diff, secrets hidden). What the run takes (:func:`targets_of`: the changes and each node's recorded state, so done
nodes are left, nodes left in progress resume first, failed ones count against their group) is batched by the
run's own batcher (:mod:`gpu_provision.rollout.batches`) with the cluster file's ``rollout`` settings or the command
line's overrides: the preview is the run's batches as long as no node fails. Nothing is changed.

Exit status: 0 nothing to roll, 1 changes planned, 2 a node not reached or not fully compared.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpu_provision.desired import Difference
from gpu_provision.diff import difference_lines
from gpu_provision.drift.report import EXIT_DRIFT, EXIT_ERROR, EXIT_IN_SYNC, FleetReport, NodeReport
from gpu_provision.rollout.batches import Batch, next_batch, plan_batches, split
from gpu_provision.rollout.disruption import Disruption, classify, rule_for, worst
from gpu_provision.rollout.engine import RolloutNode
from gpu_provision.rollout.progress import DONE, FAILED, NodeProgress
from gpu_provision.spec.model import Cluster

PLAN_VERSION = "gpu-provision.rollout-plan/v1"


@dataclass(frozen=True)
class Change:
    """One difference a rollout would close, with its disruption class and the table row's reason."""

    difference: Difference
    disruption: Disruption
    why: str
    #: A file's content as a unified diff (secrets hidden), when it differs and can be shown as text.
    diff: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The change as drift words the difference, with its class."""
        d = self.difference
        return {"stage": d.stage, "kind": d.kind, "item": d.item, "expected": str(d.expected),
                "actual": str(d.actual), "disruption": self.disruption, "why": self.why,
                **({"diff": self.diff} if self.diff else {})}

    def lines(self, width: int) -> list[str]:
        """The change as text: its class, then the difference as drift prints it."""
        head, *content = difference_lines(self.difference, self.diff)
        return [f"  {self.disruption:<{width}}  {head}", *(f"  {line}" for line in content)]


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
    #: The state a previous rollout recorded on the node (None: never rolled, or not read).
    recorded: str | None = None
    #: Why the run will not take the node (it failed earlier and is not retried, or it was not compared).
    skipped: str = ""

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
                "recorded": self.recorded, "skipped": self.skipped or None,
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
    #: Why nodes with changes get no batch: the failed nodes of their group reach ``max_unavailable``.
    stopped: str = ""

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
            "stopped": self.stopped or None,
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
        lines.extend(line for node in self.nodes for line in _node_lines(node, width))
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)


def _node_lines(node: NodePlan, width: int) -> list[str]:
    """One node's part of the text: its class and batch (or why it has none), then its changes."""
    if node.status == "not-checked":
        return [f"{node.name:<{width}}  not checked: {'; '.join(node.problems)}"]
    where = f"batch {node.batch}" if node.batch is not None else node.skipped or "not planned"
    if node.status == "in-sync":
        resumes = f"resumes from {node.recorded}, {where}" if node.batch is not None else ""
        return [f"{node.name:<{width}}  {resumes or 'nothing to change'}"]
    lines = [f"{node.name:<{width}}  {node.disruption}  {where}"]
    width_class = max(len(c.disruption) for c in node.changes) if node.changes else 0
    lines.extend(line for c in node.changes for line in c.lines(width_class))
    lines.extend(f"  problem: {p}" for p in node.problems)
    return lines


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
        changes.append(Change(difference, classify(difference), rule.why if rule else "no disruption",
                              report.diff_of(difference).get("diff")))
    return NodePlan(name=report.name, group=group, role=role, changes=changes, problems=list(report.problems),
                    checked=report.checked)


def targets_of(plan: RolloutPlan, cluster: Cluster, recorded: Mapping[str, NodeProgress | None],
               retry_failed: bool) -> tuple[list[RolloutNode], list[RolloutNode]]:
    """The nodes to roll (inventory order) and those a previous run failed that are not retried.

    A node with changes is rolled; a node without changes but left in progress (or failed, with
    ``retry_failed``) is resumed: its remaining steps are no-ops up to verification and uncordon. A node not
    compared (unreachable) is not rolled and counts as failed.
    """
    kubernetes = cluster.kubernetes.enabled
    roll: list[RolloutNode] = []
    skipped: list[RolloutNode] = []
    for node in plan.nodes:
        previous = recorded.get(node.name)
        target = RolloutNode(node.name, node.disruption, node.group or "", node.role == "control-plane", kubernetes,
                             tuple(str(c.difference) for c in node.changes), previous)
        if node.status in ("not-checked", "error"):
            why = "not compared: " + "; ".join(node.problems)
            skipped.append(RolloutNode(node.name, "none", node.group or "", previous=NodeProgress(FAILED, why),
                                       skip=f"{why}; it counts as unavailable"))
        elif previous is not None and previous.state == FAILED and not retry_failed:
            skipped.append(target)
        elif node.status == "planned" or (previous is not None and previous.state not in (DONE, "unknown")):
            roll.append(target)
    return roll, skipped


def group_sizes(cluster: Cluster) -> dict[str, int]:
    """Nodes per node group in the cluster file (the base of percentage budgets, whatever ``--limit`` says)."""
    return dict(Counter(node.group or "" for node in cluster.nodes))


def plan_rollout(report: FleetReport, cluster: Cluster, max_parallel: int | None = None,
                 max_unavailable: int | str | None = None, recorded: Mapping[str, NodeProgress | None] | None = None,
                 retry_failed: bool = False) -> RolloutPlan:
    """The rollout plan from a drift report: ``max_parallel`` and ``max_unavailable`` override the file's.

    + recorded: each node's recorded rollout state (``rollout plan`` reads them as the run does; none: no node
      was rolled before)
    + retry_failed: nodes an earlier run failed are batched again (else they are skipped and count as failed)

    Only nodes fully compared are batched; a node not reached or compared in part is listed with its problems,
    gets no batch and counts against its group's ``max_unavailable``, as in the run. Percentages are taken of
    each group's size in the cluster file, whatever ``--limit`` says.
    """
    settings = cluster.rollout
    parallel = settings.max_parallel if max_parallel is None else max_parallel
    unavailable = settings.max_unavailable if max_unavailable is None else max_unavailable
    plan = RolloutPlan(nodes=[node_plan(r, cluster) for r in report.nodes], batches=[], max_parallel=parallel,
                       max_unavailable=unavailable, wait_for_jobs_timeout=settings.wait_for_jobs.timeout,
                       pod_selector=settings.wait_for_jobs.pod_selector, drain_timeout=settings.drain.timeout)
    records = dict(recorded or {})
    roll, skipped = targets_of(plan, cluster, records, retry_failed)
    sizes, failed = group_sizes(cluster), Counter(t.group for t in skipped)
    plan.batches = plan_batches(roll, parallel, unavailable, sizes, failed)
    where = {name: batch.index for batch in plan.batches for name in batch.nodes}
    left = [t for t in split(roll)[1] if t.name not in where]
    if left:
        plan.stopped = next_batch(left, parallel, unavailable, sizes, failed)[1]
    skips = {t.name: t.skipped_because for t in skipped}
    for node in plan.nodes:
        previous = records.get(node.name)
        node.batch, node.skipped = where.get(node.name), skips.get(node.name, "")
        node.recorded = previous.state if previous else None
    return plan
