"""``driver.install_method: distro``: the OS's own NVIDIA driver packages instead of NVIDIA's CUDA repository.

Debian keeps its driver in the ``contrib``, ``non-free`` and ``non-free-firmware`` components, which a default
install does not enable. The stage enables them in a sources file of its own, so the distribution's own sources
file stays as the installer wrote it and removing the project's file undoes the change. Ubuntu's archive is what
``install_method: package`` already installs from there; RHEL ships no NVIDIA driver, so ``distro`` is refused.

Facts (components, package sets, branches per release) come from ``distro_driver`` in
``gpu_provision/data/packages.json`` with their sources.
"""

from __future__ import annotations

import shlex
from typing import Any

from gpu_provision.desired import FileWant
from gpu_provision.operations import repos
from gpu_provision.operations.packages import family
from gpu_provision.spec.model import Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.state import NodeStateData

METHOD = "distro"


def applies(node: Node) -> bool:
    """Whether ``node`` takes its driver from the OS's own archive."""
    return node.driver.install_method == METHOD


def entry(state: NodeStateData) -> dict[str, Any] | None:
    """The ``distro_driver`` entry for this node's OS family: Debian's own, Ubuntu's ``driver.ubuntu`` (the same
    archive ``package`` uses there), None where the OS has no driver of its own (RHEL) or is unknown."""
    fam = family(state.system)
    found = package_data()["distro_driver"].get(fam or "")
    if isinstance(found, str):
        section, _, key = found.partition(".")
        return dict(package_data()[section][key])
    return dict(found) if found else None


def debian(state: NodeStateData) -> dict[str, Any] | None:
    """Debian's entry, None on other families (their archives need no sources file of the project's)."""
    return dict(package_data()["distro_driver"]["debian"]) if family(state.system) == "debian" else None


def release_branch(state: NodeStateData) -> str | None:
    """The one driver branch this Debian release ships (``535`` on 12, ``550`` on 13), None elsewhere."""
    found = debian(state)
    if not found:
        return None
    major = str(state.system.get("os_version", "")).split(".")[0]
    return found["branches"].get(major)


def problems(node: Node, state: NodeStateData, fabric_manager: bool = False) -> list[str]:
    """Why ``distro`` cannot install this node's driver: an OS without a driver of its own, a Debian release
    whose archive has another branch, or Fabric Manager (``fabric_manager``: wanted on this node), which Debian
    does not package."""
    if not applies(node) or not node.has_gpus:
        return []
    fam = family(state.system)
    if entry(state) is None:
        return [f"driver.install_method: distro needs the OS's own NVIDIA driver packages and {fam or 'this OS'} "
                "ships none; use install_method: package (NVIDIA's CUDA repository)"]
    out = []
    branch = release_branch(state)
    if fam == "debian" and branch is None:
        out.append(f"driver.install_method: distro: Debian {state.system.get('os_version', '?')} is not a release "
                   "whose driver branch is known (Debian 12: 535, Debian 13: 550)")
    elif branch and node.driver.spell("branch") != branch:
        out.append(f"driver.install_method: distro: Debian {state.system.get('os_version')} ships driver branch "
                   f"{branch} and the file wants {node.driver.spell('branch')}; set driver.branch: \"{branch}\" or a "
                   f"{branch} driver.version")
    if fam == "debian" and fabric_manager:
        out.append("driver.install_method: distro: Debian packages no NVIDIA Fabric Manager; use install_method: "
                   "package (NVIDIA's CUDA repository) on NVSwitch systems")
    return out


def sources_file(state: NodeStateData) -> FileWant | None:
    """The deb822 file enabling Debian's non-free components for the driver, signed by Debian's own key ring."""
    found = debian(state)
    if not found:
        return None
    spec = found["sources_file"]
    codename = str(state.system.get("codename", ""))
    stanzas = []
    for archive in spec["archives"]:
        suites = " ".join(s.format(codename=codename) for s in archive["suites"])
        stanzas.append(f"Types: deb\nURIs: {archive['uri']}\nSuites: {suites}\n"
                       f"Components: {' '.join(spec['components'])}\nSigned-By: {spec['keyring']}\n")
    header = "# Managed by gpu-provision: Debian's NVIDIA driver (driver.install_method: distro)\n"
    return FileWant(f"/etc/apt/sources.list.d/{spec['name']}.sources", content=header + "\n".join(stanzas))


def pins(node: Node, state: NodeStateData) -> list[repos.Pin]:
    """apt preferences holding Debian's driver packages (and the firmware and libraries they pull in) to the
    file's version (``535.261.03-*``) or branch (``535.*``); the priority above 1000 also takes a version back
    down, which is what makes an older version in the archive (open modules on Debian 12) installable."""
    found = debian(state)
    if not found:
        return []
    return [repos.Pin(tuple(found["pin"]), node.driver.spell("debian_pin"))]


def pin_file(node: Node, state: NodeStateData) -> FileWant | None:
    """The preferences file beside :func:`sources_file`."""
    found = debian(state)
    if not found:
        return None
    stanzas = [f"Package: {' '.join(p.packages)}\nPin: version {p.version}\nPin-Priority: {p.priority}\n"
               for p in pins(node, state)]
    name = found["sources_file"]["name"]
    return FileWant(f"/etc/apt/preferences.d/{name}.pref", content="# Managed by gpu-provision\n" + "".join(stanzas))


def repository_wants(node: Node, state: NodeStateData) -> list[FileWant]:
    """The sources and preferences files (Debian only)."""
    return [w for w in (sources_file(state), pin_file(node, state)) if w is not None]


def own_version_packages(node: Node, state: NodeStateData) -> list[str]:
    """Packages of the set that Debian versions on their own (``nvidia-persistenced``): held, not version-pinned;
    the persistence daemon only where the file wants it."""
    found = debian(state)
    if not found or not applies(node) or not node.driver.persistenced:
        return []
    return list(found["own_version"])


def no_recommends(state: NodeStateData) -> bool:
    """Whether the install leaves recommended packages out (Debian's libcuda1 recommends the desktop's pieces)."""
    found = debian(state)
    return bool(found and found.get("no_recommends"))


def build_kernels(state: NodeStateData) -> list[str]:
    """The kernels DKMS builds the module for: the running and the pending one, leaving out a running kernel
    the node's root file system does not hold (a container running its host's kernel), for which no package
    has headers; such a node builds for the kernel it has installed, the one it would boot."""
    system = state.system
    running, pending = str(system.get("kernel", "")), str(system.get("kernel_pending", ""))
    kernels = {running, pending} - {""}
    installed = system.get("kernels_installed")
    if isinstance(installed, list) and installed and running not in installed:
        kernels.discard(running)
    return sorted(kernels)


def unbuilt_kernels(state: NodeStateData) -> list[str]:
    """Kernels of :func:`build_kernels` that DKMS has not built Debian's NVIDIA module for (an unread probe, or an
    Ubuntu node, whose path is ``package``'s: none)."""
    modules = state.system.get("nvidia_modules")
    if not isinstance(modules, dict) or debian(state) is None:
        return []
    return [k for k in build_kernels(state) if modules.get(k) != "dkms"]


#: Every NVIDIA module DKMS knows (``nvidia-current/535.309.01`` from ``dkms status``), whatever its state.
_REGISTERED = "dkms status | sed -n 's|^\\(nvidia[^,:/]*/[^,:]*\\)[,:].*|\\1|p' | sort -u"


def build_commands(state: NodeStateData) -> list[str]:
    """``dkms install`` of every registered NVIDIA module per kernel still without it: the packages' own scripts
    skip a kernel whose headers were not configured yet, and ``dkms autoinstall`` (dkms 3.0) builds for the
    running kernel only, whatever ``-k`` says."""
    return [f"for m in $({_REGISTERED}); do dkms install \"$m\" -k {shlex.quote(k)} || exit 1; done"
            for k in unbuilt_kernels(state)]
