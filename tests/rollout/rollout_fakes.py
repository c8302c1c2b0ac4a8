"""A fake Kubernetes cluster and fake nodes for the rollout engine's tests (no SSH, no API server).

The fake API keeps Node and Pod objects and PodDisruptionBudgets (``minAvailable`` over the pods their labels
select, counted as the Eviction API counts them: running, not being deleted); a GPU job finishes after a number of
looks at the node's pods. Each fake node records what happened to it, and whether its change ran while a GPU pod
was still on it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from gpu_provision.rollout.containers import Container
from gpu_provision.rollout.engine import NodeOps, Outcome
from gpu_provision.rollout.progress import NodeProgress, progress_from_node


def gpu_pod(name: str, node: str, *, labels: dict[str, str] | None = None, owner: str | None = "Job",
            runs: int | None = None, empty_dir: bool = False, namespace: str = "default") -> dict[str, Any]:
    """A running pod with one ``nvidia.com/gpu`` bound to ``node``; ``runs``: looks until it succeeds."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels or {"app": "train"}}
    if owner:
        meta["ownerReferences"] = [{"kind": owner, "name": name, "controller": True}]
    pod: dict[str, Any] = {"kind": "Pod", "metadata": meta,
                           "spec": {"nodeName": node, "containers": [
                               {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                           "status": {"phase": "Running"}}
    if empty_dir:
        pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    if runs is not None:
        pod["runs"] = runs
    return pod


class FakeKube:
    """An in-memory Kubernetes API with what the rollout uses."""

    def __init__(self, nodes: list[str]):
        self.lock = threading.RLock()
        self.nodes = {n: {"kind": "Node", "metadata": {"name": n, "labels": {}, "annotations": {}}, "spec": {}}
                      for n in nodes}
        self.all_pods: list[dict[str, Any]] = []
        self.pdbs: list[dict[str, Any]] = []
        self.history: dict[str, list[str]] = {n: [] for n in nodes}
        self.evictions: list[tuple[str, str]] = []
        self.drained: list[str] = []

    def recorded(self, node: str) -> NodeProgress | None:
        with self.lock:
            return progress_from_node(self.nodes[node])

    def record(self, node: str, record: NodeProgress) -> None:
        with self.lock:
            meta = self.nodes[node]["metadata"]
            meta["labels"]["gpu-provision.io/rollout-state"] = record.state
            meta["annotations"]["gpu-provision.io/rollout-reason"] = record.reason
            if record.keep_cordoned:
                meta["annotations"]["gpu-provision.io/rollout-initially-unschedulable"] = "true"
            else:
                meta["annotations"].pop("gpu-provision.io/rollout-initially-unschedulable", None)
            self.history[node].append(record.state)

    def unschedulable(self, node: str) -> bool:
        return bool(self.nodes[node]["spec"].get("unschedulable"))

    def cordon(self, node: str) -> bool:
        with self.lock:
            before = self.unschedulable(node)
            self.nodes[node]["spec"]["unschedulable"] = True
            return before

    def uncordon(self, node: str) -> None:
        with self.lock:
            self.nodes[node]["spec"].pop("unschedulable", None)

    def pods(self, node: str) -> list[dict[str, Any]]:
        with self.lock:
            out = []
            for pod in list(self.all_pods):
                if pod["spec"]["nodeName"] != node:
                    continue
                if pod.get("runs") is not None and pod["status"]["phase"] == "Running":
                    pod["runs"] -= 1
                    if pod["runs"] < 0:
                        pod["status"]["phase"] = "Succeeded"
                out.append(pod)
            return out

    def on_node(self, node: str) -> list[dict[str, Any]]:
        """GPU pods still running on ``node`` (no side effects)."""
        with self.lock:
            return [p for p in self.all_pods if p["spec"]["nodeName"] == node and p["status"]["phase"] == "Running"]

    def _healthy(self, selector: dict[str, str], namespace: str) -> int:
        return sum(1 for p in self.all_pods if p["metadata"]["namespace"] == namespace
                   and p["status"]["phase"] == "Running"
                   and all(p["metadata"]["labels"].get(k) == v for k, v in selector.items()))

    def evict(self, pod: dict[str, Any]) -> str | None:
        with self.lock:
            if pod not in self.all_pods:
                return None
            meta = pod["metadata"]
            for pdb in self.pdbs:
                selector = pdb["selector"]
                matches = all(meta["labels"].get(k) == v for k, v in selector.items())
                if matches and self._healthy(selector, meta["namespace"]) - pdb["minAvailable"] < 1:
                    return ("a PodDisruptionBudget does not allow it now: Cannot evict pod as it would violate the "
                            "pod's disruption budget.")
            self.all_pods.remove(pod)
            self.evictions.append((meta["namespace"], meta["name"]))
            return None

    def drain(self, node: str, timeout: int, force: bool, delete_empty_dir: bool) -> str | None:
        with self.lock:
            self.drained.append(node)
            left = [p for p in self.all_pods if p["spec"]["nodeName"] == node]
            for pod in left:
                if self.evict(pod):
                    return f"global timeout reached: {timeout}s"
            return None


class FakeNode:
    """One node's side: a state file, GPU containers, and the change and verification, with what happened."""

    def __init__(self, name: str, kube: FakeKube | None, log: list[tuple[str, str]], lock: threading.Lock,
                 change_fails: str | None = None, verify_fails: str | None = None,
                 containers: list[Container] | None = None, change_hook: Callable[[], None] | None = None):
        self.name, self.kube, self.log, self.log_lock = name, kube, log, lock
        self.change_fails, self.verify_fails = change_fails, verify_fails
        self.containers = list(containers or [])
        self.file: NodeProgress | None = None
        self.file_history: list[str] = []
        self.changed = 0
        self.changed_with_gpu_pods: list[str] = []
        self.change_hook = change_hook
        self.stopped: list[str] = []

    def _note(self, what: str) -> None:
        with self.log_lock:
            self.log.append((self.name, what))

    def recorded(self) -> NodeProgress | None:
        return self.file

    def record(self, record: NodeProgress) -> None:
        self.file = record
        self.file_history.append(record.state)

    def gpu_containers(self) -> list[Container]:
        return list(self.containers)

    def stop_container(self, container: Container) -> None:
        self.stopped.append(container.id)
        self.containers.remove(container)

    def change(self) -> str | None:
        self._note("change")
        if self.kube is not None:
            self.changed_with_gpu_pods += [p["metadata"]["name"] for p in self.kube.on_node(self.name)]
        if self.containers:
            self.changed_with_gpu_pods += [c.id for c in self.containers]
        if self.change_hook:
            self.change_hook()
        self.changed += 1
        self._note("changed")
        return self.change_fails

    def verify(self) -> str | None:
        self._note("verify")
        return self.verify_fails


def thread_batches(nodes: Mapping[str, NodeOps], unreachable: frozenset[str] = frozenset()):
    """A run_batch that runs each node's work in its own thread (as the fleet runner's greenlets do)."""
    batches: list[list[str]] = []

    def run_batch(names: list[str], work: Callable[[str, NodeOps], Outcome]) -> dict[str, Outcome]:
        batches.append(list(names))
        results: dict[str, Outcome] = {}

        def one(name: str) -> None:
            if name in unreachable:
                results[name] = Outcome(name, "failed", "unreachable: connection refused")
                return
            results[name] = work(name, nodes[name])

        threads = [threading.Thread(target=one, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results

    run_batch.batches = batches  # type: ignore[attr-defined]
    return run_batch
