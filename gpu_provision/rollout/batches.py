"""The batches a rollout changes nodes in: a pure function of each node's disruption, group and role.

Batch 0 holds every node whose changes disrupt nothing: they go all at once, as a deploy does today. Control-plane
nodes with a disruptive change follow, one per batch, so the API server never loses two members at once. The other
disruptive nodes follow in inventory order, in batches of at most ``max_parallel`` nodes that never hold more than
``max_unavailable`` nodes of one node group (nodes without a group form one group). ``max_unavailable`` is a count
or a percentage of the group's size, rounded down but at least 1, as Kubernetes' ``maxUnavailable``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpu_provision.errors import GpuProvisionError
from gpu_provision.rollout.disruption import Disruption

_PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")


@dataclass(frozen=True)
class Candidate:
    """A node with changes to roll: its name, node group (``""`` for none), role and the class of its changes."""

    name: str
    disruption: Disruption
    group: str = ""
    control_plane: bool = False


@dataclass(frozen=True)
class Batch:
    """Nodes changed together; ``disruptive`` is False only for batch 0, the nodes whose changes disrupt nothing."""

    index: int
    nodes: tuple[str, ...]
    disruptive: bool = True


def parse_max_unavailable(text: str | int) -> int | str:
    """``max_unavailable`` as written on the command line: a count (``2``) or a percentage (``25%``)."""
    value = str(text).strip()
    if _PERCENT.match(value):
        return value
    if value.isdigit() and int(value) >= 1:
        return int(value)
    raise GpuProvisionError(f"--max-unavailable: expected a node count of at least 1 or a percentage such as "
                            f"25%, got {text!r}")


def unavailable_limit(max_unavailable: int | str, group_size: int) -> int:
    """How many nodes of a group of ``group_size`` may be down at once: a count as given, a percentage of the
    group rounded down, at least 1 either way."""
    if isinstance(max_unavailable, str):
        match = _PERCENT.match(max_unavailable)
        if not match:
            raise GpuProvisionError(f"max_unavailable: {max_unavailable!r} is not a percentage such as 25%")
        return max(1, group_size * int(match.group(1)) // 100)
    return max(1, int(max_unavailable))


def plan_batches(candidates: Sequence[Candidate], max_parallel: int, max_unavailable: int | str,
                 group_sizes: Mapping[str, int] | None = None) -> list[Batch]:
    """The batches ``candidates`` roll in (a node with nothing to change is not a candidate).

    + max_parallel: most nodes changed at once (at least 1)
    + max_unavailable: a count or a percentage (``"25%"``) of each node group
    + group_sizes: nodes per group that percentages are taken of (default: the candidates of each group), so a
      ``--limit`` does not shrink a group's budget
    """
    if max_parallel < 1:
        raise GpuProvisionError(f"max_parallel must be at least 1, got {max_parallel}")
    sizes = dict(group_sizes or {})
    for node in candidates:
        sizes.setdefault(node.group, 0)
    if not group_sizes:
        for node in candidates:
            sizes[node.group] += 1
    limits = {group: unavailable_limit(max_unavailable, size) for group, size in sizes.items()}
    batches: list[Batch] = []
    quiet = tuple(n.name for n in candidates if n.disruption == "none")
    if quiet:
        batches.append(Batch(0, quiet, disruptive=False))
    disruptive = [n for n in candidates if n.disruption != "none"]
    groups: list[list[Candidate]] = [[n] for n in disruptive if n.control_plane]
    waiting = [n for n in disruptive if not n.control_plane]
    while waiting:
        taken: list[Candidate] = []
        per_group: dict[str, int] = {}
        for node in waiting:
            if len(taken) < max_parallel and per_group.get(node.group, 0) < limits[node.group]:
                taken.append(node)
                per_group[node.group] = per_group.get(node.group, 0) + 1
        groups.append(taken)
        waiting = [n for n in waiting if n not in taken]
    # Disruptive batches are numbered from 1 whether or not batch 0 has nodes.
    batches.extend(Batch(number, tuple(n.name for n in nodes)) for number, nodes in enumerate(groups, start=1))
    return batches
