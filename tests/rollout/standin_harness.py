"""The stand-in Kubernetes kubelet and kubectl scripts loaded as modules here (no rig), for the tests of what they do:
the kubelet script's ``Handler`` serves the API (``conftest.server`` runs it on loopback) and the stand-in kubectl's
``main`` is called in this process."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import sys
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType
from typing import Any

STANDINS = Path(__file__).resolve().parents[2] / "rig/gpu_provision_rig/standins/kubernetes"
sys.path.insert(0, str(STANDINS / "common"))
import standin_api  # noqa: E402
import standin_dra  # noqa: E402

from gpu_provision.errors import GpuProvisionError  # noqa: E402

__all__ = ["GPU_TAINT", "in_process_kubectl", "kinds", "kubectl", "kubelet", "load_script", "node", "reconcile",
           "run_kubectl", "standin_api", "standin_dra"]

GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def load_script(name: str, path: Path) -> ModuleType:
    """A stand-in script (no ``.py``) as a module, without running its ``main``."""
    loader = SourceFileLoader(name, str(path))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(name, loader))
    loader.exec_module(module)
    return module


kubelet = load_script("standin_kubelet", STANDINS / "kubelet/root/usr/bin/kubelet")
kubectl = load_script("standin_kubectl", STANDINS / "kubectl/root/usr/bin/kubectl")


def run_kubectl(args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    """The stand-in kubectl's main, in this process: exit status, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    old_stdin = sys.stdin
    sys.stdin = io.StringIO(stdin or "")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = kubectl.main(args)
    finally:
        sys.stdin = old_stdin
    return rc, out.getvalue(), err.getvalue()


def in_process_kubectl(kubeconfig: str | None, *args: str) -> str:
    """``workload.kubectl`` through the stand-in kubectl in this process."""
    rc, out, err = run_kubectl(list(args))
    if rc:
        raise GpuProvisionError(f"kubectl {' '.join(args)}: {err.strip()}")
    return out


def node(name: str, gpus: int = 0, taints: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A Node reachable on loopback, with ``gpus`` allocatable ``nvidia.com/gpu``."""
    status: dict[str, Any] = {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}
    if gpus:
        status["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "uid": f"uid-{name}",
                                                             "labels": {"kubernetes.io/hostname": name}},
            "spec": {"taints": taints or []}, "status": status}


def reconcile(items: list[dict[str, Any]], rounds: int = 3) -> None:
    """Run the control plane's passes (the kubelet's ``CONTROLLERS``) on ``items``."""
    for _ in range(rounds):
        for step in kubelet.CONTROLLERS:
            step(items)


def kinds(items: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in items if o["kind"] == kind]
