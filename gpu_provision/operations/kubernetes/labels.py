"""Node labels and taints as the cluster file says, set from the first control plane through the API.

Only the labels and taints the file names are changed; nodes that join in the same run are waited for, nodes that
cannot join in this run are left for a later one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from typing import Any

from pyinfra.api import operation

from gpu_provision.facts.state import executing, invalidate
from gpu_provision.k8s.nodes import taint_objects
from gpu_provision.operations.commands import mark_changed, this_host
from gpu_provision.operations.kubernetes.probe import KUBECTL, control_plane_api


def label_plan(wanted: Mapping[str, tuple[dict[str, str], tuple[str, ...]]], api: Mapping[str, Any]) -> list[str]:
    """``kubectl label``/``taint`` commands for nodes whose labels or taints differ from ``wanted``.

    ``wanted``: node name -> (labels, taints as ``key=value:Effect``). Labels and taints the file does not name are
    left alone (kubeadm, the CNI and operators set their own). A node the API does not list yet (it joins in this
    run) is waited for first.
    """
    commands = []
    nodes = api.get("nodes", {})
    for name, (labels, taints) in sorted(wanted.items()):
        current = nodes.get(name)
        have_labels = (current or {}).get("labels", {})
        have_taints = {(t.get("key"), t.get("value"), t.get("effect")) for t in (current or {}).get("taints", [])}
        missing_labels = {k: v for k, v in sorted(labels.items()) if have_labels.get(k) != v}
        missing_taints = [text for text, t in zip(taints, taint_objects(taints))
                          if (t["key"], t.get("value"), t["effect"]) not in have_taints]
        if not missing_labels and not missing_taints:
            continue
        quoted = shlex.quote(name)
        if current is None:
            commands.append(f"for i in $(seq 60); do {KUBECTL} get node {quoted} >/dev/null 2>&1 && break; sleep 2; "
                            f"done")
        if missing_labels:
            pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in missing_labels.items())
            commands.append(f"{KUBECTL} label node {quoted} --overwrite {pairs}")
        for text in missing_taints:
            commands.append(f"{KUBECTL} taint node {quoted} --overwrite {shlex.quote(text)}")
    return commands


def joining(run: Any, name: str) -> bool:
    """Whether node ``name`` may still register in this run: it is one of the run's hosts and has not failed.

    Waiting for a node that failed earlier or is outside ``--limit`` would only hold up the control plane.
    """
    inventory = getattr(run, "inventory", None)
    target = inventory.get_host(name, None) if inventory is not None else None
    if target is None or target not in getattr(run, "activated_hosts", set()):
        return False
    return target not in getattr(run, "failed_hosts", set())


@operation()
def node_labels(wanted: Mapping[str, tuple[dict[str, str], tuple[str, ...]]]):
    """Every node's labels and taints as the cluster file says, set from this control plane.

    + wanted: node name -> (labels, taints as ``key=value:Effect``)

    Reads the API afresh at execution: nodes joined earlier in the same run must be seen. Nodes the API does not
    list are waited for only while they can still join in this run (see :func:`joining`).

    .. code:: python

        labels.node_labels(name="Node labels", wanted={"h200-01": ({"nvidia.com/gpu.present": "true"}, ())})
    """
    host = this_host()
    if executing(host):
        invalidate(host)
    api = yield from control_plane_api(host, "node labels")
    if api is None:
        return
    gone = [n for n in sorted(wanted) if n not in api.get("nodes", {}) and not joining(host.state, n)]
    for name in gone:
        host.noop(f"node {name} is not registered and does not join in this run: its labels wait for a later run")
    commands = label_plan({n: v for n, v in wanted.items() if n not in gone}, api)
    if not commands:
        host.noop("node labels and taints already set")
        return
    mark_changed(host)
    yield from commands
