"""Checks that go through other programs: a GPU container via Docker or containerd, and Kubernetes.

The container check asks ``nvidia-smi -L`` inside a container started the way the cluster file configures the
runtime (the NVIDIA runtime by name, or CDI device names). The Kubernetes checks read the node's allocatable
resources and run the agent's own CUDA probe in a pod that requests one GPU.
"""

from __future__ import annotations

import json
import os
import time

from ..operand import operand
from . import cuda
from .readings import run

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

NVIDIA_RUNTIME_BINARY = "/usr/bin/nvidia-container-runtime"
KUBECONFIGS = ("/etc/kubernetes/admin.conf", "/etc/kubernetes/kubelet.conf")


def container_command(spec: dict[str, Any]) -> list[str] | None:
    """Return the argv that starts a GPU container as configured, or None when no image is set."""
    if not spec.get("image"):
        return None
    image = operand(spec["image"])
    name = f"gpu-provision-verify-{os.getpid()}"
    if spec.get("kind") == "docker":
        if spec.get("cdi"):
            return ["docker", "run", "--rm", "--name", name, "--device", "nvidia.com/gpu=all", image, "nvidia-smi", "-L"]
        return ["docker", "run", "--rm", "--name", name, "--runtime", spec.get("runtime") or "nvidia",
                "-e", "NVIDIA_VISIBLE_DEVICES=all", image, "nvidia-smi", "-L"]
    # containerd: ctr starts the NVIDIA runtime directly; with CDI the runtime resolves fully qualified device
    # names given in NVIDIA_VISIBLE_DEVICES.
    devices = "nvidia.com/gpu=all" if spec.get("cdi") else "all"
    return ["ctr", "--namespace", spec.get("namespace") or "gpu-provision", "run", "--rm",
            f"--runc-binary={spec.get('runtime_binary') or NVIDIA_RUNTIME_BINARY}",
            "--env", f"NVIDIA_VISIBLE_DEVICES={devices}", image, name, "nvidia-smi", "-L"]


def run_container(spec: dict[str, Any], timeout: float = 180.0) -> dict[str, Any] | None:
    """Start the GPU container; return the run's result (with ``error`` when it could not start), or None."""
    try:
        argv = container_command(spec)
    except ValueError as exc:
        return {"error": str(exc), "command": []}
    if argv is None:
        return None
    if spec.get("kind") == "containerd":
        namespace = spec.get("namespace") or "gpu-provision"
        pulled = run(["ctr", "--namespace", namespace, "images", "pull", operand(spec["image"])], timeout=timeout)
        if pulled.get("error") or pulled.get("returncode"):
            return {"error": f"image pull failed: {(pulled.get('error') or pulled.get('stderr', '')).strip()[:200]}",
                    "command": pulled["command"]}
    return run(argv, timeout=timeout)


def kubeconfig(spec: dict[str, Any]) -> str | None:
    """Return the kubeconfig to use: the cluster file's, else admin.conf, else the kubelet's own."""
    if spec.get("kubeconfig"):
        return spec["kubeconfig"]
    return next((path for path in KUBECONFIGS if os.path.exists(path)), None)


def kubectl(config: str, *args: str, stdin: str | None = None, timeout: float = 60.0) -> dict[str, Any]:
    """Run kubectl against ``config``; feeds ``stdin`` through a temporary file when given."""
    argv = ["kubectl", "--kubeconfig", config, *args]
    if stdin is None:
        return run(argv, timeout=timeout)
    import tempfile  # here: the pod and container checks alone write one, and the import costs every run

    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        handle.write(stdin)
        handle.flush()
        return run([*argv, "-f", handle.name], timeout=timeout)


def get_json(spec: dict[str, Any], kind: str, *args: str) -> tuple[dict[str, Any] | None, str | None]:
    """``kubectl get KIND ARGS -o json`` with this node's kubeconfig: the object, or an error message."""
    config = kubeconfig(spec)
    if config is None:
        return None, "no kubeconfig on this node (admin.conf or kubelet.conf)"
    result = kubectl(config, "get", kind, *args, "-o", "json")
    if "error" in result:
        return None, f"kubectl: {result['error']}"
    if result["returncode"] != 0:
        return None, f"kubectl get {kind} failed: {result['stderr'].strip()[:200]}"
    return json.loads(result["stdout"]), None


def read_node(spec: dict[str, Any]) -> tuple[dict[str, Any] | None, str | None]:
    """Return the Node object of this node, or an error message."""
    return get_json(spec, "node", spec["node_name"])


def read_node_settled(spec: dict[str, Any], settle_s: float = 60.0, interval_s: float = 2.0,
                      clock: Any = time.monotonic, sleep: Any = time.sleep) -> tuple[dict[str, Any] | None, str | None]:
    """The Node object once its ``nvidia.com/*`` allocatable equals what the file implies, or after ``settle_s``.

    The device plugin registers its resources some seconds after its pod starts (right after a deploy), so a
    verification that runs then waits for them, bounded, instead of failing on a node that is still settling.
    """
    wanted = {k: str(v) for k, v in (spec.get("allocatable") or {}).items()}
    deadline = clock() + settle_s
    while True:
        node, error = read_node(spec)
        if error is not None:
            return node, error
        allocatable = ((node or {}).get("status") or {}).get("allocatable") or {}
        found = {k: str(v) for k, v in allocatable.items() if k.startswith("nvidia.com/")}
        if found == wanted or clock() >= deadline:
            return node, None
        sleep(interval_s)


def pod_manifest(spec: dict[str, Any], resource: str) -> dict[str, Any]:
    """A pod pinned to this node, asking for one ``resource``, running the agent's CUDA probe in python3."""
    # inspect reads it through whichever loader imported the module (zipimport in the kept agent) or from its file;
    # imported here, where a pod is asked for, because its import costs more than every state check of a run.
    import inspect

    probe_source = inspect.getsource(cuda)
    script = f"{probe_source}\nimport json\nprint(json.dumps(probe_devices(bandwidth=False)))\n"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"gpu-provision-verify-{spec['node_name']}"[:63].rstrip("-."),
                     "namespace": spec.get("namespace") or "default",
                     "labels": {"app.kubernetes.io/name": "gpu-provision-verify"}},
        "spec": {
            "nodeName": spec["node_name"],
            "restartPolicy": "Never",
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "cuda",
                "image": spec["pod_image"],
                "command": ["python3", "-c", script],
                # Without "compute" the NVIDIA runtime mounts no libcuda.so.1 into the container.
                "env": [{"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"}],
                "resources": {"limits": {resource: 1}},
            }],
        },
    }


def run_pod(spec: dict[str, Any], timeout: float = 180.0) -> tuple[dict[str, Any] | None, str | None]:
    """Create the probe pod, wait for it to finish, read its JSON line from the logs, delete it."""
    config = kubeconfig(spec)
    if config is None:
        return None, "no kubeconfig on this node"
    resources = sorted((spec.get("allocatable") or {"nvidia.com/gpu": 1}).keys())
    manifest = pod_manifest(spec, resources[0])
    name, namespace = manifest["metadata"]["name"], manifest["metadata"]["namespace"]
    kubectl(config, "delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=true")
    created = kubectl(config, "create", stdin=json.dumps(manifest))
    if created.get("error") or created.get("returncode"):
        return None, f"pod not created: {(created.get('error') or created.get('stderr', '')).strip()[:200]}"
    try:
        deadline = time.monotonic() + timeout
        phase = ""
        while time.monotonic() < deadline:
            got = kubectl(config, "get", "pod", name, "-n", namespace, "-o", "jsonpath={.status.phase}")
            phase = got.get("stdout", "").strip()
            if phase in ("Succeeded", "Failed"):
                break
            time.sleep(1.0)
        logs = kubectl(config, "logs", name, "-n", namespace)
        lines = [line for line in logs.get("stdout", "").splitlines() if line.startswith("{")]
        if phase != "Succeeded" or not lines:
            tail = (logs.get("stdout", "") + logs.get("stderr", "")).strip().splitlines()[-1:] or [""]
            return None, f"pod ended {phase or 'without finishing'} in {timeout:.0f} s: {tail[0][:200]}"
        return json.loads(lines[-1]), None
    finally:
        kubectl(config, "delete", "pod", name, "-n", namespace, "--ignore-not-found", "--wait=false")

