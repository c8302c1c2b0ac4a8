"""``rollout status``: each node's recorded rollout state, as a JSON document and as text.

Kubernetes nodes carry their state in the ``gpu-provision.io/rollout-state`` label (with the reason and time in
annotations, and whether the node is cordoned in ``spec.unschedulable``); other nodes in their state file. A node
without a record was never rolled (or is untouched since).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpu_provision.rollout.progress import DONE, FAILED, NodeProgress

STATUS_VERSION = "gpu-provision.rollout-status/v1"


def status_doc(names: Sequence[str], recorded: Mapping[str, NodeProgress | None],
               nodes: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """The status of ``names`` from their records and, on Kubernetes, their Node objects."""
    rows = []
    for name in names:
        record = recorded.get(name)
        node = nodes.get(name)
        rows.append({"name": name, "state": record.state if record else None,
                     "reason": (record.reason or None) if record else None,
                     "since": (record.since or None) if record else None,
                     "cordoned": bool((node.get("spec") or {}).get("unschedulable")) if node else None})
    return {"version": STATUS_VERSION, "nodes": rows}


def status_exit(doc: dict[str, Any]) -> int:
    """0 every node done or untouched, 1 a node failed or is in progress, 2 a node whose state was not read."""
    states = {row["state"] for row in doc["nodes"]}
    if "unknown" in states:
        return 2
    return 0 if states <= {None, DONE} else 1


def status_text(doc: dict[str, Any]) -> str:
    """One line per node: name, state, cordoned, since, reason."""
    rows = doc["nodes"]
    width = max((len(r["name"]) for r in rows), default=4)
    lines = []
    for row in rows:
        state = row["state"] or "never rolled"
        cordon = {True: "cordoned", False: "schedulable", None: ""}[row["cordoned"]]
        parts = [f"{row['name']:<{width}}", f"{state:<22}", f"{cordon:<11}", row["since"] or ""]
        line = "  ".join(parts).rstrip()
        if row["reason"]:
            line += f"  {'failed: ' if row['state'] == FAILED else ''}{row['reason']}"
        lines.append(line)
    return "\n".join(lines)
