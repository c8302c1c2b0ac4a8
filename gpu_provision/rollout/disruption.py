"""What each change the deploy can make disrupts, in one table.

A change is a drift :class:`~gpu_provision.desired.Difference` (or a want, read as the difference it would close):
its kind and item are matched against :data:`RULES` in order, the first row that matches gives its class, and a
change no row names disrupts nothing. A node's class is the most disruptive of its changes. The rollout keeps nodes
whose changes disrupt nothing out of its batches; the others go in batches (:mod:`gpu_provision.rollout.batches`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

from gpu_provision.desired import Difference, FileWant, GroupWant, PackageWant, UnitWant, Want

Disruption = Literal["none", "runtime-restart", "gpu-idle", "reboot"]
#: The classes from least to most disruptive.
ORDER: tuple[Disruption, ...] = ("none", "runtime-restart", "gpu-idle", "reboot")

PACKAGE = ("package",)
FILE = ("file",)
#: A unit installed or started (enabling it for the next boot alone disrupts nothing).
SERVICE = ("service", "service-active")


@dataclass(frozen=True)
class Rule:
    """Changes of one of ``kinds`` whose item matches the glob ``item`` disrupt as ``disruption`` says, because
    ``why``."""

    kinds: tuple[str, ...]
    item: str
    disruption: Disruption
    why: str

    def matches(self, kind: str, item: str) -> bool:
        """Whether a change of ``kind`` to ``item`` is one this row classes."""
        return kind in self.kinds and fnmatchcase(item, self.item)


_DRIVER = "the GPU driver is replaced: its kernel modules reload with no process holding a GPU"
_RUNTIME = "the container runtime restarts to read it"
_KUBELET = ("kubelet restarts at another version: kubeadm's upgrade guide drains a node before its kubelet changes "
            "(packages.json kubernetes.upgrade)")
#: The table, first match wins. Kernel and driver packages before the generic NVIDIA rows, toolkit rows before
#: the ``libnvidia-*`` driver libraries.
RULES: tuple[Rule, ...] = (
    Rule(("reboot",), "*", "reboot", "the node runs another driver or module than it has installed until it reboots"),
    Rule(("preflight",), "kernel-guard", "reboot", "a kernel is installed but not running: the next boot starts it"),
    Rule(PACKAGE, "linux-image-*", "reboot", "a new kernel runs only after a reboot"),
    Rule(PACKAGE, "kernel", "reboot", "a new kernel runs only after a reboot"),
    Rule(PACKAGE, "kernel-core", "reboot", "a new kernel runs only after a reboot"),
    Rule(PACKAGE, "nvidia-container-*", "none", "the toolkit's hook runs when a container starts"),
    Rule(PACKAGE, "libnvidia-container*", "none", "the toolkit's hook runs when a container starts"),
    Rule(PACKAGE, "nvidia-fabricmanager*", "gpu-idle", "Fabric Manager restarts, which NVSwitch GPU jobs depend on"),
    Rule(PACKAGE, "nvidia-driver-pinning-*", "none",
         "NVIDIA's pinning package holds an apt preferences file: apt reads it, nothing running does"),
    Rule(PACKAGE, "nvidia-*", "gpu-idle", _DRIVER),
    Rule(PACKAGE, "libnvidia-*", "gpu-idle", _DRIVER),
    Rule(PACKAGE, "cuda-drivers*", "gpu-idle", _DRIVER),
    Rule(PACKAGE, "kmod-nvidia-*", "gpu-idle", _DRIVER),
    Rule(PACKAGE, "linux-modules-nvidia-*", "gpu-idle", _DRIVER),
    Rule(("driver",), "*", "gpu-idle", _DRIVER),
    Rule(PACKAGE, "containerd*", "runtime-restart", "the container runtime restarts on upgrade"),
    Rule(PACKAGE, "docker-ce", "runtime-restart", "the container runtime restarts on upgrade"),
    Rule(PACKAGE, "docker.io", "runtime-restart", "the container runtime restarts on upgrade"),
    Rule(PACKAGE, "kubelet", "runtime-restart", _KUBELET),
    Rule(("k8s-version", "kubelet-version", "kubelet-restart"), "*", "runtime-restart", _KUBELET),
    Rule(FILE, "/etc/modprobe.d/*", "gpu-idle", "module options apply when the NVIDIA modules load again"),
    Rule(FILE, "/etc/containerd/*", "runtime-restart", _RUNTIME),
    Rule(FILE, "/etc/docker/daemon.json", "runtime-restart", _RUNTIME),
    Rule(SERVICE, "nvidia-persistenced.service", "gpu-idle", "persistenced holds every GPU open"),
    Rule(SERVICE, "nvidia-fabricmanager.service", "gpu-idle", "Fabric Manager starts with no NVSwitch job running"),
    Rule(SERVICE, "containerd.service", "runtime-restart", "the container runtime starts or restarts"),
    Rule(SERVICE, "docker.service", "runtime-restart", "the container runtime starts or restarts"),
    Rule(("mig-layout",), "*", "gpu-idle", "GPU instances are destroyed and created again"),
    Rule(("vgpu",), "*", "gpu-idle", "virtual functions are reassigned"),
)


def rule_for(kind: str, item: str) -> Rule | None:
    """The first row of :data:`RULES` for a change of ``kind`` to ``item``, None when no row names it."""
    return next((rule for rule in RULES if rule.matches(kind, item)), None)


def classify(difference: Difference) -> Disruption:
    """What closing ``difference`` disrupts."""
    rule = rule_for(difference.kind, str(difference.item))
    return rule.disruption if rule else "none"


def want_change(want: Want) -> tuple[str, str]:
    """The difference kind and item a want that is not met reports (a package, file, service or group)."""
    if isinstance(want, PackageWant):
        return "package", want.name
    if isinstance(want, FileWant):
        return "file", want.path
    if isinstance(want, UnitWant):
        return "service", want.name
    if isinstance(want, GroupWant):
        return "group", want.name
    raise TypeError(f"not a want: {want!r}")


def classify_want(want: Want) -> Disruption:
    """What meeting ``want`` disrupts on a node that does not meet it."""
    kind, item = want_change(want)
    rule = rule_for(kind, item)
    return rule.disruption if rule else "none"


def worst(classes: Iterable[Disruption]) -> Disruption:
    """The most disruptive of ``classes`` (``none`` for none)."""
    return max(classes, key=ORDER.index, default="none")
