"""After a MIG change on a DRA node (``--plugin=dra``, from ``kubernetes.gpu_allocation: dra``) the node applier
restarts NVIDIA's DRA kubelet plugin, found by its pod label, so the plugin publishes the node's new MIG devices in
its ResourceSlices; other pods are left alone, and the boot unit (before kubelet) restarts nothing."""

from __future__ import annotations

from typing import get_args

from migsim import MigNode

from gpu_provision.node.mig.holders import DRA_PLUGIN_LABEL
from gpu_provision.node.mig.layout import DEFAULT_PLUGIN, PLUGINS
from gpu_provision.spec.model import GpuAllocation, Kubernetes

LAYOUT = {"version": "v1", "mig-configs": {"node-1": [
    {"device-filter": ["0x233510DE"], "devices": [0], "mig-enabled": True, "mig-devices": {"3g.71gb": 2}}]}}
PODS = {
    "pod-dra": {"labels": dict([DRA_PLUGIN_LABEL]), "state": "ready",
                "containers": {"c-gpus": "gpus"}},
    "pod-web": {"labels": {"app.kubernetes.io/name": "web"}, "state": "ready", "containers": {"c-web": "web"}},
}


def _stops(mig_node: MigNode) -> list[str]:
    return [line.split()[1] for line in mig_node.crictl_log() if line.startswith("stop ")]


def test_a_change_restarts_the_dra_plugin_pod(mig_node: MigNode) -> None:
    mig_node.run_pods(PODS)
    plan = mig_node.apply(LAYOUT, "--plugin=dra", command="plan")
    assert plan.stdout.splitlines()[-1].startswith("restart the DRA kubelet plugin"), plan.stdout
    result = mig_node.apply(LAYOUT, "--plugin=dra")
    assert result.returncode == 0, result.stdout
    assert _stops(mig_node) == ["c-gpus"]
    assert "pods -q --state ready --label " + "=".join(DRA_PLUGIN_LABEL) in mig_node.crictl_log()
    assert "restarted the DRA kubelet plugin" in result.stdout


def test_with_kubelet_running_the_plugin_also_lets_go_of_the_gpus_first(mig_node: MigNode) -> None:
    """Stopped with kubelet before the change (it holds the GPUs through NVML), restarted after it."""
    mig_node.start_units("kubelet.service")
    mig_node.run_pods(PODS)
    result = mig_node.apply(LAYOUT, "--plugin=dra")
    assert result.returncode == 0, result.stdout
    assert _stops(mig_node) == ["c-gpus", "c-gpus"]


def test_no_change_and_boot_restart_nothing(mig_node: MigNode) -> None:
    assert mig_node.apply(LAYOUT, "--plugin=dra").returncode == 0
    mig_node.run_pods(PODS)
    (mig_node.root / "crictl.log").unlink()
    again = mig_node.apply(LAYOUT, "--plugin=dra")
    assert again.returncode == 0 and _stops(mig_node) == []
    mig_node.reboot()
    boot = mig_node.apply(LAYOUT, command="boot")
    assert boot.returncode == 0, boot.stdout
    assert _stops(mig_node) == [] and "DRA kubelet plugin" not in boot.stdout


def test_a_node_without_the_dra_driver_has_nothing_restarted(mig_node: MigNode) -> None:
    mig_node.run_pods({"pod-web": PODS["pod-web"]})
    result = mig_node.apply(LAYOUT, "--plugin=dra")
    assert result.returncode == 0 and _stops(mig_node) == []
    assert "DRA kubelet plugin" not in result.stdout


def test_a_device_plugin_node_leaves_a_dra_labelled_pod_alone(mig_node: MigNode) -> None:
    """The default plugin is the device plugin: a pod that merely carries the DRA plugin's label is not touched."""
    mig_node.run_pods(PODS)
    result = mig_node.apply(LAYOUT)
    assert result.returncode == 0, result.stdout
    assert _stops(mig_node) == [] and "DRA kubelet plugin" not in result.stdout


def test_a_node_without_kubernetes_plans_no_restart(mig_node: MigNode) -> None:
    plan = mig_node.apply(LAYOUT, "--plugin=none", command="plan")
    assert plan.returncode == 0, plan.stdout
    assert not any(line.startswith("restart ") for line in plan.stdout.splitlines())


def test_the_plugin_named_by_default_is_the_cluster_files_default_allocation() -> None:
    """The applier, its plan and the stage restart ``DEFAULT_PLUGIN`` when told nothing: the plugin a cluster file
    that leaves ``kubernetes.gpu_allocation`` out runs; and the plugins the applier knows are those the file may
    choose."""
    assert Kubernetes().gpu_allocation == DEFAULT_PLUGIN
    assert set(PLUGINS) == set(get_args(GpuAllocation))
