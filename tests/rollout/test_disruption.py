"""The disruption table: one case per row, the first match wins, and what no row names disrupts nothing."""

from __future__ import annotations

import pytest

from gpu_provision.desired import Difference, FileWant, GroupWant, PackageWant, UnitWant
from gpu_provision.rollout.disruption import RULES, classify, classify_want, rule_for, worst

#: (kind, item, class): one example for each row of RULES, in the table's order.
ROWS = [
    ("reboot", "driver", "reboot"),
    ("preflight", "kernel-guard", "reboot"),
    ("package", "linux-image-generic", "reboot"),
    ("package", "kernel", "reboot"),
    ("package", "kernel-core", "reboot"),
    ("package", "nvidia-container-toolkit", "none"),
    ("package", "libnvidia-container1", "none"),
    ("package", "nvidia-fabricmanager-580", "gpu-idle"),
    ("package", "nvidia-driver-pinning-580.159.04", "none"),
    ("package", "nvidia-driver-580-server-open", "gpu-idle"),
    ("package", "libnvidia-compute-580", "gpu-idle"),
    ("package", "cuda-drivers", "gpu-idle"),
    ("package", "kmod-nvidia-open-dkms", "gpu-idle"),
    ("package", "linux-modules-nvidia-580-server-open-6.8.0-47-generic", "gpu-idle"),
    ("driver", "preinstalled", "gpu-idle"),
    ("package", "containerd.io", "runtime-restart"),
    ("package", "docker-ce", "runtime-restart"),
    ("package", "docker.io", "runtime-restart"),
    ("package", "kubelet", "runtime-restart"),
    ("k8s-version", "control plane", "runtime-restart"),
    ("file", "/etc/modprobe.d/gpu-provision-nvidia.conf", "gpu-idle"),
    ("file", "/etc/containerd/conf.d/99-nvidia.toml", "runtime-restart"),
    ("file", "/etc/docker/daemon.json", "runtime-restart"),
    ("service", "nvidia-persistenced.service", "gpu-idle"),
    ("service-active", "nvidia-fabricmanager.service", "gpu-idle"),
    ("service", "containerd.service", "runtime-restart"),
    ("service-active", "docker.service", "runtime-restart"),
    ("mig-layout", "GPU 0", "gpu-idle"),
    ("vgpu", "GPU 3", "gpu-idle"),
]


def test_every_row_has_a_case_and_the_case_hits_that_row() -> None:
    assert len(ROWS) == len(RULES)
    for (kind, item, disruption), rule in zip(ROWS, RULES):
        assert rule_for(kind, item) is rule, (kind, item)
        assert rule.disruption == disruption
        assert rule.why


@pytest.mark.parametrize(("kind", "item", "disruption"), ROWS)
def test_each_row_classes_its_change(kind: str, item: str, disruption: str) -> None:
    assert classify(Difference(kind, item, "expected", "found", "stage")) == disruption


@pytest.mark.parametrize(("kind", "item"), [
    ("package", "linux-headers-6.8.0-47-generic"),  # headers alone change nothing that runs
    ("package", "kubeadm"),  # the tool alone: what it upgrades shows as kubelet and the cluster's version
    ("package-hold", "nvidia-driver-580-server"),  # a hold is bookkeeping
    ("file", "/etc/gpu-provision/mig-layout.yaml"),  # the layout changes GPUs only through a mig-layout difference
    ("file-mode", "/etc/containerd/config.toml"),
    ("service-enabled", "containerd.service"),  # enabled for the next boot: nothing restarts now
    ("group-members", "gpu"),
    ("device-file", "/dev/nvidia0"),
    ("k8s-label", "gpu-01 nvidia.com/mig.strategy"),
    ("preflight", "disk"),
    ("module", "ib_umad"),  # loading NVLSM's umad module stops nothing
    ("file", "/etc/modules-load.d/gpu-provision-nvlink5.conf"),
])
def test_what_no_row_names_disrupts_nothing(kind: str, item: str) -> None:
    assert classify(Difference(kind, item, "a", "b")) == "none"


def test_wants_are_classed_as_the_difference_they_would_close() -> None:
    assert classify_want(PackageWant("nvidia-driver-580-server", "580.95.05")) == "gpu-idle"
    assert classify_want(FileWant("/etc/containerd/config.toml", content="x")) == "runtime-restart"
    assert classify_want(UnitWant("nvidia-persistenced.service")) == "gpu-idle"
    assert classify_want(GroupWant("gpu", ("alice",))) == "none"
    assert classify_want(PackageWant("linux-image-generic", held=True)) == "reboot"


def test_a_node_is_as_disruptive_as_its_worst_change() -> None:
    assert worst([]) == "none"
    assert worst(["none", "runtime-restart"]) == "runtime-restart"
    assert worst(["gpu-idle", "runtime-restart", "none"]) == "gpu-idle"
    assert worst(["runtime-restart", "reboot", "gpu-idle"]) == "reboot"
