"""``gpu-provision drift --in-cluster``: the same probe as a DaemonSet, its answers collected with one list call.

Past what one controller's SSH fan-out can check quickly, Kubernetes itself is the engine: a DaemonSet pod on
every node of the cluster file runs the probe (:mod:`gpu_provision.node.publish`, which ``chroot``\\ s into the
host's root, mounted read-only, and runs the same loader as the SSH check), and publishes the answer in its own
status through the kubelet: the termination messages of its init containers. Those are bounded by the kubelet
(3 x 3072 bytes here; see :mod:`gpu_provision.node.publish`), need no API credentials in the pod (it mounts no
service-account token) and are written only by the node's own kubelet. One ``kubectl get pods -l ...`` (paged by
kubectl with ``limit``/``continue``, ``--chunk-size`` per page) collects every node's answer, and the answers go
through drift's own comparison (:func:`gpu_provision.drift.compare.node_differences`) and report
(:class:`gpu_provision.drift.report.FleetReport`): the same text, JSON and exit statuses as the SSH check.

The pods are built by the verification DaemonSet's builder
(:func:`gpu_provision.verify.incluster.hardened_daemonset`: same image through the registry mirror, tolerations,
limits, no token); GPU nodes' pods use the NVIDIA runtime class so ``nvidia-smi`` reaches the GPUs, other nodes'
the default runtime. Each node's probe request is the one the SSH check sends (every stage), shared by nodes
whose requests are equal and named by digest, so a result that answers an older request (manifests rendered
from another cluster file) is reported as not checked rather than compared.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpu_provision import bundle
from gpu_provision.drift.collect import Resolver, cluster_resolver
from gpu_provision.drift.compare import node_differences, node_request, section_problems
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.drift.stages import names_of
from gpu_provision.errors import GpuProvisionError
from gpu_provision.node import publish
from gpu_provision.spec import Cluster, Node
from gpu_provision.spec.namespaces import VERIFICATION
from gpu_provision.state import NodeStateData, Request
from gpu_provision.verify.incluster import DEFAULT_IMAGE, hardened_daemonset, kubectl, pod_settings

COMPONENT = "gpu-provision-drift"
#: The label every drift pod carries (both DaemonSets): what the collector's one list call selects.
SELECTOR = f"app.kubernetes.io/component={COMPONENT}"
CONFIG = COMPONENT
#: ConfigMaps are limited to 1 MiB by the API server; leave room for the object's own fields.
MAX_CONFIG_BYTES = 900 * 1024
#: Pods per list page (kubectl's own default): bounds each answer the API server builds and sends.
CHUNK_SIZE = 500
HOLD = "hold"
PROBE = "probe"


def labels(name: str) -> dict[str, str]:
    """The labels of one drift DaemonSet and its pods."""
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": COMPONENT,
            "app.kubernetes.io/part-of": "gpu-provision"}


def part_names() -> list[str]:
    """The init containers that carry the answer, in order."""
    return [PROBE] + [f"part-{i}" for i in range(1, publish.PARTS)]


@dataclass(frozen=True)
class Target:
    """One node of the cluster file as the collector checks it: its typed node, its cluster, and the probe
    request its pod answers (by digest)."""

    name: str
    node: Node
    cluster: Cluster
    request: Request
    digest: str


def probe_document(request: Request) -> str:
    """The request as the probe reads it (canonical JSON)."""
    return json.dumps(request.to_probe(), sort_keys=True, separators=(",", ":"))


def request_digest(request: Request) -> str:
    """The name of a request among the manifests' requests."""
    return hashlib.sha256(probe_document(request).encode()).hexdigest()[:16]


def targets(inventory: str, stages: Sequence[Any], limit: Sequence[str] = (),
            resolve: Resolver = cluster_resolver) -> list[Target]:
    """Every host of ``inventory`` (or those ``limit`` names) with the request the SSH check would send it."""
    from gpu_provision.fleet import chosen_hosts, load_inventory

    out = []
    for host in chosen_hosts(load_inventory(inventory), limit):
        node, cluster = resolve(host)
        request = node_request(node, cluster, stages)
        out.append(Target(host.name, node, cluster, request, request_digest(request)))
    return out


def manifests(nodes: Sequence[Target], namespace: str = VERIFICATION, image: str = DEFAULT_IMAGE,
              tolerations: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Namespace, the ConfigMap (probe loader, publisher, each node's request by digest) and the DaemonSets (GPU
    nodes, other nodes) that probe every node of ``nodes``."""
    if not nodes:
        raise GpuProvisionError("no nodes to check in the cluster")
    loader = bundle.probe_argv({})[-2]
    data = {"probe.py": loader, "publish.py": Path(publish.__file__).read_text(encoding="utf-8"),
            "nodes.json": json.dumps({t.name: t.digest for t in nodes}, sort_keys=True, indent=0)}
    for target in nodes:
        data[f"request-{target.digest}.json"] = probe_document(target.request)
    size = sum(len(k) + len(v.encode()) for k, v in data.items())
    if size > MAX_CONFIG_BYTES:
        raise GpuProvisionError(f"in-cluster drift: the nodes' {len({t.digest for t in nodes})} distinct probe "
                                f"requests make a ConfigMap of {size} bytes, over the {MAX_CONFIG_BYTES} this "
                                "project allows under the API server's 1 MiB object limit; check fewer nodes "
                                "at once (--limit)")
    docs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "Namespace",
         "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": "gpu-provision"}}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": CONFIG, "namespace": namespace, "labels": labels(CONFIG)}, "data": data},
    ]
    gpu = sorted(t.name for t in nodes if t.node.has_gpus)
    other = sorted(t.name for t in nodes if not t.node.has_gpus)
    for name, chosen, runtime in ((f"{COMPONENT}-gpu", gpu, "nvidia"), (COMPONENT, other, None)):
        if chosen:
            docs.append(daemonset(name, namespace, chosen, image, runtime, tolerations))
    return docs


def daemonset(name: str, namespace: str, nodes: list[str], image: str, runtime_class: str | None,
              tolerations: list[dict[str, str]] | None) -> dict[str, Any]:
    """One drift DaemonSet: init containers that probe and publish, a ``hold`` container that keeps the pod (and
    with it the published answer) in place until the DaemonSet is restarted for a new check."""
    env = [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    if runtime_class:  # the NVIDIA runtime gives the pod the GPUs' device nodes; nvidia-smi needs no more
        env += [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"}]
    script = f"{publish.CONFIG_DIR}/publish.py"
    mounts = [{"name": "config", "mountPath": publish.CONFIG_DIR, "readOnly": True},
              {"name": "parts", "mountPath": publish.PARTS_DIR}]
    inits = []
    for index, part in enumerate(part_names()):
        command = ["python3", script, "probe"] if index == 0 else ["python3", script, "part", str(index)]
        container: dict[str, Any] = {
            "name": part, "image": image, "command": command, "env": env,
            "terminationMessagePath": publish.TERMINATION_LOG, "terminationMessagePolicy": "File",
            "volumeMounts": mounts}
        if index == 0:
            # The host's root, read-only, for the probe to chroot into.
            container["volumeMounts"] = mounts + [{"name": "host-root", "mountPath": publish.HOST_ROOT,
                                                   "readOnly": True, "mountPropagation": "HostToContainer"}]
        inits.append(container)
    hold = {"name": HOLD, "image": image, "command": ["/bin/sh", "-c", "exec sleep infinity"]}
    volumes = [{"name": "config", "configMap": {"name": CONFIG}},
               {"name": "parts", "emptyDir": {"sizeLimit": "1Mi"}},
               {"name": "host-root", "hostPath": {"path": "/", "type": "Directory"}}]
    return hardened_daemonset(name, namespace, labels(name), nodes, [hold], volumes, runtime_class=runtime_class,
                              tolerations=tolerations, init_containers=inits)


def manifests_for(inventory: str, stages: Sequence[Any], namespace: str = VERIFICATION,
                  limit: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The manifests for ``inventory``'s nodes with the cluster file's image (through its registry mirror) and
    tolerations, as the verification DaemonSet takes them."""
    chosen = targets(inventory, stages, limit)
    settings = pod_settings(chosen[0].cluster, [t.name for t in chosen])
    return manifests(chosen, namespace, **settings)


class ResultLacks(Exception):
    """A stage needs a reading the published answer does not hold (over SSH it would be a second probe)."""


def _lacks(request: Request) -> NodeStateData:
    wanted = {f: sorted(v) for f, v in request.__dict__.items() if v}
    raise ResultLacks(f"needs readings the published answer lacks ({json.dumps(wanted)[:200]}); "
                      "check this node over SSH")


def _messages(pod: dict[str, Any]) -> list[str] | None:
    """The pod's published parts in order, or None while any part is not published yet."""
    by_name = {s.get("name"): s for s in (pod.get("status") or {}).get("initContainerStatuses") or []}
    out = []
    for name in part_names():
        state = (by_name.get(name) or {}).get("state") or {}
        terminated = state.get("terminated") or ((by_name.get(name) or {}).get("lastState") or {}).get("terminated")
        if not terminated:
            return None
        out.append(terminated.get("message") or "")
    return out


def node_report(target: Target, pod: dict[str, Any] | None, stages: Sequence[Any]) -> NodeReport:
    """One node's drift from its pod's published answer, or not checked with the reason."""
    report = NodeReport(name=target.name, address=str(target.node.address))

    def not_checked(reason: str) -> NodeReport:
        report.checked = False
        report.problems.append(reason)
        return report

    if pod is None:
        return not_checked("no drift pod on this node (the DaemonSet is not applied, or not scheduled here)")
    pod_name = pod["metadata"]["name"]
    messages = _messages(pod)
    if messages is None:
        phase = (pod.get("status") or {}).get("phase", "unknown")
        return not_checked(f"pod {pod_name} ({phase}) has not published its result yet")
    try:
        result = publish.decode(messages)
    except ValueError as exc:
        return not_checked(f"pod {pod_name}: {exc}")
    if result.get("request") != target.digest:
        return not_checked(f"pod {pod_name} answered another probe request than this cluster file's (render and "
                           "apply the manifests again: gpu-provision drift --in-cluster --manifest)")
    if "error" in result or not isinstance(result.get("probe"), dict):
        return not_checked(f"probe failed: {result.get('error', 'no answer')}")
    data = NodeStateData(result["probe"])
    comparison = node_differences(target.node, target.cluster, data, stages, refetch=_lacks)
    report.differences, report.diffs = comparison.differences, comparison.diffs
    report.problems = section_problems(data, target.request) + comparison.problems
    return report


def _pods(namespace: str, kubeconfig: str | None, chunk_size: int) -> list[dict[str, Any]]:
    text = kubectl(kubeconfig, "get", "pods", "-n", namespace, "-l", SELECTOR, "-o", "json",
                   f"--chunk-size={chunk_size}")
    try:
        items = json.loads(text).get("items") or []
    except ValueError as exc:
        raise GpuProvisionError(f"kubectl get pods: not JSON: {exc}") from None
    return [p for p in items if isinstance(p, dict)]


def _newest(pods: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each node's pod; during a restart a node may have two, and the one that has published wins, then the
    newest."""
    by_node: dict[str, dict[str, Any]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            continue
        key = (_messages(pod) is not None, (pod.get("metadata") or {}).get("creationTimestamp") or "")
        held = by_node.get(node)
        if held is None or key > ((_messages(held) is not None),
                                  (held.get("metadata") or {}).get("creationTimestamp") or ""):
            by_node[node] = pod
    return by_node


def collect(inventory: str, stages: Sequence[Any], published: Sequence[Any] | None = None,
            namespace: str = VERIFICATION, kubeconfig: str | None = None, limit: Sequence[str] = (),
            chunk_size: int = CHUNK_SIZE, resolve: Resolver = cluster_resolver) -> FleetReport:
    """Every chosen node's drift from the answers its pod published: one list call, then drift's comparison.

    ``published`` are the stages whose merged request the pods answer (the manifests' stages: every stage by
    default); ``stages`` those compared, any of them.
    """
    started = time.monotonic()
    chosen = targets(inventory, published if published is not None else stages, limit, resolve)
    by_node = _newest(_pods(namespace, kubeconfig, chunk_size))
    nodes = [node_report(t, by_node.get(t.name), stages) for t in chosen]
    return FleetReport(nodes=nodes, stages=names_of(stages), seconds=time.monotonic() - started, parallel=0,
                       connect_timeout=0)
