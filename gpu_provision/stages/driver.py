"""NVIDIA driver: repository, pinned and held packages (open or proprietary modules, DKMS or signed precompiled),
nouveau blacklisted, persistence daemon, Fabric Manager with NSCQ and NVLSM where the node's bus has NVSwitches
(:mod:`gpu_provision.stages.fabric`), and a reboot only when one is needed and allowed.

Package names per OS family come from ``gpu_provision/data/packages.json`` with the source each follows; the OS's
own driver packages (``install_method: distro``) are described in :mod:`gpu_provision.stages.distro`.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import dataclass

from pyinfra import host
from pyinfra.api import deploy

from gpu_provision import kernel_guard
from gpu_provision.desired import Difference, FileWant, PackageWant, UnitWant, Want
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.node.driver_version import module_version
from gpu_provision.node.verify.checks import driver_matches
from gpu_provision.operations import commands, files, packages, repos, services
from gpu_provision.operations.commands import current_state
from gpu_provision.operations.packages import family, names
from gpu_provision.spec import catalog as gpus
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages import distro, fabric
from gpu_provision.state import NodeStateData, Request, pinning_prefixes

NAME = "driver"
BLACKLIST = "/etc/modprobe.d/blacklist-nouveau.conf"
#: The project's drop-in for DKMS's framework files, in the folder dkms reads after framework.conf (packages.json
#: ``dkms_signing``, ``framework_conf``): the site's signing key and certificate.
DKMS_SIGNING_CONF = posixpath.join(posixpath.dirname(package_data()["dkms_signing"]["framework_conf"][-1]),
                                   "gpu-provision-signing.conf")
BLACKLIST_TEXT = "# Managed by gpu-provision\nblacklist nouveau\noptions nouveau modeset=0\n"
PERSISTENCED = "nvidia-persistenced.service"
FABRIC_MANAGER = "nvidia-fabricmanager.service"
# A node without an initramfs generator loads its modules from the root file system, where the modprobe files
# already are: there is nothing to rebuild.
INITRAMFS = {"ubuntu": "if command -v update-initramfs >/dev/null; then update-initramfs -u; fi",
             "debian": "if command -v update-initramfs >/dev/null; then update-initramfs -u; fi",
             "rhel": "if command -v dracut >/dev/null; then dracut -f; fi"}


def modules(node: Node) -> str:
    """``open`` or ``proprietary``: ``auto`` picks open modules where the GPU model supports them."""
    if node.driver.kernel_modules != "auto":
        return node.driver.kernel_modules
    model = gpus.model(node.gpus.model) if node.gpus.model else None
    return "open" if model is None or model.open_modules_supported else "proprietary"


def precompiled(state: NodeStateData) -> bool:
    """Whether the node takes Ubuntu's signed precompiled modules (Secure Boot on: Canonical's signature loads
    without any enrollment, where a DKMS build needs its certificate enrolled first)."""
    return family(state.system) == "ubuntu" and state.system.get("secure_boot") == "enabled"


def flavour(kernel: str, release: str = "") -> str:
    """Ubuntu kernel flavour, what follows the ABI number in ``uname -r``: ``generic`` for ``6.8.0-45-generic``,
    ``nvidia-64k`` for ``6.8.0-1015-nvidia-64k``; a kernel newer than ``release``'s GA kernel is an HWE one
    (``generic-hwe-22.04`` for ``6.8.0-45-generic`` on 22.04), as Ubuntu names its metapackages."""
    parts = kernel.split("-", 2)
    name = parts[2] if len(parts) == 3 else "generic"
    ga = _abi_entry()["ga_kernels"].get(release)
    if ga and not kernel.startswith(ga + ".") and name in _abi_entry()["hwe_flavours"]:
        name += f"-hwe-{release}"
    return name


def _abi_entry() -> dict:
    return dict(package_data()["driver"]["ubuntu"]["kernel_abi_versioned"])


def kernel_versioned(name: str) -> bool:
    """Whether package ``name`` is versioned by kernel ABI (Ubuntu's module packages), not by driver version."""
    return name.startswith(_abi_entry()["prefix"])


def node_flavour(state: NodeStateData) -> str:
    """The running kernel's flavour on this node."""
    return flavour(str(state.system.get("kernel", "")), str(state.system.get("os_version", "")))


def driver_packages(node: Node, state: NodeStateData) -> list[str]:
    """The driver's package names on this node (meta, user space, kernel modules)."""
    fam = family(state.system)
    if fam is None:
        return []
    entry = distro.entry(state) if distro.applies(node) else package_data()["driver"][fam]
    if entry is None:
        return []
    kind = f"precompiled_{modules(node)}" if precompiled(state) else modules(node)
    template = entry[kind]
    return names(template, branch=node.driver.spell("branch"), flavour=node_flavour(state),
                 kernel=str(state.system.get("kernel", "")))


def header_packages(node: Node, state: NodeStateData) -> list[str]:
    """Kernel header packages DKMS needs for the kernels it builds for (:func:`distro.build_kernels`), where they
    are missing."""
    if precompiled(state) or not managed(node):
        return []
    manager = state.package_manager
    if manager not in ("apt", "dnf"):
        return []
    headers = state.system.get("headers", {})
    out = []
    for kernel in distro.build_kernels(state):
        if not headers.get(kernel):
            out.extend(names(package_data()["kernel_headers"][manager], kernel=kernel))
    return out


#: The driver's dnf module (``nvidia-driver``) and where dnf keeps its enabled stream (what ``dnf module enable``
#: and ``dnf module reset`` write).
MODULE = str(package_data()["driver"]["rhel"]["module_stream"]["module"])
MODULE_FILE = str(package_data()["driver"]["rhel"]["module_stream"]["file"])
#: dnf's versionlock list, and the line this stage adds once the branch glob is locked there.
VERSIONLOCK_LIST = "/etc/dnf/plugins/versionlock.list"
BRANCH_LOCK_MARK = "# gpu-provision branch lock "


def rhel_major(state: NodeStateData) -> str:
    """The RHEL-compatible release's major version (``9`` for Rocky 9.4)."""
    return str(state.system.get("os_version", "")).split(".")[0]


def module_stream(node: Node, state: NodeStateData) -> str | None:
    """The ``nvidia-driver`` module stream NVIDIA documents for this release and module kind (``580-open``), None
    where the repository has no module streams (RHEL 10, apt nodes)."""
    if family(state.system) != "rhel":
        return None
    entry = package_data()["driver"]["rhel"]["module_stream"]
    if rhel_major(state) not in entry["majors"]:
        return None
    return str(entry[modules(node)]).format(branch=node.driver.spell("branch"))


def branch_lock(node: Node, state: NodeStateData) -> str | None:
    """The versionlock glob NVIDIA documents where no module stream holds the branch (``*nvidia*580*``)."""
    if family(state.system) != "rhel":
        return None
    entry = package_data()["driver"]["rhel"]["versionlock"]
    if rhel_major(state) not in entry["majors"] or node.driver.version:
        return None
    return str(entry["glob"]).format(branch=node.driver.spell("branch"))


def prerequisite_commands(state: NodeStateData) -> list[str]:
    """EPEL (and CodeReady Builder, which EPEL needs) where DKMS comes from on RHEL-compatible nodes, until
    ``epel-release`` is installed."""
    if family(state.system) != "rhel":
        return []
    entry = package_data()["driver"]["rhel"]["prerequisites"]
    if state.package(entry["package"]).version:
        return []
    kind = "rhel" if state.system.get("os_id") == "rhel" else "rebuild"
    return [c.format(major=rhel_major(state)) for c in entry[kind]]


def enabled_stream(state: NodeStateData) -> tuple[str | None, bool]:
    """The driver module's enabled stream from dnf's module file (``stream=580-open``; None when no stream is
    enabled), and whether the file records any stream or state at all (a module once enabled, then disabled or
    left at another stream, which ``dnf module enable`` will not switch without a reset first)."""
    values: dict[str, str] = {}
    for line in (state.file(MODULE_FILE).content or "").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    stream = values.get("stream") or None
    enabled = stream if stream and values.get("state", "enabled") != "disabled" else None
    return enabled, bool(stream or values.get("state"))


def stream_commands(node: Node, state: NodeStateData) -> list[str]:
    """The module stream NVIDIA documents, enabled: ``dnf module reset`` first where the module has another
    stream or a state recorded (dnf refuses to switch an enabled stream), then ``dnf module enable``; nothing where
    the wanted stream is already the enabled one."""
    stream = module_stream(node, state)
    current, recorded = enabled_stream(state)
    if not stream or current == stream:
        return []
    reset = [f"dnf module reset -y {MODULE}"] if recorded else []
    return [*reset, f"dnf module enable -y {MODULE}:{stream}"]


def pinning_entry(node: Node, state: NodeStateData) -> dict[str, str] | None:
    """NVIDIA's driver pinning packages (``packages.json``, ``driver.<family>.pinning``) where the driver comes from
    NVIDIA's apt repository; None elsewhere (Ubuntu's archive, Debian's own packages, dnf)."""
    fam = family(state.system)
    if not fam or distro.applies(node):
        return None
    return package_data()["driver"][fam].get("pinning")


def pinning_package(node: Node, state: NodeStateData) -> str | None:
    """The pinning package NVIDIA's guide has installed before the driver: the exact version's
    (``nvidia-driver-pinning-580.159.04``) where ``driver.version`` is set, else the branch's
    (``nvidia-driver-pinning-580``)."""
    entry = pinning_entry(node, state)
    if entry is None:
        return None
    if node.driver.version:
        return entry["version"].format(version=node.driver.version)
    return entry["branch"].format(branch=node.driver.spell("branch"))


def pinning_wants(node: Node, state: NodeStateData) -> list[PackageWant]:
    """The wanted pinning package, installed (any version: its name carries the driver's)."""
    name = pinning_package(node, state)
    return [PackageWant(name)] if name else []


def stale_pinning(node: Node, state: NodeStateData) -> list[str]:
    """Installed pinning packages other than the wanted one: another version's or branch's, whose pin would hold
    the driver where the file no longer wants it."""
    entry = pinning_entry(node, state)
    if entry is None:
        return []
    wanted = pinning_package(node, state)
    return sorted(n for n in state.installed_with_prefix(entry["prefix"]) if n != wanted)


def pinning_commands(node: Node, state: NodeStateData) -> list[str]:
    """The stale pinning packages purged, before the wanted one is installed: purged, not removed, because dpkg
    keeps a removed package's conffiles, and the old pin file left behind would be kept (``--force-confold``) when
    the next pinning package brings the same path."""
    stale = stale_pinning(node, state)
    if not stale:
        return []
    wait = packages.apt_lock_wait(node.packages.lock_timeout)
    return [f"{packages.APT_GET} {wait} purge " + " ".join(shlex.quote(n) for n in stale)]


def preparation_commands(node: Node, state: NodeStateData) -> list[str]:
    """What must run before the driver packages install: prerequisite repositories, the module stream, and
    another driver's pinning packages purged."""
    return [*prerequisite_commands(state), *stream_commands(node, state), *pinning_commands(node, state)]


def branch_lock_commands(node: Node, state: NodeStateData) -> list[str]:
    """After the install, the branch's versionlock glob, once (the mark line records that it was added)."""
    glob = branch_lock(node, state)
    if not glob or BRANCH_LOCK_MARK + glob in (state.file(VERSIONLOCK_LIST).content or ""):
        return []
    return [f"dnf versionlock add {shlex.quote(glob)}",
            f"echo {shlex.quote(BRANCH_LOCK_MARK + glob)} >> {VERSIONLOCK_LIST}"]


def repository_pins(node: Node, state: NodeStateData) -> list[repos.Pin]:
    """apt pins that keep every driver package (and its dependencies) on the wanted branch or version."""
    if distro.applies(node):
        return distro.pins(node, state)
    fam = family(state.system)
    globs = tuple(package_data()["driver"][fam]["pin"]) if fam else ()
    if not globs:
        return []
    return [repos.Pin(globs, node.driver.spell("pin"))]


def uses_repository(state: NodeStateData, node: Node | None = None) -> bool:
    """Whether the driver comes from the CUDA repository (Debian, RHEL) rather than the distribution (Ubuntu, or
    ``install_method: distro``)."""
    if node is not None and distro.applies(node):
        return False
    fam = family(state.system)
    return bool(fam and package_data()["driver"][fam]["repository"])


def managed(node: Node) -> bool:
    """Whether this stage installs anything on ``node`` (GPUs expected, driver installed from packages: NVIDIA's
    or the OS's own)."""
    return node.has_gpus and node.driver.install_method in ("package", distro.METHOD)


def package_wants(node: Node, state: NodeStateData) -> list[PackageWant]:
    """Driver, the NVSwitch fabric's (:mod:`gpu_provision.stages.fabric`) and missing kernel header packages."""
    fam = family(state.system)
    version = node.driver.spell("package", fam)
    out = [PackageWant(name, None if kernel_versioned(name) else version, held=True)
           for name in driver_packages(node, state)]
    out.extend(PackageWant(name, held=True) for name in distro.own_version_packages(node, state))
    if fam and not distro.applies(node):
        pinned, own = fabric.package_names(node, fam, fabric.decide(node, state))
        out.extend(PackageWant(name, version, held=True) for name in pinned)
        out.extend(PackageWant(name) for name in own)
    out.extend(PackageWant(name) for name in header_packages(node, state))
    out.extend(kernel_hold_wants(node, state))
    return out


#: The kernel metapackages ``driver.hold_kernel`` holds, per package manager: what moves a node to a new kernel.
KERNEL_PACKAGES = {"apt": ("linux-image-{flavour}", "linux-headers-{flavour}"),
                   "dnf": ("kernel", "kernel-core", "kernel-devel")}


def kernel_hold_wants(node: Node, state: NodeStateData) -> list[PackageWant]:
    """With ``driver.hold_kernel``: the running kernel's image and headers metapackages, installed and held
    (``apt-mark hold``, ``dnf versionlock``), so unattended upgrades cannot move the kernel without the deploy."""
    if not node.driver.hold_kernel:
        return []
    templates = KERNEL_PACKAGES.get(state.package_manager or "", ())
    return [PackageWant(t.format(flavour=node_flavour(state)), held=True) for t in templates]


def reboot_refused(node: Node, state: NodeStateData) -> str | None:
    """Why the node must not take the reboot its driver needs: the kernel guard (None when a reboot is safe)."""
    if reboot_reason(node, state) is None:
        return None
    return kernel_guard.blocked_reboot(node, state, dkms=not precompiled(state))


@dataclass(frozen=True)
class RebootStep:
    """What a node's driver asks of the reboot step: ``reboot`` is why to reboot now (None: no reboot now),
    ``refused`` why the node must fail instead (None: it need not)."""

    reboot: str | None = None
    refused: str | None = None


def reboot_step(node: Node, state: NodeStateData, *, before_change: bool = False) -> RebootStep:
    """The reboot a rollout takes around a node's change: the driver's :func:`reboot_reason`, taken when
    ``driver.reboot`` is ``allowed`` and the kernel guard lets it.

    + before_change: for a reboot pending from before the change, which is taken first; a kernel guard refusal then
      waits for the change, whose driver stage installs what the pending kernel lacks (its headers and its DKMS
      module, built before any reboot), and the step after the change takes the reboot or fails with the guard's
      reason. A node that may not reboot at all fails at once: its change could not end with the driver loaded.
    """
    why = reboot_reason(node, state)
    if why is None:
        return RebootStep()
    if node.driver.reboot != "allowed":
        return RebootStep(refused=f"a reboot is needed ({why}) and driver.reboot is not 'allowed'")
    refused = reboot_refused(node, state)
    if refused:
        return RebootStep() if before_change else RebootStep(refused=f"not rebooting: {refused}")
    return RebootStep(reboot=why)


def unit_wants(node: Node, state: NodeStateData) -> list[UnitWant]:
    """nvidia-persistenced (unless turned off) and Fabric Manager where decided on."""
    out = []
    if node.driver.persistenced:
        out.append(UnitWant(PERSISTENCED))
    if fabric.decide(node, state).fabric_manager:
        out.append(UnitWant(FABRIC_MANAGER))
    return out


def file_wants(node: Node) -> list[FileWant]:
    """The nouveau blacklist."""
    return [FileWant(BLACKLIST, content=BLACKLIST_TEXT)]


def signing_wants(node: Node, state: NodeStateData) -> list[FileWant]:
    """With ``driver.signing_key`` and ``driver.signing_certificate``, where DKMS builds the driver: the drop-in
    that has DKMS sign with them (``mok_signing_key``, ``mok_certificate``: dell/dkms README, "Module signing").
    The paths are plain file names (the settings' pattern): dkms sources the file as shell."""
    driver = node.driver
    if not driver.signing_key or precompiled(state):
        return []
    text = ("# Managed by gpu-provision: DKMS signs the modules it builds with the site's key "
            "(driver.signing_key, driver.signing_certificate)\n"
            f'mok_signing_key="{driver.signing_key}"\nmok_certificate="{driver.signing_certificate}"\n')
    return [FileWant(DKMS_SIGNING_CONF, content=text)]


def stale_signing(node: Node, state: NodeStateData) -> str | None:
    """The drop-in left from settings the file no longer has (DKMS would go on signing with the old key)."""
    if signing_wants(node, state) or not state.file(DKMS_SIGNING_CONF).exists:
        return None
    return f"{DKMS_SIGNING_CONF} is there but the file sets no driver.signing_key"


def module_file_wants(node: Node, state: NodeStateData) -> list[FileWant]:
    """On an NVLink 5 board with NVLSM: the ``modules-load.d`` file loading ib_umad at boot."""
    modules = fabric.kernel_modules(fabric.decide(node, state))
    if not modules:
        return []
    text = "# Managed by gpu-provision: NVLSM reaches the NVLink 5 switches through these\n" + "\n".join(modules)
    return [FileWant(fabric.modules_file(), content=text + "\n")]


def repository_wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """The CUDA repository's files (none on Ubuntu, whose archive carries the driver), or with ``distro`` the
    file enabling Debian's non-free components and its pins."""
    if distro.applies(node):
        return distro.repository_wants(node, state)
    if not uses_repository(state):
        return []
    return repos.repository_files("cuda", cluster.mirrors.cuda, state, repository_pins(node, state),
                                  cluster.mirrors.package_proxy)


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Everything the driver stage converges on ``node`` (nothing for a preinstalled driver or a node without GPUs)."""
    if not managed(node):
        return []
    return [*repository_wants(node, cluster, state), *pinning_wants(node, state), *signing_wants(node, state),
            *package_wants(node, state), *file_wants(node), *module_file_wants(node, state), *unit_wants(node, state)]


def _all_package_names(node: Node) -> set[str]:
    """Every driver package name any OS family could use (kernel-dependent names are asked for later)."""
    out: set[str] = set()
    branch = node.driver.spell("branch")
    entries = [*package_data()["driver"].values(), package_data()["distro_driver"]["debian"]]
    out.update(package_data()["distro_driver"]["debian"]["own_version"])
    for entry in entries:
        for key in ("open", "proprietary"):
            out.update(n for n in names(entry.get(key, []), branch=branch, flavour="", kernel="")
                       if not n.endswith("-"))
    return out | fabric.all_package_names(node)


def request(node: Node, cluster: Cluster) -> Request:
    """Packages, files and units of every OS family, plus the system, GPU and runtime sections."""
    req = Request(sections={"system", "gpu", "runtime"})
    if not node.has_gpus:
        return req
    req.packages |= _all_package_names(node) | _pinning_names(node)
    req.package_prefixes |= set(pinning_prefixes())
    req.files |= {BLACKLIST, commands.REBOOT_MARKER, MODULE_FILE, VERSIONLOCK_LIST, fabric.modules_file(),
                  *(f"/sys/module/{m}" for m in package_data()["nvlink5_bridge"]["modules"])} | repos.repository_request(
        "cuda").files | distro_files()
    req.files.add(DKMS_SIGNING_CONF)
    req.contents |= {commands.REBOOT_MARKER, MODULE_FILE, VERSIONLOCK_LIST, DKMS_SIGNING_CONF}
    req.packages.add(package_data()["driver"]["rhel"]["prerequisites"]["package"])
    req.units |= {PERSISTENCED, FABRIC_MANAGER}
    return req


def _pinning_entries() -> list[dict[str, str]]:
    return [e["pinning"] for e in package_data()["driver"].values() if isinstance(e, dict) and e.get("pinning")]


def _pinning_names(node: Node) -> set[str]:
    """The pinning packages this node could want, whatever its OS family."""
    out = set()
    for entry in _pinning_entries():
        out.add(entry["branch"].format(branch=node.driver.spell("branch")))
        if node.driver.version:
            out.add(entry["version"].format(version=node.driver.version))
    return out


def distro_files() -> set[str]:
    """The paths of Debian's sources and preferences files for ``install_method: distro``."""
    name = package_data()["distro_driver"]["debian"]["sources_file"]["name"]
    return {f"/etc/apt/sources.list.d/{name}.sources", f"/etc/apt/preferences.d/{name}.pref"}


def loaded_version(state: NodeStateData) -> str | None:
    """The version of the loaded kernel module (``/proc/driver/nvidia/version``), None when none is loaded."""
    return module_version(state.section("gpu").get("driver_version_line"))


def installed_version(node: Node, state: NodeStateData) -> str | None:
    """The upstream version of the installed driver (``580.159.04`` from ``580.159.04-1``)."""
    for name in driver_packages(node, state):
        version = None if kernel_versioned(name) else state.package(name).version
        if version:
            return version.split(":", 1)[-1].split("-", 1)[0]
    return None


def reboot_reason(node: Node, state: NodeStateData) -> str | None:
    """Why the node must reboot for its driver: nouveau still loaded, or another driver version loaded."""
    if "nouveau" in state.system.get("modules", []) and state.file(BLACKLIST).exists:
        return "nouveau is loaded; it is blacklisted from the next boot on"
    loaded, installed = loaded_version(state), installed_version(node, state)
    if loaded and installed and loaded != installed:
        return f"driver {loaded} is loaded, {installed} is installed"
    return None


def pending_reboot(node: Node, state: NodeStateData) -> str | None:
    """Why the node needs a reboot once this run's driver step is done: :func:`reboot_reason`, or a loaded driver
    whose packages this run moves to another version.

    A deploy plans every operation from what it read before changing anything, so the MIG layout, which must not
    run between the new driver's install and the reboot that loads it (the new library beside the old module fails
    every nvidia-smi call with "Driver/library version mismatch"), decides from this, not from the state the install
    leaves; the boot unit applies the layout after that reboot. A node with no driver loaded needs no reboot: the
    first nvidia-smi loads the new module.
    """
    reason = reboot_reason(node, state)
    loaded = loaded_version(state)
    if reason or not loaded or not managed(node):
        return reason
    driver = set(driver_packages(node, state))
    moving = sorted(w.name for w in package_wants(node, state)
                    if w.name in driver and state.package(w.name).version is not None
                    and any(d.kind == "package" for d in w.unmet(state)))
    if not moving:
        return None
    return f"driver {loaded} is loaded and this run installs {', '.join(moving)} {node.driver.spell('reported')}"


def preinstalled_problems(node: Node, state: NodeStateData) -> list[str]:
    """For ``install_method: preinstalled``: nvidia-smi must work and report the wanted version or branch."""
    gpu = state.section("gpu")
    if gpu.get("smi_rc") != 0:
        return [f"the driver is to be preinstalled but nvidia-smi fails: {gpu.get('smi_error') or 'not found'}"]
    versions = sorted({g.get("driver_version", "") for g in gpu.get("gpus", [])})
    wanted = node.driver.spell("reported")
    if not versions or not all(driver_matches(v, wanted) for v in versions):
        return [f"preinstalled driver is {', '.join(versions) or 'unknown'}, the file wants "
                f"{node.driver.version or 'branch ' + wanted}"]
    return []


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """A preinstalled driver that does not match, and a pending reboot."""
    if not node.has_gpus:
        return []
    if node.driver.install_method == "preinstalled":
        return [Difference("driver", "preinstalled", "working driver as described", p, NAME)
                for p in preinstalled_problems(node, state)]
    unloaded = [Difference("module", name, "loaded (NVLSM reaches the NVLink 5 switches through it)", "not loaded",
                           NAME, source="/proc/modules") for name in fabric.missing_modules(node, state)]
    stale = [Difference("package", name, "not installed (another driver's pinning package)",
                        f"installed {state.package(name).version or ''}".strip(), NAME)
             for name in stale_pinning(node, state)]
    if stale_signing(node, state):
        stale.append(Difference("file", DKMS_SIGNING_CONF, "absent (no driver.signing_key)", "present", NAME))
    reason = reboot_reason(node, state)
    return unloaded + stale + (
        [Difference("reboot", "driver", "running the installed driver", reason, NAME)] if reason else [])


def blacklist_nouveau(node: Node, req: Request, fam: str | None) -> None:
    """Blacklist nouveau and rebuild the initramfs when the blacklist changed: the initramfs carries its own copy of
    ``/etc/modprobe.d``, so without the rebuild the next boot's early userspace could still bind nouveau to the GPUs
    before the root file system (and the blacklist) is mounted."""
    files.wants(name="Blacklist nouveau", wants=file_wants(node), request=req)
    files.on_change(name="Rebuild the initramfs without nouveau", paths=[BLACKLIST],
                    command=INITRAMFS.get(fam or "", "true"), noop="nouveau blacklist unchanged")


@deploy("NVIDIA driver")
def driver_stage() -> None:
    """Install the pinned driver and its services, blacklist nouveau, reboot only when needed and allowed."""
    target = commands.this_host()
    node, cluster = node_for(host), cluster_for(host)
    if not node.has_gpus:
        target.noop("no GPUs expected on this node")
        return
    req = request(node, cluster)
    state = current_state(target, req)
    if node.driver.install_method == "preinstalled":
        problems = preinstalled_problems(node, state)
        if problems:
            commands.fail(name="Check the preinstalled driver", reason="; ".join(problems))
        else:
            target.noop("preinstalled driver matches the cluster file")
        return
    fam = family(state.system)
    refused = distro.problems(node, state, fabric.wanted(node, state))
    if refused:
        commands.fail(name="Check the OS's own driver packages", reason="; ".join(refused))
        return
    if distro.applies(node):
        files.wants(name="Debian's non-free components and driver pins", wants=distro.repository_wants(node, state),
                    request=req)
    elif uses_repository(state):
        repos.apt_repository(name="CUDA repository", repo_id="cuda", repo=cluster.mirrors.cuda,
                             pins=repository_pins(node, state), proxy=cluster.mirrors.package_proxy)
    blacklist_nouveau(node, req, fam)
    # Before the packages: DKMS builds (and signs) in their install scripts.
    files.wants(name="DKMS signs with the site's key", wants=signing_wants(node, state), request=req)
    commands.guarded(name="DKMS signs with its own key again", command=f"rm -f {DKMS_SIGNING_CONF}",
                     needed=lambda s: stale_signing(node, s), request=req, noop="no stale DKMS signing drop-in")
    commands.guarded(name="Driver prerequisites, module stream and pinning",
                     command=lambda s: " && ".join(preparation_commands(node, s)),
                     needed=lambda s: "; ".join(preparation_commands(node, s)) or None, request=req,
                     noop="driver prerequisites, module stream and pinning already in place")
    # NVIDIA's guide installs the pinning package before the driver, so its pin is in place when apt resolves it.
    packages.wants(name="NVIDIA's driver pinning package", wants=pinning_wants(node, state),
                   lock_timeout=node.packages.lock_timeout)
    packages.wants(name="Driver packages (pinned, held)", wants=package_wants(node, state),
                   lock_timeout=node.packages.lock_timeout,
                   recommends=not (distro.applies(node) and distro.no_recommends(state)))
    if distro.applies(node):
        commands.guarded(name="DKMS module for every kernel the node boots",
                         command=lambda s: " && ".join(distro.build_commands(s)),
                         needed=lambda s: ", ".join(distro.unbuilt_kernels(s)) or None, request=req,
                         noop="the NVIDIA module is built for every kernel the node boots")
    commands.guarded(name="Driver branch versionlock", command=lambda s: " && ".join(branch_lock_commands(node, s)),
                     needed=lambda s: "; ".join(branch_lock_commands(node, s)) or None, request=req,
                     noop="no branch lock needed or already in place")
    if node.driver.reboot == "allowed":
        commands.guarded(name="Kernel guard before a reboot", command=lambda s: commands.fail_command(
                             f"not rebooting: {reboot_refused(node, s)}"),
                         needed=lambda s: reboot_refused(node, s), request=req, noop="no kernel stands in the way")
    # Decided from what was read before this run changed anything: a driver this run moves is loaded at the next
    # reboot (the rollout's, or the next run's), and the MIG layout waits for it (pending_reboot).
    commands.reboot_when(name="Reboot for the driver", needed=lambda s: reboot_reason(node, s), request=req,
                         allowed=node.driver.reboot == "allowed")
    # NVIDIA's driver container starts Fabric Manager and NVLSM on an NVLink 5 board only once ib_umad is loaded.
    files.wants(name="Kernel modules NVLSM needs at boot", wants=module_file_wants(node, state), request=req)
    commands.guarded(name="Kernel modules NVLSM needs, loaded",
                     command=lambda s: " && ".join(f"modprobe {shlex.quote(m)}" for m in fabric.missing_modules(node, s)),
                     needed=lambda s: ", ".join(fabric.missing_modules(node, s)) or None, request=req,
                     noop="no kernel module to load for NVLSM")
    # Until a pending reboot happens, the installed driver is not the loaded one: its services would fail.
    services.wants(name="Driver services", wants=unit_wants(node, state),
                   _if=lambda: reboot_reason(node, current_state(target, req)) is None)
