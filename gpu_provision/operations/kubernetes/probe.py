"""What every Kubernetes operation reads: the probe request for the ``kubernetes`` section and the API's answer.

The batched probe reads the kubeconfig files and, on a control plane, the API (nodes, objects, DaemonSets) in one
remote command; the operations share these helpers so they read the same answer and fail the same way when the API
is not there.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from gpu_provision.facts.state import executing
from gpu_provision.operations.commands import current_state, fail_command
from gpu_provision.state import NodeStateData, Request

ADMIN_CONF = "/etc/kubernetes/admin.conf"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
KUBECTL = f"kubectl --kubeconfig={ADMIN_CONF}"


def kubernetes_request(*files: str, contents: Sequence[str] = ()) -> Request:
    """The probe request for the ``kubernetes`` section plus ``files`` (and the text of ``contents``)."""
    return Request(files=set(files) | set(contents), contents=set(contents), sections={"system", "kubernetes"})


def kubernetes_section(state: NodeStateData) -> dict[str, Any]:
    """The probe's ``kubernetes`` section (empty when the probe did not read it)."""
    return state.section("kubernetes") or {}


def api_or_fail(host: Any, state: NodeStateData, what: str) -> tuple[dict[str, Any] | None, str | None]:
    """The API's answer as the probe read it on this control plane, or a command that fails the operation.

    Returns ``(api, None)`` or ``(None, failing command)``; ``what`` names the operation in the failure.
    """
    section = kubernetes_section(state)
    if section.get("api") is not None:
        return section["api"], None
    if not section.get("admin_conf"):
        if executing(host):
            return None, fail_command(f"{what}: {ADMIN_CONF} missing (kubeadm init did not run)")
        # At prepare time a control plane that is about to be initialised has no API yet.
        return {"nodes": {}, "objects": {}, "daemonsets": []}, None
    return None, fail_command(f"{what}: the API server did not answer: {section.get('api_error')}")


def control_plane_api(host: Any, what: str) -> Generator[str, Any, dict[str, Any] | None]:
    """The API as the probe read it on this control plane; where it cannot be read, yields the failing command.

    Used as ``api = yield from control_plane_api(host, what)`` in an operation, which returns when ``api`` is None:
    every Kubernetes operation fails the same way when the API is not there.
    """
    api, failure = api_or_fail(host, current_state(host, kubernetes_request()), what)
    if failure:
        yield failure
    return api
