"""The ``kubernetes`` probe section, run with the node's python3 against a fake kubectl on PATH."""

from __future__ import annotations

import importlib
import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

FAKE_KUBECTL = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
if "nodes" in args:
    items = [{"metadata": {"name": "gpu-1", "labels": {"zone": "a"}},
              "spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]},
              "status": {"nodeInfo": {"kubeletVersion": "v1.31.4"}}}]
elif "configmaps" in args:
    assert args[args.index("--field-selector") + 1] == "metadata.name=kubeadm-config"
    items = [{"metadata": {"name": "kubeadm-config"},
              "data": {"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta4\\nkubernetesVersion: v1.31.4\\n"}}]
elif "daemonsets.apps" in args:
    items = [{"metadata": {"name": "kube-flannel-ds", "namespace": "kube-flannel"}}]
elif any(a.startswith("deviceclasses.") for a in args):
    if "NODRA" in open(sys.argv[0] + ".mode").read():
        sys.stderr.write("error: the server doesn't have a resource type \\"deviceclasses\\"\\n")
        sys.exit(1)
    items = [{"kind": "DeviceClass", "metadata": {"name": "gpu.nvidia.com",
              "annotations": {"gpu-provision/content-sha256": "def"}}}]
elif "-l" in args:
    if "FAIL" in open(sys.argv[0] + ".mode").read():
        sys.stderr.write("The connection to the server 10.0.0.1:6443 was refused\\n")
        sys.exit(1)
    items = [{"kind": "ResourceQuota", "metadata": {"name": "gpu-quota", "namespace": "vision",
              "annotations": {"gpu-provision/content-sha256": "abc"}}},
             {"kind": "Namespace", "metadata": {"name": "vision"}}]
print(json.dumps({"items": items}))
"""


def load_section(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, mode: str = "OK") -> Any:
    # The section as the node's package holds it (it runs its commands through the probe's bounded runner).
    module = importlib.import_module("gpu_provision.node.probe.kubernetes")
    # A probe run of its own: an earlier test's run leaves its deadline behind in the shared runner, and once that
    # has passed every command here would get the runner's last-moment bound (0.5 s) and time out on a busy machine.
    from gpu_provision.node.probe import _command

    _command.start()
    admin = tmp_path / "admin.conf"
    admin.write_text("server: https://10.0.0.1:6443\n")
    monkeypatch.setattr(module, "ADMIN_CONF", str(admin))
    monkeypatch.setattr(module, "KUBELET_CONF", str(tmp_path / "absent.conf"))
    bindir = tmp_path / "bin"
    bindir.mkdir()
    kubectl = bindir / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(kubectl.stat().st_mode | stat.S_IXUSR)
    (bindir / "kubectl.mode").write_text(mode)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return module


def test_collect_reads_nodes_objects_and_daemonsets(monkeypatch, tmp_path) -> None:
    answer = load_section(monkeypatch, tmp_path).collect({})
    json.dumps(answer)  # the probe ships it as JSON
    assert answer["admin_conf"] is True and answer["kubelet_conf"] is False and answer["api_error"] is None
    assert answer["api"] == {
        "nodes": {"gpu-1": {"labels": {"zone": "a"}, "taints": [{"key": "gpu", "effect": "NoSchedule"}],
                            "kubelet_version": "v1.31.4"}},
        "objects": {"ResourceQuota/vision/gpu-quota": "abc", "Namespace//vision": None,
                    "DeviceClass//gpu.nvidia.com": "def"},
        "daemonsets": ["kube-flannel/kube-flannel-ds"],
        "cluster_version": "v1.31.4",
    }
    assert set(answer["module_features"]) == {"overlay", "br_netfilter"}
    assert isinstance(answer["addresses"], list)


def test_a_cluster_without_the_dra_api_has_no_dra_objects(monkeypatch, tmp_path) -> None:
    answer = load_section(monkeypatch, tmp_path, mode="NODRA").collect({})
    assert answer["api_error"] is None
    assert answer["api"]["objects"] == {"ResourceQuota/vision/gpu-quota": "abc", "Namespace//vision": None}


def test_the_probe_reads_every_kind_the_project_renders(example) -> None:
    """Drift and idempotence rest on it: a rendered kind the probe never lists is re-applied on every run and
    reported absent (DRA's DeviceClasses and ResourceClaimTemplates were)."""
    import dataclasses

    from gpu_provision.k8s import applied
    from gpu_provision.node.probe import kubernetes

    dra = dataclasses.replace(example, kubernetes=dataclasses.replace(example.kubernetes, gpu_allocation="dra"))
    rendered = {(o["apiVersion"], o["kind"]) for cluster in (example, dra)
                for objs in applied.manifests(cluster).values() for o in objs}
    listed = set((kubernetes.MANAGED_KINDS + "," + kubernetes.DRA_KINDS).split(","))
    for api_version, kind in sorted(rendered):
        group = api_version.rpartition("/")[0]
        plural = kind.lower() + ("es" if kind.endswith(("s", "ss")) else "s")
        assert (f"{plural}.{group}" if group else plural) in listed, (api_version, kind)


def test_collect_reports_an_api_that_does_not_answer(monkeypatch, tmp_path) -> None:
    answer = load_section(monkeypatch, tmp_path, mode="FAIL").collect({})
    assert answer["api"] is None
    assert "connection to the server 10.0.0.1:6443 was refused" in answer["api_error"]


def test_collect_without_admin_conf_asks_no_api(monkeypatch, tmp_path) -> None:
    module = load_section(monkeypatch, tmp_path)
    monkeypatch.setattr(module, "ADMIN_CONF", str(tmp_path / "none.conf"))
    answer = module.collect({})
    assert answer["admin_conf"] is False and answer["api"] is None and answer["api_error"] is None
