"""A node's rollout state: the names (the GPU Operator's upgrade states), where they are recorded, and their order.

On a Kubernetes node the state is the node label :data:`STATE_LABEL` (what ``kubectl get nodes -L`` shows) with the
reason and the time in annotations; elsewhere it is the JSON file :data:`STATE_FILE` on the node. A node goes
``upgrade-required`` → ``cordon-required`` → ``wait-for-jobs-required`` → ``pod-deletion-required`` →
(``drain-required``) → ``apply-required`` → ``validation-required`` → ``uncordon-required`` → ``upgrade-done``, or
to ``upgrade-failed`` with the reason, where it stays cordoned. ``apply-required`` is this project's own step (the
GPU Operator restarts its driver pod there): the node's deploy runs, with a reboot when it needs one.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any, Literal

State = Literal["upgrade-required", "cordon-required", "wait-for-jobs-required", "pod-deletion-required",
                "drain-required", "apply-required", "validation-required", "uncordon-required", "upgrade-done",
                "upgrade-failed"]
#: Every state in the order a node passes through them (``upgrade-failed`` last: it can follow any other).
STATES: tuple[State, ...] = ("upgrade-required", "cordon-required", "wait-for-jobs-required",
                             "pod-deletion-required", "drain-required", "apply-required", "validation-required",
                             "uncordon-required", "upgrade-done", "upgrade-failed")
DONE: State = "upgrade-done"
FAILED: State = "upgrade-failed"
#: States a node is left in between its first step and its last: a re-run resumes such a node.
IN_PROGRESS: frozenset[str] = frozenset(STATES) - {DONE, FAILED}
#: From this state on the node may have been changed: an interruption lets it finish rather than back out.
CHANGING: frozenset[str] = frozenset({"apply-required", "validation-required", "uncordon-required"})

STATE_LABEL = "gpu-provision.io/rollout-state"
REASON_ANNOTATION = "gpu-provision.io/rollout-reason"
SINCE_ANNOTATION = "gpu-provision.io/rollout-since"
#: Set when the node was already unschedulable before the rollout cordoned it: it is not uncordoned then.
INITIALLY_UNSCHEDULABLE = "gpu-provision.io/rollout-initially-unschedulable"
#: The state file on nodes outside Kubernetes (the project's state directory).
STATE_FILE = "/var/lib/gpu-provision/rollout-state.json"


@dataclass(frozen=True)
class NodeProgress:
    """A node's recorded rollout state: the state, why it is there (a failure's reason), and since when (UTC)."""

    state: str
    reason: str = ""
    since: str = ""
    #: The node was unschedulable before the rollout cordoned it: it stays so when the rollout is done.
    keep_cordoned: bool = False

    @property
    def in_progress(self) -> bool:
        """Whether the node was left between its first and last step (a re-run resumes it)."""
        return self.state in IN_PROGRESS

    def to_json(self) -> dict[str, Any]:
        """The record as the state file holds it."""
        return asdict(self)


def progress_from_node(node: dict[str, Any]) -> NodeProgress | None:
    """The record a Kubernetes Node object carries in its label and annotations, None when it has none."""
    meta = node.get("metadata") or {}
    state = (meta.get("labels") or {}).get(STATE_LABEL)
    if not state:
        return None
    notes = meta.get("annotations") or {}
    return NodeProgress(state, notes.get(REASON_ANNOTATION, ""), notes.get(SINCE_ANNOTATION, ""),
                  notes.get(INITIALLY_UNSCHEDULABLE) == "true")


def progress_from_file(text: str) -> NodeProgress | None:
    """The record in a node's state file (None for an empty, missing or unreadable one)."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("state") not in STATES:
        return None
    return NodeProgress(str(doc["state"]), str(doc.get("reason", "")), str(doc.get("since", "")),
                  bool(doc.get("keep_cordoned", False)))


def node_patch(record: NodeProgress) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that records ``record`` on a Node: label, reason and time annotations."""
    return {"metadata": {"labels": {STATE_LABEL: record.state},
                         "annotations": {REASON_ANNOTATION: record.reason or None,
                                         SINCE_ANNOTATION: record.since or None,
                                         INITIALLY_UNSCHEDULABLE: "true" if record.keep_cordoned else None}}}
