"""The one batcher: which nodes a rollout changes together, a pure function of each node's disruption, group, role,
whether a previous run left it in progress, and the failed nodes already counting against its group.

Batch 0 holds every node whose changes disrupt nothing (and that no previous run left in progress): they go all at
once, as a deploy does. The others start in this order: nodes a previous run left in progress first, then inventory
order. Each batch (:func:`next_batch`) is one control-plane node alone, so the API server never loses two members at
once, or else at most ``max_parallel`` nodes that never hold more than ``max_unavailable`` nodes of one node group
(nodes without a group form one group), counting the group's failed nodes (they stay cordoned). ``max_unavailable``
is a count or a percentage of the group's size, rounded down but at least 1, as Kubernetes' ``maxUnavailable``.

The run (:class:`gpu_provision.rollout.engine.RolloutRun`) asks :func:`next_batch` before each batch, with the
failures so far; ``rollout plan`` previews the same calls with no failure on the way (:func:`plan_batches`), so the
preview is the run's batches as long as every node succeeds.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gpu_provision.errors import GpuProvisionError
from gpu_provision.rollout.disruption import Disruption

_PERCENT = re.compile(r"^([1-9][0-9]?|100)%$")


class Rollable(Protocol):
    """What the batcher reads of a node: name, node group (``""`` for none), role, the class of its changes, and
    whether a previous run left it in progress."""

    @property
    def name(self) -> str: ...

    @property
    def disruption(self) -> Disruption: ...

    @property
    def group(self) -> str: ...

    @property
    def control_plane(self) -> bool: ...

    @property
    def resumed(self) -> bool: ...


Node = TypeVar("Node", bound=Rollable)


@dataclass(frozen=True)
class Candidate:
    """A node with changes to roll (see :class:`Rollable`)."""

    name: str
    disruption: Disruption
    group: str = ""
    control_plane: bool = False
    resumed: bool = False


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


def split(nodes: Sequence[Node]) -> tuple[list[Node], list[Node]]:
    """Batch 0's nodes (changes that disrupt nothing, not left in progress) and the others in the order they start:
    those a previous run left in progress first, then inventory order."""
    quiet = [n for n in nodes if n.disruption == "none" and not n.resumed]
    waiting = [n for n in nodes if n.resumed] + [n for n in nodes if n not in quiet and not n.resumed]
    return quiet, waiting


def next_batch(waiting: Sequence[Node], max_parallel: int, max_unavailable: int | str, sizes: Mapping[str, int],
               failed: Mapping[str, int]) -> tuple[list[Node], str]:
    """The next batch from ``waiting`` (in start order, see :func:`split`), or none with the reason.

    + sizes: nodes per group that percentages are taken of
    + failed: nodes per group that failed (now or in an earlier run) and stay cordoned: they use the budget up
    """
    free = {g: unavailable_limit(max_unavailable, max(sizes.get(g, 1), 1)) - failed.get(g, 0)
            for g in {n.group for n in waiting}}
    startable = [n for n in waiting if free[n.group] > 0]
    if not startable:
        words = [f"{failed.get(g, 0)} failed node{'s' if failed.get(g, 0) != 1 else ''} of "
                 f"{'group ' + g if g else 'the nodes without a group'} reach max_unavailable {max_unavailable}"
                 for g in sorted(free)]
        return [], "; ".join(words) + " (failed nodes stay cordoned); fix them and run again"
    planes = [n for n in startable if n.control_plane]
    if planes:
        return planes[:1], ""
    taken: list[Node] = []
    for node in startable:
        if len(taken) < max_parallel and free[node.group] > 0:
            taken.append(node)
            free[node.group] -= 1
    return taken, ""


def plan_batches(candidates: Sequence[Rollable], max_parallel: int, max_unavailable: int | str,
                 group_sizes: Mapping[str, int] | None = None,
                 failed: Mapping[str, int] | None = None) -> list[Batch]:
    """The batches a run takes over ``candidates`` when no node fails on the way (a node with nothing to change
    is not a candidate); nodes the failed nodes leave no budget for get no batch.

    + max_parallel: most nodes changed at once (at least 1)
    + max_unavailable: a count or a percentage (``"25%"``) of each node group
    + group_sizes: nodes per group that percentages are taken of (default: the candidates of each group), so a
      ``--limit`` does not shrink a group's budget
    + failed: nodes per group an earlier run failed (or not reached) that this one does not retry
    """
    if max_parallel < 1:
        raise GpuProvisionError(f"max_parallel must be at least 1, got {max_parallel}")
    sizes = dict(group_sizes or Counter(n.group for n in candidates))
    quiet, waiting = split(candidates)
    batches = [Batch(0, tuple(n.name for n in quiet), disruptive=False)] if quiet else []
    # Disruptive batches are numbered from 1 whether or not batch 0 has nodes.
    number = 0
    while waiting:
        taken, _ = next_batch(waiting, max_parallel, max_unavailable, sizes, failed or {})
        if not taken:
            break
        number += 1
        batches.append(Batch(number, tuple(n.name for n in taken)))
        waiting = [n for n in waiting if n not in taken]
    return batches
