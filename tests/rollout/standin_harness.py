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

STANDINS = Path(__file__).resolve().parents[2] / "rig/gpu_provision_rig/standins/kubernetes"
sys.path.insert(0, str(STANDINS / "common"))
import standin_api  # noqa: E402

__all__ = ["kubectl", "kubelet", "load_script", "run_kubectl", "standin_api"]


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
