"""Verification inside Kubernetes, for fleets that outgrow one controller's SSH fan-out.

``manifests(...)`` generates ConfigMaps (the node bundle, whose ``verify`` entry is the agent, and every node's
expectations) and a DaemonSet that runs the same agent in a pod on every GPU node of the cluster file; each pod
prints its report as one JSON line and then sleeps, so the report stays in the pod's log. ``collect(...)`` reads
those logs through kubectl and adds the one check a pod cannot make about itself: the node's GPUs as Kubernetes
sees them, its allocatable GPU resources or, on a node whose GPUs NVIDIA's DRA driver serves
(``kubernetes.gpu_allocation: dra``), the devices the node's ResourceSlices list.

The pod sees the host's GPUs through the NVIDIA runtime (``runtimeClassName: nvidia``,
``NVIDIA_VISIBLE_DEVICES=all``) without asking the device plugin for any, so verification takes no GPU away
from workloads; the host's /dev and /sys are mounted read-only so device permissions and PCI devices are the
host's, not the container's.

The cluster file's ``cluster.kubernetes.verification`` names the image (pinnable by digest, pulled through
``mirrors.registry`` like every other image) and the taints the pod tolerates; the pod mounts no service-account
token (it never calls the API) and has CPU and memory limits.
"""

from __future__ import annotations

import base64
import json
import subprocess
from typing import Any

import yaml

from gpu_provision import bundle
from gpu_provision.errors import GpuProvisionError
from gpu_provision.k8s.images import check_reference, with_registry
from gpu_provision.k8s.nodes import tolerations as toleration_objects
from gpu_provision.node.verify import checks as agent_checks
from gpu_provision.node.verify import labels as agent_labels
from gpu_provision.node.verify import slices as agent_slices
from gpu_provision.node.verify.report import Check, summarize
from gpu_provision.spec.model import Cluster, InClusterVerification
from gpu_provision.spec.namespaces import VERIFICATION
from gpu_provision.verify.report import error_report, parse_report

APP = "gpu-provision-verify"
LABELS = {"app.kubernetes.io/name": APP, "app.kubernetes.io/part-of": "gpu-provision"}
DEFAULT_IMAGE = InClusterVerification().image
#: The cluster file's default: the taint GPU nodes commonly carry so that only GPU workloads land there.
DEFAULT_TOLERATIONS = toleration_objects(InClusterVerification().tolerations)
#: The agent reads files and runs nvidia-smi and a short CUDA copy; a limit keeps a stuck check from starving the
#: node's workloads. No GPU is requested (see the module's docstring).
RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
IN_POD_PATHS = {"dev": "/host/dev", "sysfs": "/host/sys"}
#: Where the pod mounts the ConfigMap holding the node bundle.
AGENT_DIR = "/opt/gpu-provision/agent"


def pod_expectations(expect: dict[str, Any]) -> dict[str, Any]:
    """Adapt a node's expectations to run inside the verification pod.

    Host /dev and /sys are read from their mounts; the container check is left to SSH runs (a pod does not
    start containers), and the allocatable check is made by ``collect`` (the pod has no node credentials).
    """
    adapted = json.loads(json.dumps(expect))
    adapted["paths"] = dict(adapted.get("paths") or {}, **IN_POD_PATHS)
    adapted["container"] = {"kind": "none"}
    kube = dict(adapted.get("kubernetes") or {})
    kube["enabled"] = False
    adapted["kubernetes"] = kube
    return adapted


def pod_settings(cluster: Cluster, nodes: list[str]) -> dict[str, Any]:
    """The cluster file's ``image`` and ``tolerations`` for :func:`manifests` when verifying ``nodes``.

    The image goes through ``mirrors.registry``. The pod tolerates the file's ``verification.tolerations`` and the
    taints the file sets on the nodes it verifies (it must run there), nothing else.
    """
    settings = cluster.kubernetes.verification
    taints = list(settings.tolerations)
    for node in cluster.nodes:
        if node.name in nodes:
            taints += [t for t in node.taints if t not in taints]
    return {"image": with_registry(settings.image, cluster.mirrors.registry),
            "tolerations": toleration_objects(tuple(taints))}


def manifests(expectations: dict[str, dict[str, Any]], namespace: str = VERIFICATION,
              image: str = DEFAULT_IMAGE, runtime_class: str = "nvidia",
              tolerations: list[dict[str, str]] | None = None) -> list[dict[str, Any]]:
    """Namespace, ConfigMap and DaemonSet that verify every node in ``expectations`` (node name -> dict).

    + image: any image with python3 (3.9 or newer); the NVIDIA runtime adds nvidia-smi and libcuda.so.1. A digest
      (``python:3.12-slim@sha256:...``) pins its content
    + runtime_class: the RuntimeClass of the NVIDIA container runtime
    + tolerations: the pod's tolerations (default :data:`DEFAULT_TOLERATIONS`)
    """
    if not expectations:
        raise GpuProvisionError("no GPU nodes to verify in the cluster")
    try:
        check_reference(image)
    except ValueError as exc:
        raise GpuProvisionError(f"in-cluster verification: {exc}") from None
    data = {f"{node}.json": json.dumps(pod_expectations(expect), indent=1, sort_keys=True)
            for node, expect in sorted(expectations.items())}
    command = (bundle.command("verify", "--compact", bundle=f"{AGENT_DIR}/{bundle.BUNDLE_NAME}") +
               ' --expect "/opt/gpu-provision/expect/${NODE_NAME}.json"; exec sleep infinity')
    # The NVIDIA runtime injects the GPU device nodes and driver libraries, and the host's /dev and /sys (read for
    # device permissions and PCI devices) are read-only mounts. It runs as the image's root, the owner of those
    # device nodes on the host, as the agent does over SSH.
    container = {
        "name": "verify",
        "image": image,
        "command": ["/bin/sh", "-c", command],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        "volumeMounts": [
            {"name": "agent", "mountPath": AGENT_DIR, "readOnly": True},
            {"name": "expect", "mountPath": "/opt/gpu-provision/expect", "readOnly": True},
            {"name": "host-dev", "mountPath": "/host/dev", "readOnly": True},
            {"name": "host-sys", "mountPath": "/host/sys", "readOnly": True},
        ],
    }
    volumes = [
        {"name": "agent", "configMap": {"name": f"{APP}-agent"}},
        {"name": "expect", "configMap": {"name": f"{APP}-expect"}},
        {"name": "host-dev", "hostPath": {"path": "/dev", "type": "Directory"}},
        {"name": "host-sys", "hostPath": {"path": "/sys", "type": "Directory"}},
    ]
    daemonset = hardened_daemonset(APP, namespace, LABELS, sorted(expectations), [container], volumes,
                                   runtime_class=runtime_class,
                                   tolerations=DEFAULT_TOLERATIONS if tolerations is None else tolerations)
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": LABELS}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": f"{APP}-agent", "namespace": namespace, "labels": LABELS},
         "binaryData": {bundle.BUNDLE_NAME: base64.b64encode(bundle.build()).decode()}},
        {"apiVersion": "v1", "kind": "ConfigMap",
         "metadata": {"name": f"{APP}-expect", "namespace": namespace, "labels": LABELS}, "data": data},
        daemonset,
    ]


def hardened_daemonset(name: str, namespace: str, labels: dict[str, str], nodes: list[str],
                       containers: list[dict[str, Any]], volumes: list[dict[str, Any]],
                       runtime_class: str | None = "nvidia", tolerations: list[dict[str, str]] | None = None,
                       init_containers: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A DaemonSet on exactly ``nodes`` (by ``kubernetes.io/hostname``) with this project's hardening rules, shared
    by every DaemonSet that runs node code (verification, in-cluster drift).

    Every pod: no service-account token (it never calls the API server), the given tolerations only, and each
    container (``containers`` and ``init_containers``, whose own fields are kept) bounded by :data:`RESOURCES`,
    without privilege escalation and not privileged. ``runtime_class`` None leaves the cluster's default runtime.
    The image is the caller's, checked by :func:`gpu_provision.k8s.images.check_reference` (pinnable by digest).
    """
    def hardened(container: dict[str, Any]) -> dict[str, Any]:
        return {**container, "resources": json.loads(json.dumps(RESOURCES)),
                # Not privileged and no added capability; the caller's mounts are read-only.
                "securityContext": {"allowPrivilegeEscalation": False}}

    selector = {"app.kubernetes.io/name": labels["app.kubernetes.io/name"]}
    spec: dict[str, Any] = {
        # The pod reads its ConfigMaps through volumes and never calls the API server.
        "automountServiceAccountToken": False,
        "tolerations": list(DEFAULT_TOLERATIONS if tolerations is None else tolerations),
        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "kubernetes.io/hostname", "operator": "In", "values": sorted(nodes)}]}]}}},
    }
    if runtime_class:
        spec = {"runtimeClassName": runtime_class, **spec}
    if init_containers:
        spec["initContainers"] = [hardened(c) for c in init_containers]
    spec["containers"] = [hardened(c) for c in containers]
    spec["volumes"] = volumes
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"selector": {"matchLabels": selector}, "template": {"metadata": {"labels": labels}, "spec": spec}},
    }


def from_inventory(inventory: str) -> tuple[dict[str, dict[str, Any]], Cluster | None]:
    """Every GPU host's expectations (node name -> dict), from the same inventory the SSH path uses, and the
    cluster file they came from (None when every host names its own expectations file)."""
    from gpu_provision.fleet import load_inventory
    from gpu_provision.inventory import cluster_for
    from gpu_provision.verify.expect import expectations_for_host

    result, cluster = {}, None
    for host in load_inventory(inventory):
        text = expectations_for_host(host)
        if text is not None:
            expect = json.loads(text)
            result[expect["node"]] = expect
            if cluster is None and not host.data.get("gpu_provision_verify_expect"):
                cluster = cluster_for(host)
    return result, cluster


def manifests_yaml(inventory: str, namespace: str = VERIFICATION) -> str:
    """The manifests for ``inventory`` as one multi-document YAML stream (``kubectl apply -f -``), with the
    cluster file's image and tolerations."""
    expectations, cluster = from_inventory(inventory)
    settings = pod_settings(cluster, sorted(expectations)) if cluster is not None else {}
    docs = manifests(expectations, namespace, **settings)
    return yaml.safe_dump_all(docs, sort_keys=False)


def kubectl(kubeconfig: str | None, *args: str) -> str:
    """What ``kubectl ARGS`` printed (with ``--kubeconfig`` when given); a one-line error when it fails."""
    argv = ["kubectl", *(["--kubeconfig", kubeconfig] if kubeconfig else []), *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    except FileNotFoundError:
        raise GpuProvisionError("kubectl not found on PATH (needed for --in-cluster and --workload)") from None
    except subprocess.TimeoutExpired:
        raise GpuProvisionError(f"kubectl {' '.join(args)}: timed out") from None
    if done.returncode != 0:
        raise GpuProvisionError(f"kubectl {' '.join(args)}: {done.stderr.strip()[:300]}")
    return done.stdout


def report_from_log(node: str, log: str) -> dict[str, Any] | None:
    """The last report line in a pod's log, parsed; None when the agent has not printed one yet."""
    lines = [line for line in log.splitlines() if line.startswith("{") and '"verify-report.v1"' in line]
    return parse_report(node, lines[-1]) if lines else None


def add_allocatable(report: dict[str, Any], expect: dict[str, Any] | None, node_json: dict[str, Any] | None,
                    error: str | None,
                    slice_list: tuple[dict[str, Any] | None, str | None] | None = None) -> dict[str, Any]:
    """Append ``node.kubernetes.allocatable`` and ``node.kubernetes.labels`` (decided by the agent's own rules from
    the Node object the controller read) and recount the report.

    Under DRA the allocatable check judges ``slice_list`` (the node's ResourceSliceList and the error reading it),
    as the agent does over SSH: no device plugin advertises ``nvidia.com/*`` there.
    """
    if expect is None or report["status"] == "error":
        return report
    if is_dra(expect):
        found, problem = slice_list or (None, "the node's ResourceSlices were not read")
        added = [agent_slices.slice_check(found, problem, expect).to_dict()]
    else:
        added = [agent_checks.allocatable_check(node_json, error, expect).to_dict()]
    # The labels check replaces the agent's own skip, and is added where labels are expected.
    if ((expect.get("kubernetes") or {}).get("labels")
            or any(c["id"] == agent_labels.ID for c in report["checks"])):
        added.append(agent_labels.labels_check(node_json, error, expect).to_dict())
    ids = {c["id"] for c in added}
    checks = [c for c in report["checks"] if c["id"] not in ids] + added
    counts = summarize([Check(id=c["id"], status=c["status"]) for c in checks])
    return dict(report, checks=checks, summary=counts, status="fail" if counts["fail"] else "pass")


def is_dra(expect: dict[str, Any]) -> bool:
    """Whether the node's GPUs are allocated through NVIDIA's DRA driver (its expectations name devices)."""
    return (expect.get("kubernetes") or {}).get("allocation") == "dra"


def _get_json(kubeconfig: str | None, *args: str) -> tuple[dict[str, Any] | None, str | None]:
    """``kubectl get ARGS -o json``, parsed, or the one-line error."""
    try:
        return json.loads(kubectl(kubeconfig, "get", *args, "-o", "json")), None
    except GpuProvisionError as exc:
        return None, str(exc)


def read_slices(kubeconfig: str | None, node: str) -> tuple[dict[str, Any] | None, str | None]:
    """The ResourceSlices of ``node`` (the field selector the agent uses; driver and node are checked again by
    :func:`gpu_provision.node.verify.slices.devices`)."""
    return _get_json(kubeconfig, "resourceslices", "--field-selector", f"spec.nodeName={node}")


def collect(namespace: str = VERIFICATION, kubeconfig: str | None = None,
            limit: list[str] | None = None) -> list[dict[str, Any]]:
    """Read every verification pod's report from its log; nodes whose pod has none get an error report."""
    pods = json.loads(kubectl(kubeconfig, "get", "pods", "-n", namespace, "-l",
                               f"app.kubernetes.io/name={APP}", "-o", "json")).get("items", [])
    cm = json.loads(kubectl(kubeconfig, "get", "configmap", f"{APP}-expect", "-n", namespace, "-o", "json"))
    expectations = {name.removesuffix(".json"): json.loads(text) for name, text in (cm.get("data") or {}).items()}
    by_node = {pod["spec"].get("nodeName"): pod for pod in pods if pod["spec"].get("nodeName")}
    reports = []
    for node in sorted(expectations):
        if limit and node not in limit:
            continue
        pod = by_node.get(node)
        if pod is None:
            reports.append(error_report(node, "no verification pod on this node (DaemonSet not scheduled?)"))
            continue
        log = kubectl(kubeconfig, "logs", "-n", namespace, pod["metadata"]["name"], "-c", "verify")
        report = report_from_log(node, log)
        if report is None:
            phase = (pod.get("status") or {}).get("phase", "unknown")
            reports.append(error_report(node, f"pod {pod['metadata']['name']} ({phase}) has printed no report yet"))
            continue
        expect = expectations.get(node) or {}
        node_json, error = _get_json(kubeconfig, "node", node)
        wanted = is_dra(expect) or (expect.get("kubernetes") or {}).get("allocatable")
        slice_list = read_slices(kubeconfig, node) if is_dra(expect) else None
        reports.append(add_allocatable(report, expect if wanted else None, node_json, error, slice_list))
    return reports

