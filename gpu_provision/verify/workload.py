"""``verify --workload``: a workload's whole path to the GPUs, tried on every Kubernetes GPU node of the cluster file.

The agent's checks read the node; this runs what users run. Per GPU node, one Deployment pinned to it
(``nodeSelector: kubernetes.io/hostname``) whose pods ask for GPUs the way users' pods do: ``nvidia.com/gpu: N``
(the node's own resource name: ``nvidia.com/gpu.shared`` where time-slicing renames it, ``nvidia.com/mig-<profile>``
under the mixed MIG strategy) through the device plugin, or, under ``kubernetes.gpu_allocation: dra``, a
ResourceClaim made for each pod from a ResourceClaimTemplate of the ``gpu.nvidia.com`` DeviceClass (a MIG
profile's class on a node whose GPUs are all in MIG mode). ``/dev/shm`` is a memory-backed emptyDir with a size
limit, as training jobs mount it: shared-memory data loaders and NCCL outgrow a container runtime's 64 MiB default.

Each replica runs the agent's CUDA probe (:mod:`gpu_provision.node.verify.cuda`: a vector add on every device the
pod sees), reads its ``/dev/shm``, prints one JSON line and stays up (the Deployment's pods restart when they
exit). The command waits for a line from every replica, judges each node, and deletes what it created, also when
interrupted. So the scheduler, quota, the device plugin's or DRA driver's allocation, the NVIDIA runtime and the
driver are all on the path; a pod that cannot be scheduled reports the scheduler's own reason.

Reports are verification reports (``verify-report.v1``, one per node) with the checks ``workload.pods.scheduled``,
``workload.pods.running``, ``workload.cuda.vector_add`` and ``workload.shm.size``, so the fleet table, ``--json``
and the exit status read as ``verify``'s.
"""

from __future__ import annotations

import inspect
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.k8s import dra
from gpu_provision.k8s.images import check_reference
from gpu_provision.node.verify import cuda
from gpu_provision.node.verify import report as checks_of
from gpu_provision.node.verify.report import Check, summarize
from gpu_provision.spec.model import Cluster
from gpu_provision.verify import expect as expectations
from gpu_provision.verify.incluster import kubectl, pod_settings
from gpu_provision.verify.report import now_stamp

APP = "gpu-provision-workload"
#: The label naming the node a workload pod was made for (the Deployment's selector).
NODE_LABEL = "gpu-provision.io/workload-node"
#: The first line of each replica's log carries this marker (and nothing else prints one).
MARK = "gpu-provision-workload.v1"
DEFAULT_SHM = "1Gi"
DEFAULT_REPLICAS = 1
DEFAULT_TIMEOUT_S = 300.0
#: Memory the probe itself takes beside /dev/shm (python3 and a CUDA context), added to the container's limit:
#: a memory-backed emptyDir counts against the memory of the pod's containers.
PROBE_MEMORY_MIB = 1024
#: Bytes written to /dev/shm and read back, to show it is writable (a small share of any sensible limit).
SHM_PROBE_BYTES = 1 << 20
_QUANTITY = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|k|M|G|T)?$")
_FACTORS = {None: 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
            "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9, "T": 10 ** 12}


def quantity_bytes(text: str) -> int:
    """Bytes of a Kubernetes memory quantity written as an integer and an optional suffix (``1Gi``, ``512Mi``,
    ``2G``); a ValueError naming what is allowed for anything else."""
    match = _QUANTITY.match(text.strip())
    if not match or int(match.group(1)) == 0:
        raise ValueError(f"{text!r} is not a size: a whole number of bytes, or one with Ki, Mi, Gi, Ti "
                         f"(or k, M, G, T) such as 1Gi")
    return int(match.group(1)) * _FACTORS[match.group(2)]


@dataclass(frozen=True)
class Ask:
    """What each replica on one node asks for: ``count`` of an extended ``resource``, or of a DRA
    ``device_class`` through a ResourceClaimTemplate."""

    node: str
    count: int
    resource: str | None = None
    device_class: str | None = None

    @property
    def wording(self) -> str:
        """``2 nvidia.com/gpu`` or ``1 gpu.nvidia.com device(s) (DRA)``, for reasons and the plan."""
        if self.resource:
            return f"{self.count} {self.resource}"
        return f"{self.count} {self.device_class} device(s) (DRA)"


def ask_for(cluster: Cluster, node: Any, gpus: int | None = None) -> Ask | None:
    """What one replica on ``node`` asks for; None for a node without GPUs.

    Whole GPUs are asked for all at once (``gpus`` caps it), so one pod checks each of them. A shared resource
    (time-slicing or MPS replicas) and a MIG device are asked for once: replicas of one GPU are not distinct
    devices, and each MIG device is a device of its own.
    """
    if not node.has_gpus:
        return None
    layouts = expectations.node_layouts(node)
    if cluster.kubernetes.dra:
        devices = expectations.dra_devices(node.gpus.count, layouts)
        if devices.get("gpu"):
            return Ask(node.name, min(devices["gpu"], gpus or devices["gpu"]), device_class=dra.GPU_CLASS)
        profile = sorted(devices)[0].removeprefix("mig-")
        return Ask(node.name, 1, device_class=dra.profile_class(profile))
    shared = node.sharing.strategy != "none" and node.sharing.replicas > 1
    allocatable = expectations.allocatable_for(node.gpus.count, layouts, node.device_plugin.mig_strategy,
                                               node.sharing.replicas if shared else 1,
                                               node.sharing.rename_by_default)
    whole = "nvidia.com/gpu"
    if whole in allocatable and not shared and not (layouts and node.device_plugin.mig_strategy == "single"):
        return Ask(node.name, min(allocatable[whole], gpus or allocatable[whole]), resource=whole)
    resource = whole if whole in allocatable else sorted(allocatable)[0]
    return Ask(node.name, 1, resource=resource)


def object_name(node: str) -> str:
    """The Deployment (and claim template) of ``node``: a DNS label of at most 63 characters."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"{APP}-{node}".lower()).strip("-")
    return base[:63].rstrip("-")


def probe_script() -> str:
    """The program each replica runs: the agent's CUDA probe, a reading of /dev/shm, one JSON line, then idle
    until SIGTERM (python3 3.9 and the standard library; the NVIDIA runtime adds libcuda.so.1)."""
    # inspect reads the module through whichever loader imported it, as the agent's own pod check does.
    return inspect.getsource(cuda) + f'''

def _shm(path="/dev/shm"):
    import os
    out = {{"path": path}}
    try:
        st = os.statvfs(path)
        out["bytes"] = st.f_frsize * st.f_blocks
        with open("/proc/self/mounts") as mounts:
            out["fs"] = next((line.split()[2] for line in mounts if line.split()[1:2] == [path]), None)
        probe = os.path.join(path, "gpu-provision-workload-%d" % os.getpid())  # pods may share one /dev/shm
        with open(probe, "wb") as handle:
            handle.write(b"\\x5a" * {SHM_PROBE_BYTES})
        with open(probe, "rb") as handle:
            out["written"] = len(handle.read())
        os.unlink(probe)
    except OSError as exc:
        out["error"] = str(exc)
    return out


def _main():
    import os
    import signal
    import sys
    line = {{"mark": "{MARK}", "node": os.environ.get("NODE_NAME"), "pod": os.environ.get("POD_NAME"),
            "visible_devices": os.environ.get("NVIDIA_VISIBLE_DEVICES"), "shm": _shm(),
            "cuda": probe_devices(bandwidth=False)}}
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        signal.pause()


import json
_main()
'''


def _container(ask: Ask, image: str, shm_bytes: int) -> dict[str, Any]:
    memory = f"{shm_bytes // (1 << 20) + PROBE_MEMORY_MIB}Mi"
    resources: dict[str, Any] = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": memory}}
    if ask.resource:
        resources["limits"][ask.resource] = ask.count
    else:
        resources["claims"] = [{"name": "gpus"}]
    return {
        "name": "cuda",
        "image": image,
        "command": ["python3", "-c", probe_script()],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            # Without "compute" the NVIDIA runtime mounts no libcuda.so.1 into the container.
            {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"},
        ],
        "resources": resources,
        "securityContext": {"allowPrivilegeEscalation": False},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }


def manifests(asks: list[Ask], namespace: str, image: str, tolerations: list[dict[str, str]],
              replicas: int = DEFAULT_REPLICAS, shm: str = DEFAULT_SHM,
              runtime_class: str | None = "nvidia") -> list[dict[str, Any]]:
    """The Namespace, and per node a Deployment (and under DRA its ResourceClaimTemplate), for ``asks``.

    + image: any image with python3 3.9 or newer (the verification image); pinnable by digest
    + tolerations: the pods' tolerations (the verification pod's: the file's and the verified nodes' taints)
    + replicas: pods per node, each asking for what its node's :class:`Ask` says
    + shm: the size limit of the memory-backed ``/dev/shm``
    + runtime_class: the NVIDIA runtime's RuntimeClass (None: the cluster's default runtime)
    """
    if not asks:
        raise GpuProvisionError("no Kubernetes GPU nodes for the workload (the cluster file gives none GPUs)")
    try:
        check_reference(image)
        shm_bytes = quantity_bytes(shm)
    except ValueError as exc:
        raise GpuProvisionError(f"workload: {exc}") from None
    labels = {"app.kubernetes.io/name": APP, "app.kubernetes.io/part-of": "gpu-provision"}
    out: list[dict[str, Any]] = [{"apiVersion": "v1", "kind": "Namespace",
                                  "metadata": {"name": namespace, "labels": dict(labels)}}]
    for ask in asks:
        name = object_name(ask.node)
        selector = {NODE_LABEL: name}
        spec: dict[str, Any] = {
            "nodeSelector": {"kubernetes.io/hostname": ask.node},
            "tolerations": list(tolerations),
            "automountServiceAccountToken": False,
            # The probe exits at SIGTERM; deleting the workload takes seconds, not the default 30.
            "terminationGracePeriodSeconds": 5,
            "containers": [_container(ask, image, shm_bytes)],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": shm}}],
        }
        if runtime_class:
            spec = {"runtimeClassName": runtime_class, **spec}
        if ask.device_class:
            spec["resourceClaims"] = [{"name": "gpus", "resourceClaimTemplateName": name}]
            out.append({"apiVersion": dra.API, "kind": "ResourceClaimTemplate",
                        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
                        "spec": {"spec": {"devices": {"requests": [{"name": "gpus", "exactly": {
                            "deviceClassName": ask.device_class, "allocationMode": "ExactCount",
                            "count": ask.count}}]}}}})
        out.append({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "labels": {**labels, **selector}},
            "spec": {"replicas": replicas, "selector": {"matchLabels": selector},
                     "template": {"metadata": {"labels": {**labels, **selector}}, "spec": spec}},
        })
    return out


def plan(cluster: Cluster, limit: list[str] | None = None, gpus: int | None = None) -> list[Ask]:
    """What each Kubernetes GPU node of the file (``limit``: only those) is asked for."""
    if not cluster.kubernetes.enabled:
        raise GpuProvisionError(f"{cluster.source}: --workload needs cluster.kubernetes.enabled: true")
    asks = [ask_for(cluster, node, gpus) for node in cluster.nodes if not limit or node.name in limit]
    return [a for a in asks if a is not None]


# -- judging ---------------------------------------------------------------------------------------------------


def probe_lines(log: str) -> list[dict[str, Any]]:
    """The replica's JSON lines in a pod's log (the marked ones; anything else the image printed is left)."""
    out = []
    for line in log.splitlines():
        text = line[line.find("{"):] if "{" in line else ""
        if MARK in text:
            try:
                out.append(json.loads(text))
            except ValueError:
                continue
    return out


def pod_problem(pod: dict[str, Any]) -> str | None:
    """Why a pod is not running, as Kubernetes says it: the scheduler's message, a waiting container's reason
    and message (ImagePullBackOff, CrashLoopBackOff, ...), or its phase; None for a running pod."""
    status = pod.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return f"not scheduled: {condition.get('message') or condition.get('reason') or 'Unschedulable'}"
    for container in status.get("containerStatuses") or []:
        waiting = (container.get("state") or {}).get("waiting")
        if waiting:
            return f"{waiting.get('reason', 'waiting')}: {waiting.get('message', '')}".rstrip(": ")
        terminated = (container.get("state") or {}).get("terminated")
        if terminated:
            return f"container exited with code {terminated.get('exitCode')} ({terminated.get('reason', '')})"
    phase = status.get("phase") or "Pending"
    return None if phase == "Running" else f"pod {phase}"


def _check(check_id: str, ok: bool | None, measured: Any, expected: Any, reason: str) -> Check:
    """The agent's own check of ``ok``, or a skip with ``reason`` where there is nothing to judge (``ok`` None)."""
    return (checks_of.skipped(check_id, reason, expected) if ok is None
            else checks_of.judge(check_id, ok, measured, expected, reason))


def judge(ask: Ask, replicas: int, shm_bytes: int, pods: list[dict[str, Any]],
          lines: dict[str, dict[str, Any]], started: str, wall_s: float) -> dict[str, Any]:
    """One node's report from its workload pods and the lines they printed (pod name -> line)."""
    running = [p for p in pods if pod_problem(p) is None]
    problems = sorted({problem for p in pods if (problem := pod_problem(p))})
    scheduled = [p for p in pods if (p.get("spec") or {}).get("nodeName")]
    elsewhere = sorted({p["spec"]["nodeName"] for p in scheduled if p["spec"]["nodeName"] != ask.node})
    not_scheduled = next((x for x in problems if x.startswith("not scheduled")), "")
    checks = [
        _check("workload.pods.scheduled", len(scheduled) >= replicas and not elsewhere,
               {"pods": len(pods), "scheduled": len(scheduled), "nodes": sorted({p["spec"]["nodeName"]
                                                                                 for p in scheduled})},
               {"replicas": replicas, "node": ask.node, "asks": ask.wording},
               f"scheduled on {', '.join(elsewhere)}, not {ask.node}" if elsewhere else
               not_scheduled or f"{len(scheduled)} of {replicas} replica(s) scheduled"),
        _check("workload.pods.running", len(running) >= replicas and len(lines) >= replicas,
               {"running": len(running), "reported": len(lines)}, {"replicas": replicas},
               problems[0] if problems else f"{len(lines)} of {replicas} replica(s) printed their probe line"),
    ]
    cuda_ok, cuda_reason, devices_seen = _judge_cuda(ask, list(lines.values()))
    checks.append(_check("workload.cuda.vector_add", cuda_ok if lines else None,
                         {"replicas": len(lines), "devices": devices_seen},
                         {"devices_per_replica": ask.count, "mismatches": 0},
                         cuda_reason if lines else "no replica printed its probe line"))
    shm_ok, shm_reason, shm_seen = _judge_shm(shm_bytes, list(lines.values()))
    checks.append(_check("workload.shm.size", shm_ok if lines else None, shm_seen,
                         {"min_bytes": shm_bytes, "writable": True},
                         shm_reason if lines else "no replica printed its probe line"))
    counts = summarize(checks)
    return {"schema": "verify-report.v1", "node": ask.node, "agent_version": MARK, "started": started,
            "finished": now_stamp(), "wall_s": round(wall_s, 3), "status": "fail" if counts["fail"] else "pass",
            "error": None, "host": {}, "summary": counts, "checks": [c.to_dict() for c in checks]}


def _judge_cuda(ask: Ask, lines: list[dict[str, Any]]) -> tuple[bool, str, list[int]]:
    seen, reasons = [], []
    for line in lines:
        result = line.get("cuda") or {}
        if "error" in result:
            reasons.append(f"in pod {line.get('pod')}: {result['error']}")
            seen.append(0)
            continue
        devices = result.get("devices") or []
        seen.append(len(devices))
        bad = [d for d in devices if "error" in d or (d.get("vector_add") or {}).get("mismatches") != 0]
        if bad:
            first = bad[0]
            reasons.append(f"in pod {line.get('pod')}: device {first.get('ordinal')}: "
                           f"{first.get('error') or 'vector add gave wrong results'}")
        elif len(devices) != ask.count:
            reasons.append(f"pod {line.get('pod')} saw {len(devices)} CUDA device(s), asked for {ask.wording}")
    return not reasons, reasons[0] if reasons else "", seen


def _judge_shm(shm_bytes: int, lines: list[dict[str, Any]]) -> tuple[bool, str, dict[str, Any]]:
    readings = [line.get("shm") or {} for line in lines]
    sizes = [r.get("bytes", 0) for r in readings]
    measured = {"min_bytes": min(sizes, default=0), "fs": sorted({str(r.get("fs")) for r in readings})}
    for line, reading in zip(lines, readings):
        if "error" in reading:
            return False, f"in pod {line.get('pod')}: /dev/shm: {reading['error']}", measured
        if reading.get("bytes", 0) < shm_bytes:
            return False, (f"in pod {line.get('pod')}: /dev/shm holds {reading.get('bytes', 0)} bytes, below the "
                           f"{shm_bytes} asked for"), measured
        if reading.get("written") != SHM_PROBE_BYTES:
            return False, f"in pod {line.get('pod')}: /dev/shm did not keep what was written", measured
    return True, "", measured


# -- running ---------------------------------------------------------------------------------------------------


@dataclass
class Run:
    """One ``verify --workload`` run against a cluster through kubectl."""

    asks: list[Ask]
    namespace: str
    kubeconfig: str | None
    replicas: int = DEFAULT_REPLICAS
    shm: str = DEFAULT_SHM
    timeout_s: float = DEFAULT_TIMEOUT_S
    interval_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep

    def _pods(self) -> list[dict[str, Any]]:
        text = kubectl(self.kubeconfig, "get", "pods", "-n", self.namespace, "-l",
                       f"app.kubernetes.io/name={APP}", "-o", "json")
        return list(json.loads(text).get("items") or [])

    def _lines(self, pod: dict[str, Any]) -> list[dict[str, Any]]:
        try:
            return probe_lines(kubectl(self.kubeconfig, "logs", "-n", self.namespace, pod["metadata"]["name"],
                                       "-c", "cuda"))
        except GpuProvisionError:
            return []  # not started yet: the next round asks again

    def execute(self, objects: list[dict[str, Any]], show: Callable[[int, int, int], None]) -> list[dict[str, Any]]:
        """Apply ``objects``, wait for every replica's line or the timeout, judge each node, delete the objects."""
        import tempfile

        started, began = now_stamp(), self.clock()
        by_name = {object_name(a.node): a for a in self.asks}
        # The namespace is the project's own (in-cluster verification runs there too): it is made, never deleted.
        owned = [obj for obj in objects if obj["kind"] != "Namespace"]
        with tempfile.NamedTemporaryFile("w", suffix=".json") as handle, \
                tempfile.NamedTemporaryFile("w", suffix=".json") as made:
            json.dump({"apiVersion": "v1", "kind": "List", "items": objects}, handle)
            handle.flush()
            json.dump({"apiVersion": "v1", "kind": "List", "items": owned}, made)
            made.flush()
            try:
                # Inside the try: what an apply refused half-way had made is deleted too.
                kubectl(self.kubeconfig, "apply", "-f", handle.name)
                lines: dict[str, dict[str, dict[str, Any]]] = {name: {} for name in by_name}
                pods: list[dict[str, Any]] = []
                deadline = self.clock() + self.timeout_s
                while True:
                    pods = self._pods()
                    for pod in pods:
                        owner = (pod["metadata"].get("labels") or {}).get(NODE_LABEL)
                        if owner in lines and pod["metadata"]["name"] not in lines[owner] and \
                                pod_problem(pod) is None:
                            found = self._lines(pod)
                            if found:
                                lines[owner][pod["metadata"]["name"]] = found[-1]
                    done = sum(len(v) >= self.replicas for v in lines.values())
                    show(done, 0, len(by_name))
                    if done == len(by_name) or self.clock() >= deadline:
                        break
                    self.sleep(self.interval_s)
                shm_bytes = quantity_bytes(self.shm)
                wall = self.clock() - began
                reports = [judge(ask, self.replicas, shm_bytes,
                                 [p for p in pods if (p["metadata"].get("labels") or {}).get(NODE_LABEL) == name],
                                 lines[name], started, wall)
                           for name, ask in sorted(by_name.items(), key=lambda kv: kv[1].node)]
            except BaseException:
                # The first failure is the one to read (an apply refused, an interrupt): a cleanup that fails
                # after it must not hide it.
                self._delete(made.name, quiet=True)
                raise
            self._delete(made.name)
            return reports

    def _delete(self, path: str, quiet: bool = False) -> None:
        """Delete what ``path`` lists; a failure is said on stderr (naming what to delete by hand), not raised."""
        import sys

        try:
            kubectl(self.kubeconfig, "delete", "-f", path, "--ignore-not-found", "--wait=false")
        except GpuProvisionError as exc:
            if not quiet:
                sys.stderr.write(f"warning: the workload's objects were not deleted ({exc}); delete them with "
                                 f"kubectl delete deployments,resourceclaimtemplates -n {self.namespace} "
                                 f"-l app.kubernetes.io/name={APP}\n")


def run(cluster: Cluster, namespace: str, kubeconfig: str | None, limit: list[str] | None = None,
        replicas: int = DEFAULT_REPLICAS, shm: str = DEFAULT_SHM, gpus: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S, show: Callable[[int, int, int], None] = lambda *_: None,
        manifest_only: bool = False) -> list[dict[str, Any]]:
    """Run the workload on the file's Kubernetes GPU nodes; the per-node reports (or, with ``manifest_only``,
    the objects it would apply)."""
    asks = plan(cluster, limit, gpus)
    nodes = [a.node for a in asks]
    settings = pod_settings(cluster, nodes)
    objects = manifests(asks, namespace, settings["image"], settings["tolerations"], replicas, shm)
    if manifest_only:
        return objects
    return Run(asks, namespace, kubeconfig, replicas, shm, timeout_s).execute(objects, show)
