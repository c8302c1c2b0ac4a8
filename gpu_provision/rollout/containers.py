"""GPU containers on a node outside Kubernetes: how the rollout finds them through the runtime, and stops them.

One shell command (:data:`LIST_COMMAND`) prints ``docker inspect`` of every running Docker container and ``ctr
containers info`` of every running containerd task (Docker's own ``moby`` namespace left out: those are the Docker
containers), each after a ``### `` header line; :func:`parse_listing` reads that on the controller. A container
holds a GPU when it has a GPU device request (``docker run --gpus``), runs under the ``nvidia`` runtime, sets
``NVIDIA_VISIBLE_DEVICES`` to a device list (the toolkit's way), or has an ``/dev/nvidia*`` device.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

LIST_COMMAND = (
    "if command -v docker >/dev/null 2>&1; then ids=$(docker ps -q --no-trunc 2>/dev/null); "
    "if [ -n \"$ids\" ]; then echo '### docker'; docker inspect $ids; fi; fi; "
    "if command -v ctr >/dev/null 2>&1; then for ns in $(ctr namespaces ls -q 2>/dev/null); do "
    "[ \"$ns\" = moby ] && continue; "
    "for id in $(ctr -n \"$ns\" tasks ls 2>/dev/null | awk 'NR>1 && $3==\"RUNNING\" {print $1}'); do "
    "echo \"### ctr $ns $id\"; ctr -n \"$ns\" containers info \"$id\"; done; done; fi; true"
)
#: ``NVIDIA_VISIBLE_DEVICES`` values that give a container no GPU.
NO_DEVICES = ("", "void", "none")


@dataclass(frozen=True)
class Container:
    """A running container that holds a GPU: its runtime (``docker``, or ``ctr`` with its namespace), id, name,
    and what shows it holds a GPU."""

    runtime: str
    id: str
    name: str
    why: str
    namespace: str = ""

    def describe(self) -> str:
        """``docker container trainer (a GPU device request)``."""
        where = f"ctr {self.namespace}" if self.runtime == "ctr" else self.runtime
        return f"{where} container {self.name or self.id[:12]} ({self.why})"

    def stop_command(self, timeout: int = 30) -> str:
        """The command that stops it as its runtime does (SIGTERM, then SIGKILL after ``timeout`` seconds)."""
        if self.runtime == "docker":
            return f"docker stop -t {int(timeout)} {shlex.quote(self.id)}"
        ns, cid = shlex.quote(self.namespace), shlex.quote(self.id)
        return (f"ctr -n {ns} tasks kill {cid} 2>/dev/null; for i in $(seq {int(timeout)}); do "
                f"ctr -n {ns} tasks ls | awk 'NR>1 && $3==\"RUNNING\" {{print $1}}' | grep -qx {cid} || break; "
                f"sleep 1; done; ctr -n {ns} tasks kill -s SIGKILL {cid} 2>/dev/null; "
                f"ctr -n {ns} tasks delete {cid} 2>/dev/null; true")


def _env_devices(env: Iterable[str]) -> str | None:
    for item in env or ():
        key, _, value = str(item).partition("=")
        if key == "NVIDIA_VISIBLE_DEVICES" and value.strip().lower() not in NO_DEVICES:
            return value
    return None


def docker_gpu_reason(inspect: dict[str, Any]) -> str | None:
    """Why a ``docker inspect`` entry holds a GPU, None when it does not."""
    host = inspect.get("HostConfig") or {}
    for request in host.get("DeviceRequests") or []:
        capabilities = [c for group in request.get("Capabilities") or [] for c in group]
        if request.get("Driver") == "nvidia" or "gpu" in capabilities:
            return "a GPU device request"
    if host.get("Runtime") == "nvidia":
        return "the nvidia runtime"
    if any(str(d.get("PathOnHost", "")).startswith("/dev/nvidia") for d in host.get("Devices") or []):
        return "an /dev/nvidia device"
    devices = _env_devices((inspect.get("Config") or {}).get("Env") or [])
    if devices is not None:
        return f"NVIDIA_VISIBLE_DEVICES={devices}"
    return None


def ctr_gpu_reason(info: dict[str, Any]) -> str | None:
    """Why a ``ctr containers info`` document holds a GPU, None when it does not."""
    if "nvidia" in str((info.get("Runtime") or {}).get("Name", "")):
        return "the nvidia runtime"
    spec = info.get("Spec") or {}
    devices = ((spec.get("linux") or {}).get("devices")) or []
    if any(str(d.get("path", "")).startswith("/dev/nvidia") for d in devices):
        return "an /dev/nvidia device"
    value = _env_devices((spec.get("process") or {}).get("env") or [])
    if value is not None:
        return f"NVIDIA_VISIBLE_DEVICES={value}"
    return None


def parse_listing(text: str) -> list[Container]:
    """The GPU containers in :data:`LIST_COMMAND`'s output; sections that do not parse are skipped."""
    out: list[Container] = []
    for section in text.split("### ")[1:]:
        header, _, body = section.partition("\n")
        words = header.split()
        try:
            doc = json.loads(body)
        except ValueError:
            continue
        if words[:1] == ["docker"] and isinstance(doc, list):
            for entry in doc:
                why = docker_gpu_reason(entry)
                if why:
                    out.append(Container("docker", str(entry.get("Id", "")), str(entry.get("Name", "")).lstrip("/"),
                                         why))
        elif words[:1] == ["ctr"] and len(words) == 3 and isinstance(doc, dict):
            why = ctr_gpu_reason(doc)
            if why:
                out.append(Container("ctr", words[2], words[2], why, namespace=words[1]))
    return out
