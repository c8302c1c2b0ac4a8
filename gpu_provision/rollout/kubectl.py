"""The rollout's Kubernetes side through ``kubectl`` (run on a control-plane node with its admin kubeconfig).

Each call is one ``kubectl`` command: ``get`` (JSON), ``patch --type merge`` for the state label and annotations,
``cordon``/``uncordon``, ``create --raw`` on a pod's ``eviction`` subresource (policy/v1 Eviction: the API server
answers 429 TooManyRequests while a PodDisruptionBudget forbids it) and ``drain``. How the command reaches a
control-plane node is the caller's :data:`Kubectl` function, so tests can answer it themselves.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.rollout.progress import NodeProgress, node_patch, progress_from_node

#: Runs ``kubectl ARGS`` (with ``stdin`` when given): exit status, standard output, standard error.
Kubectl = Callable[[list[str], str | None], tuple[int, str, str]]


class KubectlError(GpuProvisionError):
    """A kubectl command the rollout needs failed (the node fails with this message)."""


def _last_lines(text: str, count: int = 3) -> str:
    return " / ".join(line.strip() for line in text.strip().splitlines()[-count:] if line.strip())


class KubectlApi:
    """:class:`gpu_provision.rollout.engine.KubeApi` through a :data:`Kubectl` function."""

    def __init__(self, kubectl: Kubectl) -> None:
        self.kubectl = kubectl

    def _run(self, args: list[str], stdin: str | None = None) -> str:
        rc, out, err = self.kubectl(args, stdin)
        if rc != 0:
            raise KubectlError(f"kubectl {' '.join(args[:3])} failed: {_last_lines(err or out) or f'exit {rc}'}")
        return out

    def _json(self, args: list[str]) -> Any:
        out = self._run([*args, "-o", "json"])
        try:
            return json.loads(out)
        except ValueError as exc:
            raise KubectlError(f"kubectl {' '.join(args[:3])} printed no JSON: {out[:200]!r}") from exc

    def nodes(self) -> list[dict[str, Any]]:
        """Every Node object."""
        return list(self._json(["get", "nodes"]).get("items") or [])

    def node(self, node: str) -> dict[str, Any]:
        """The Node object."""
        return dict(self._json(["get", "node", node]))

    def recorded(self, node: str) -> NodeProgress | None:
        """The node's state label and annotations."""
        return progress_from_node(self.node(node))

    def record(self, node: str, record: NodeProgress) -> None:
        """Set the state label and the reason/time annotations in one merge patch."""
        self._run(["patch", "node", node, "--type", "merge", "-p", json.dumps(node_patch(record))])

    def cordon(self, node: str) -> bool:
        """``kubectl cordon``; whether the node was unschedulable before."""
        before = bool((self.node(node).get("spec") or {}).get("unschedulable"))
        self._run(["cordon", node])
        return before

    def uncordon(self, node: str) -> None:
        """``kubectl uncordon``."""
        self._run(["uncordon", node])

    def pods(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to the node, in every namespace."""
        return list(self._json(["get", "pods", "-A", "--field-selector", f"spec.nodeName={node}"]).get("items")
                    or [])

    def evict(self, pod: dict[str, Any]) -> str | None:
        """POST a policy/v1 Eviction for the pod: None when accepted or the pod is gone, else the API's answer."""
        meta = pod.get("metadata") or {}
        name, namespace = meta.get("name", ""), meta.get("namespace", "default")
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
        rc, out, err = self.kubectl(["create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                                     "-f", "-"], json.dumps(body))
        if rc == 0 or "(NotFound)" in err:
            return None
        text = _last_lines(err or out) or f"exit {rc}"
        if "(TooManyRequests)" in text:
            return f"a PodDisruptionBudget does not allow it now: {text}"
        return f"eviction refused: {text}"

    def drain(self, node: str, timeout: int, force: bool, delete_empty_dir: bool) -> str | None:
        """``kubectl drain`` (DaemonSet pods left alone) within ``timeout`` seconds: None when drained."""
        args = ["drain", node, "--ignore-daemonsets", f"--timeout={int(timeout)}s"]
        if force:
            args.append("--force")
        if delete_empty_dir:
            args.append("--delete-emptydir-data")
        rc, out, err = self.kubectl(args, None)
        return None if rc == 0 else (_last_lines(err or out) or f"exit {rc}")
