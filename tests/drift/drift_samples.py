"""Shared pieces of the drift tests: stage objects, a canned probe answer that matches them, cluster files."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpu_provision.desired import Difference, FileWant, GroupWant, PackageWant, UnitWant, request_for, sha256
from gpu_provision.state import NodeStateData, Request

DAEMON_JSON = '{\n  "default-runtime": "nvidia"\n}\n'
MODPROBE = "options nvidia NVreg_DeviceFileGID=990 NVreg_DeviceFileMode=0660\n"


def runtime_wants(node: Any, cluster: Any, state: NodeStateData) -> list[Any]:
    return [
        PackageWant("containerd", "1.6.20~ds1-1", held=True),
        FileWant("/etc/docker/daemon.json", content=DAEMON_JSON),
        UnitWant("containerd.service"),
    ]


def permission_wants(node: Any, cluster: Any, state: NodeStateData) -> list[Any]:
    return [GroupWant("gpu", ("alice",)), FileWant("/etc/modprobe.d/gpu-provision-nvidia.conf", content=MODPROBE)]


def mig_extra(node: Any, cluster: Any, state: NodeStateData) -> list[Difference]:
    # Stands for a stage with state that is not a generic want (as the MIG stage has).
    actual = state.section("mig").get("layout")
    return [] if actual == {"1g.18gb": 7} else [Difference("mig-layout", "GPU 0", {"1g.18gb": 7}, actual, "mig")]


def make_stage(name: str, wants: Any, extra: Any = None, sections: frozenset[str] = frozenset()) -> SimpleNamespace:
    """A stage object following the stage protocol (request/wants/extra_differences)."""

    def request(node: Any, cluster: Any) -> Request:
        req = request_for(wants(node, cluster, NodeStateData({})))
        req.sections |= set(sections)
        return req

    stage = SimpleNamespace(NAME=name, request=request, wants=wants)
    if extra is not None:
        stage.extra_differences = extra
    return stage


IN_SYNC: dict[str, Any] = {
    "system": {"os_id": "debian"},
    "packages": {"manager": "apt", "packages": {"containerd": {"version": "1.6.20~ds1-1", "held": True}}},
    "files": {
        "/etc/docker/daemon.json": {"exists": True, "type": "file", "mode": "0644", "owner": "root",
                                    "group": "root", "sha256": sha256(DAEMON_JSON)},
        "/etc/modprobe.d/gpu-provision-nvidia.conf": {"exists": True, "type": "file", "mode": "0644",
                                                      "owner": "root", "group": "root", "sha256": sha256(MODPROBE)},
    },
    "services": {"containerd.service": {"loaded": True, "enabled": "enabled", "active": "active"}},
    "accounts": {"gpu": {"gid": 990, "members": ["alice"]}},
    "mig": {"layout": {"1g.18gb": 7}},
}


def write_cluster(path: Path, nodes: list[dict[str, Any]], connect_timeout: int = 2) -> Path:
    """A cluster file (JSON is YAML) with loopback nodes and no GPUs."""
    doc = {
        "version": "v1",
        "cluster": {"name": "drift-test", "kubernetes": {"enabled": False},
                    "ssh": {"user": "root", "connect_timeout": connect_timeout, "strict_host_key_checking": False}},
        "nodes": nodes,
    }
    path.write_text(json.dumps(doc))
    return path
