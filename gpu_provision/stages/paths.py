"""Every install path the cluster file can select, rendered through the stages' own functions.

A path is one OS release and architecture with one choice per stage (kernel modules, Secure Boot, a pinned driver
version, Docker or containerd). For each, :func:`render_path` lays out what the stages would write and run on a
fresh node: repository files, the driver's preparation commands, the package commands (``packages.plan``) with
their pins and locks. ``docs/install-paths.md`` is this module's :func:`render` (``tools/gen_install_paths.py``);
tests/test_docs.py fails when the page is stale, and tests/stages/test_vendor_paths.py holds the vendors' facts the
rendered commands must contain.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from gpu_provision.desired import FileWant, PackageWant, Want
from gpu_provision.operations import packages
from gpu_provision.operations.kubernetes import upgrade
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages import distro, driver, kubernetes, preflight, runtime, toolkit
from gpu_provision.state import NodeStateData

SELINUX_CONFIG = "/etc/selinux/config"
_UBUNTU = {"os_id": "ubuntu", "os_like": "debian"}
_ROCKY = {"os_id": "rocky", "os_like": "rhel centos fedora"}
_ALMA = {"os_id": "almalinux", "os_like": "rhel centos fedora"}
_RHEL = {"os_id": "rhel", "os_like": "fedora"}

#: The releases and kernels paths are rendered for: (name, package manager, probe system section).
SYSTEMS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("Ubuntu 22.04 GA kernel, generic, x86_64", "apt",
     {**_UBUNTU, "os_version": "22.04", "codename": "jammy", "arch": "x86_64", "kernel": "5.15.0-125-generic"}),
    ("Ubuntu 22.04 HWE kernel, generic, x86_64", "apt",
     {**_UBUNTU, "os_version": "22.04", "codename": "jammy", "arch": "x86_64", "kernel": "6.8.0-45-generic"}),
    ("Ubuntu 24.04 GA kernel, generic, x86_64", "apt",
     {**_UBUNTU, "os_version": "24.04", "codename": "noble", "arch": "x86_64", "kernel": "6.8.0-45-generic"}),
    ("Ubuntu 24.04 lowlatency, x86_64", "apt",
     {**_UBUNTU, "os_version": "24.04", "codename": "noble", "arch": "x86_64", "kernel": "6.8.0-45-lowlatency"}),
    ("Ubuntu 24.04 -nvidia kernel, x86_64", "apt",
     {**_UBUNTU, "os_version": "24.04", "codename": "noble", "arch": "x86_64", "kernel": "6.8.0-1015-nvidia"}),
    ("Ubuntu 24.04 generic-64k, arm64", "apt",
     {**_UBUNTU, "os_version": "24.04", "codename": "noble", "arch": "aarch64", "kernel": "6.8.0-45-generic-64k"}),
    ("Ubuntu 24.04 nvidia-64k, arm64", "apt",
     {**_UBUNTU, "os_version": "24.04", "codename": "noble", "arch": "aarch64",
      "kernel": "6.8.0-1015-nvidia-64k"}),
    ("Debian 12, x86_64", "apt",
     {"os_id": "debian", "os_version": "12", "codename": "bookworm", "arch": "x86_64", "kernel": "6.1.0-28-amd64"}),
    ("Debian 13, arm64", "apt",
     {"os_id": "debian", "os_version": "13", "codename": "trixie", "arch": "aarch64", "kernel": "6.12.9-arm64"}),
    ("RHEL 9, x86_64", "dnf", {**_RHEL, "os_version": "9.4", "arch": "x86_64",
                               "kernel": "5.14.0-427.13.1.el9_4.x86_64"}),
    ("Rocky Linux 9, arm64 (sbsa)", "dnf", {**_ROCKY, "os_version": "9.4", "arch": "aarch64",
                                            "kernel": "5.14.0-427.13.1.el9_4.aarch64"}),
    ("AlmaLinux 9, x86_64", "dnf", {**_ALMA, "os_version": "9.4", "arch": "x86_64",
                                    "kernel": "5.14.0-427.13.1.el9_4.x86_64"}),
    ("Rocky Linux 10, x86_64", "dnf", {**_ROCKY, "os_version": "10.0", "arch": "x86_64",
                                       "kernel": "6.12.0-55.9.1.el10_0.x86_64"}),
)


@dataclass(frozen=True)
class Choice:
    """One combination of the node's settings a path is rendered with."""

    title: str
    kernel_modules: Literal["open", "proprietary"] = "open"
    secure_boot: str = "disabled"
    driver_version: str | None = None
    runtime: Literal["docker", "containerd"] = "docker"
    runtime_version: str | None = None
    ubuntu_only: bool = False
    install_method: Literal["package", "distro", "preinstalled"] = "package"
    branch: str | None = None


CHOICES = (
    Choice("open modules, branch held, Docker"),
    Choice("proprietary modules, exact driver version, containerd", kernel_modules="proprietary",
           driver_version="580.95.05", runtime="containerd"),
    Choice("open modules, Secure Boot (signed precompiled modules), exact versions", secure_boot="enabled",
           driver_version="580.95.05", runtime_version="27.3.1", ubuntu_only=True),
)


def state_for(manager: str, system: dict[str, Any], secure_boot: str = "disabled") -> NodeStateData:
    """A fresh node of ``system``: nothing NVIDIA installed, headers present, no files but (on dnf nodes) SELinux's
    configuration as RHEL installs it, enforcing."""
    kernel = system["kernel"]
    files = {SELINUX_CONFIG: {"exists": True, "type": "file", "content": "SELINUX=enforcing\nSELINUXTYPE=targeted\n"}}
    return NodeStateData({"system": {**system, "kernel_pending": kernel, "secure_boot": secure_boot,
                                     "headers": {kernel: True}, "modules": [], "nvidia_modules": {kernel: None}},
                          "packages": {"manager": manager, "packages": {}},
                          "files": files if manager == "dnf" else {}, "services": {}})


def node_for(node: Node, choice: Choice) -> Node:
    """``node`` with ``choice``'s settings; a repository path on an NVSwitch board (Fabric Manager on), so it shows the
    fabric's packages too (a fresh node's probe answer here has no PCI bus to decide ``auto`` from; the
    distribution's own packages carry no Fabric Manager)."""
    drv = replace(node.driver, kernel_modules=choice.kernel_modules, version=choice.driver_version,
                  install_method=choice.install_method, branch=choice.branch or node.driver.branch,
                  fabric_manager=choice.install_method == "package")
    rt = replace(node.container_runtime, kind=choice.runtime, version=choice.runtime_version,
                 docker_source="docker")
    return replace(node, driver=drv, container_runtime=rt)


def _files(wants: list[Want]) -> list[FileWant]:
    return [w for w in wants if isinstance(w, FileWant) and w.content is not None and "/etc/" in w.path
            and ("sources.list.d" in w.path or "preferences.d" in w.path or "yum.repos.d" in w.path)]


def _packages(wants: list[Want]) -> list[PackageWant]:
    return [w for w in wants if isinstance(w, PackageWant)]


def steps(node: Node, cluster: Cluster, state: NodeStateData) -> list[tuple[str, list[FileWant], list[str]]]:
    """The stages in order, each with the repository files it writes and the commands it runs on a fresh node."""
    out = []
    drv = driver.wants(node, cluster, state)
    recommends = not (distro.applies(node) and distro.no_recommends(state))
    # The driver stage returns before its preparation for a driver it does not install (preinstalled).
    pinning = driver.pinning_wants(node, state)
    commands = [*driver.preparation_commands(node, state),
                *packages.plan(pinning, state, repositories_changed=True),
                *packages.plan([w for w in _packages(drv) if w not in pinning], state,
                               repositories_changed=not pinning, recommends=recommends),
                *driver.branch_lock_commands(node, state),
                *(distro.build_commands(state) if distro.applies(node) else [])] if driver.managed(node) else []
    out.append(("driver", _files(drv), commands))
    rt = runtime.wants(node, cluster, state)
    out.append(("container runtime", _files(rt), packages.plan(_packages(rt), state, repositories_changed=True)))
    tk = toolkit.wants(node, cluster, state)
    out.append(("container toolkit", _files(tk), packages.plan(_packages(tk), state, repositories_changed=True)))
    if kubernetes.manages(cluster):
        k8s = kubernetes.wants(node, cluster, state)
        out.append(("Kubernetes", _files(k8s), [*kubernetes.selinux_commands(state),
                                                *packages.plan(_packages(k8s), state, repositories_changed=True)]))
    return out


#: The OS's own driver packages (``driver.install_method: distro``): each (system name in :data:`SYSTEMS`, choice).
#: Debian 12's open modules exist at 535.261.03 only (the security update moved the proprietary ones and the GSP
#: firmware on), so that path pins the version; Ubuntu's archive is the one ``package`` uses there.
DISTRO_PATHS: tuple[tuple[str, Choice], ...] = (
    ("Debian 12, x86_64", Choice("OS's own driver, proprietary modules, branch held", kernel_modules="proprietary",
                                 runtime="containerd", install_method="distro", branch="535")),
    ("Debian 12, x86_64", Choice("OS's own driver, open modules, exact driver version", driver_version="535.261.03",
                                 runtime="containerd", install_method="distro")),
    ("Debian 13, arm64", Choice("OS's own driver, open modules, branch held", runtime="containerd",
                                install_method="distro", branch="550")),
    ("Ubuntu 24.04 GA kernel, generic, x86_64", Choice("OS's own driver, open modules, branch held",
                                                       runtime="containerd", install_method="distro")),
)


def distro_paths() -> list[tuple[str, str, dict[str, Any], Choice]]:
    """Every (system, choice) pair rendered for ``install_method: distro``."""
    systems = {name: (manager, system) for name, manager, system in SYSTEMS}
    return [(name, *systems[name], choice) for name, choice in DISTRO_PATHS]


#: A driver that came with the node's image (``driver.install_method: preinstalled``): the driver stage only checks
#: it, the other stages install as on every path. Each (system name in :data:`SYSTEMS`, choice).
PREINSTALLED_PATHS: tuple[tuple[str, Choice], ...] = (
    ("Ubuntu 24.04 GA kernel, generic, x86_64", Choice("driver preinstalled, Docker", install_method="preinstalled")),
    ("RHEL 9, x86_64", Choice("driver preinstalled, containerd", runtime="containerd",
                              install_method="preinstalled")),
)


def preinstalled_paths() -> list[tuple[str, str, dict[str, Any], Choice]]:
    """Every (system, choice) pair rendered for ``install_method: preinstalled``."""
    systems = {name: (manager, system) for name, manager, system in SYSTEMS}
    return [(name, *systems[name], choice) for name, choice in PREINSTALLED_PATHS]


def paths() -> list[tuple[str, str, dict[str, Any], Choice]]:
    """Every (system, choice) pair rendered: Secure Boot's precompiled modules only where Ubuntu ships them."""
    return [(name, manager, system, choice) for name, manager, system in SYSTEMS for choice in CHOICES
            if not choice.ubuntu_only or system["os_id"] == "ubuntu"]


def render_path(node: Node, cluster: Cluster, manager: str, system: dict[str, Any], choice: Choice) -> str:
    """One path's section: per stage its repository files and commands."""
    state = state_for(manager, system, choice.secure_boot)
    warning = preflight.branch_warning(node_for(node, choice), state)
    lines = [f"> Preflight warns: {warning} (source `cuda-repo-branches`).\n"] if warning else []
    for stage, files, commands in steps(node_for(node, choice), cluster, state):
        lines.append(f"#### {stage}\n")
        for want in files:
            text = want.content if isinstance(want.content, str) else ""
            lines.append(f"`{want.path}`:\n\n```\n{text.rstrip()}\n```\n")
        lines.append("```sh\n" + ("\n".join(commands) or "# nothing to run") + "\n```\n")
    return "\n".join(lines)


def _sources() -> str:
    rows = [f"| `{key}` | {text.replace('|', '/')} |" for key, text in package_data()["sources"].items()]
    return "| source | what it says |\n| --- | --- |\n" + "\n".join(rows)


HEADER = """# Install paths

Generated by `tools/gen_install_paths.py` from `gpu_provision/data/packages.json` and the stages' own functions
(`gpu_provision/stages/paths.py`) for node `{node}` of `inventory/cluster.yaml`; edit those, not this page.
Each path shows what the stages write and run on a fresh node, in order: the repository files (with their key and
pins), the driver's preparation (prerequisite repositories, module stream), the package commands with their
versions, holds and locks. The last paths take the OS's own driver packages (`driver.install_method: distro`)
instead of NVIDIA's repository, then a driver the node's image already carries (`preinstalled`: the driver stage
only checks it). The facts come from the sources below (the `source` beside each group of
`packages.json`); facts marked UNCONFIRMED there are not confirmed against the vendor's own text.

## Sources

{sources}
"""


def upgrade_commands(cluster: Cluster, manager: str, installed: str) -> list[tuple[str, list[str]]]:
    """What a member runs when the file's Kubernetes version is not its ``installed`` one (each step on every
    member in turn, as :mod:`gpu_provision.operations.kubernetes.upgrade` orders them): ``(where, commands)``."""
    version = cluster.kubernetes.version
    names = ("kubelet", "kubeadm", "kubectl", "cri-tools", "kubernetes-cni")
    # Only the upstream part of the installed version decides the steps (its release suffix shows nowhere).
    state = NodeStateData({"packages": {"manager": manager, "packages": {
        n: {"version": f"{installed}-1.1", "held": True} for n in names}}})
    others = [w for w in kubernetes.package_wants(cluster) if w.name != "kubeadm"]
    return [
        ("every member", packages.plan([PackageWant("kubeadm", version, held=True)], state, False)),
        ("the first control plane", [upgrade.logged(upgrade.apply_command(version))]),
        ("every other member", [upgrade.logged(upgrade.steps()["other_nodes"])]),
        ("every member", packages.plan(others, state, False)),
        ("every member whose kubelet still runs its replaced binary", [upgrade.steps()["kubelet_restart"]]),
    ]


def _upgrade_section(cluster: Cluster) -> str:
    version = cluster.kubernetes.version
    lines = [f"## Kubernetes on a member moved to {version}\n",
             "A node already in the cluster, here at 1.36.3 (source `kubeadm-upgrade`): the steps run in this order, "
             "each on every node it names before the next starts. A rollout drains each node first and takes the "
             "control planes before the workers; preflight refuses a minor downgrade or a skipped minor.\n"]
    for manager in ("apt", "dnf"):
        lines.append(f"### {manager}\n")
        for where, commands in upgrade_commands(cluster, manager, "1.36.3"):
            lines.append(f"On {where}:\n\n```sh\n" + "\n".join(commands) + "\n```\n")
    return "\n".join(lines)


def render(cluster: Cluster, node_name: str = "h200-01") -> str:
    """The whole page: the sources, then every path, then a member's Kubernetes upgrade."""
    node = cluster.node(node_name)
    out = [HEADER.format(node=node_name, sources=_sources())]
    for name, manager, system, choice in [*paths(), *distro_paths(), *preinstalled_paths()]:
        out.append(f"## {name}: {choice.title}\n")
        out.append(render_path(node, cluster, manager, system, choice))
    if kubernetes.manages(cluster):
        out.append(_upgrade_section(cluster))
    return "\n".join(out).rstrip() + "\n"
