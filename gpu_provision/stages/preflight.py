"""Read-only checks before anything is installed; a node that fails them is stopped alone, with its reasons.

Checks: every probe command answered in time, supported OS and architecture, disk and memory minimums, Secure Boot
against the way the driver modules are built (signed precompiled modules, or DKMS's own certificate in the
firmware's key lists: enrolled, awaiting enrollment, missing or denied, :mod:`gpu_provision.node.probe.signing`),
kernel headers (or signed precompiled modules) for the running *and* the pending kernel, the NVIDIA PCI
devices against the GPUs the file expects, a forced ``driver.fabric_manager`` against the NVSwitches on the bus,
nouveau (a warning: the driver stage blacklists it), and the kernel guard
(a warning that drift reports too: the node is deployed but not rebooted, :mod:`gpu_provision.kernel_guard`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyinfra import host, logger
from pyinfra.api import deploy

from gpu_provision import kernel_guard
from gpu_provision.desired import Difference, Want
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.node.versions import minor
from gpu_provision.operations import commands, repos
from gpu_provision.operations.commands import current_state
from gpu_provision.operations.packages import family, names
from gpu_provision.spec import catalog as gpus
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages import distro, driver, fabric
from gpu_provision.state import NodeStateData, Request

NAME = "preflight"
#: (os_id, major version) pairs this project installs on: the releases ``docs/install-paths.md`` renders paths for
#: (RHEL rebuilds are listed by their own id).
SUPPORTED_OS = {("ubuntu", "22.04"), ("ubuntu", "24.04"), ("debian", "12"), ("debian", "13"),
                *((rhel, major) for rhel in ("rhel", "rocky", "almalinux") for major in ("9", "10"))}
#: How a refusal names them.
SUPPORTED_OS_TEXT = "Ubuntu 22.04/24.04, Debian 12/13, RHEL/Rocky/Alma 9/10"
SUPPORTED_ARCH = ("x86_64", "aarch64")
MIN_DISK_GIB = 10
MIN_MEMORY_GIB = 4
GIB = 1024**3


@dataclass(frozen=True)
class Finding:
    """One preflight result that is not a pass: ``fatal`` stops the node, otherwise it is a warning."""

    check: str
    message: str
    fatal: bool = True


def _os_findings(state: NodeStateData) -> list[Finding]:
    system = state.system
    os_id, version = str(system.get("os_id", "")), str(system.get("os_version", ""))
    key = version if os_id == "ubuntu" else version.split(".")[0]
    out = []
    if (os_id, key) not in SUPPORTED_OS:
        out.append(Finding("os", f"{os_id or 'unknown OS'} {version} is not supported ({SUPPORTED_OS_TEXT})"))
    if system.get("arch") not in SUPPORTED_ARCH:
        out.append(Finding("arch", f"architecture {system.get('arch')} is not supported (x86_64, aarch64)"))
    return out


def _resource_findings(state: NodeStateData) -> list[Finding]:
    system = state.system
    out = []
    disk = int(system.get("disk_free_bytes", 0))
    if disk < MIN_DISK_GIB * GIB:
        out.append(Finding("disk", f"{disk / GIB:.1f} GiB free on /, at least {MIN_DISK_GIB} GiB needed"))
    memory = int(system.get("mem_total_kib", 0)) * 1024
    if memory < MIN_MEMORY_GIB * GIB:
        out.append(Finding("memory", f"{memory / GIB:.1f} GiB memory, at least {MIN_MEMORY_GIB} GiB needed"))
    return out


def _module_findings(node: Node, state: NodeStateData) -> list[Finding]:
    """Secure Boot, open/proprietary modules and the kernels the modules must exist for."""
    if not driver.managed(node):
        return []
    system = state.system
    out = [Finding("install-method", p) for p in distro.problems(node, state, fabric.wanted(node, state))]
    model = gpus.model(node.gpus.model) if node.gpus.model else None
    kind = driver.modules(node)
    if model and model.open_modules_required and kind == "proprietary":
        out.append(Finding("kernel-modules", f"{model.key} needs the open kernel modules; "
                                             "set driver.kernel_modules to open or auto"))
    kernels = distro.build_kernels(state)
    if driver.precompiled(state):
        available = set(state.section("runtime").get("precompiled_modules", []))
        stem = f"linux-modules-nvidia-{node.driver.spell('branch')}-server{'-open' if kind == 'open' else ''}"
        for kernel in kernels:
            if f"{stem}-{kernel}" not in available:
                out.append(Finding("precompiled-modules",
                                   f"Secure Boot is on and no signed {stem}-{kernel} is available for kernel "
                                   f"{kernel}; refresh the package index or boot a kernel Ubuntu builds them for"))
        return out
    signing = state.section("signing")
    if signing.get("site_missing"):
        # dkms makes a new key pair wherever either file is missing (dell/dkms README, "Module signing"), over the
        # site's paths: the driver would be signed with a key nobody enrolled.
        out.append(Finding("module-signing", f"{', '.join(signing['site_missing'])} (driver.signing_key, "
                                             "driver.signing_certificate) not on the node: put the site's signing "
                                             "key and certificate there first; dkms would make a new key pair in "
                                             "their place"))
    elif system.get("secure_boot") == "enabled":
        problem = _signing_problem(signing)
        if problem:
            out.append(Finding("secure-boot", f"Secure Boot is on and the driver would be built by DKMS: {problem}"))
    headers = system.get("headers", {})
    manager = state.package_manager
    available = set(state.section("runtime").get("headers_available", []))
    for kernel in kernels:
        if headers.get(kernel):
            continue
        wanted = names(package_data()["kernel_headers"].get(manager or "", []), kernel=kernel)
        which = "running" if kernel == system.get("kernel") else "pending"
        if manager == "dnf" or (wanted and set(wanted) <= available):
            out.append(Finding("kernel-headers", f"no headers for the {which} kernel {kernel}; the driver stage "
                                                 f"installs {', '.join(wanted)}", fatal=False))
        else:
            out.append(Finding("kernel-headers", f"no headers for the {which} kernel {kernel} and no package "
                                                 f"{', '.join(wanted) or 'for them'} in the configured "
                                                 "repositories: DKMS could not build the driver for it"))
    return out


def _signing_problem(signing: dict) -> str | None:
    """Why the firmware would refuse the modules DKMS signs, or None when it trusts DKMS's certificate.

    DKMS signs what it builds with a certificate of its own (``packages.json``, ``dkms_signing``: where it lives,
    with the source), which the firmware trusts once it is in ``db`` or enrolled as a MOK; the probe's ``signing``
    section reads the firmware's lists as ``mokutil --test-key`` does."""
    cert = signing.get("certificate")
    state = signing.get("state")
    enroll = (f"enroll it with 'mokutil --import {cert}', reboot and confirm it in the MOK Manager at the "
              "node's console")
    if state in ("enrolled", "in-db"):
        return None
    if state == "pending":
        return (f"its certificate {cert} awaits enrollment (MokNew): confirm it in the MOK Manager at the node's "
                "console during the next boot, then run again")
    if state == "not-enrolled":
        return f"its certificate {cert} is not enrolled: {enroll}, or turn Secure Boot off"
    if state == "missing":
        return (f"DKMS has no signing certificate yet ({cert}): make one ('dkms generate_mok' from dkms 3.1; "
                f"Ubuntu: 'update-secureboot-policy --new-key'), {enroll}, or turn Secure Boot off")
    if state == "blocked":
        return (f"its certificate {cert} is on a deny list ({signing.get('list')}): give DKMS another "
                "certificate (mok_certificate and mok_signing_key in /etc/dkms/framework.conf) and enroll that")
    reason = f" ({signing['reason']})" if signing.get("reason") else ""
    return ("no certificate the firmware trusts is known to sign its modules" + reason + ": enroll DKMS's "
            "certificate as a MOK, use install_method: preinstalled, or turn Secure Boot off")


def _kernel_guard_findings(node: Node, state: NodeStateData) -> list[Finding]:
    """A pending kernel a reboot would start without the GPU driver: not fatal, the deploy just will not reboot."""
    reason = kernel_guard.blocked_reboot(node, state, dkms=not driver.precompiled(state))
    return [Finding(kernel_guard.CHECK, reason, fatal=False)] if reason else []


def _gpu_findings(node: Node, state: NodeStateData) -> list[Finding]:
    pci = [d for d in state.section("gpu").get("pci", []) if d.get("gpu")]
    if not node.has_gpus:
        return [Finding("gpus", f"{len(pci)} NVIDIA GPU(s) found on a node the file lists without GPUs",
                        fatal=False)] if pci else []
    out = []
    if len(pci) != node.gpus.count:
        out.append(Finding("gpus", f"{len(pci)} NVIDIA GPU(s) on the PCI bus, the file expects "
                                   f"{node.gpus.count} {node.gpus.model}"))
    model = gpus.model(node.gpus.model) if node.gpus.model else None
    if model:
        known = {i.upper() for i in model.pci_device_ids}
        wrong: dict[str, list[str]] = {}
        for dev in pci:
            ident = f"0x{str(dev.get('device', ''))[2:].upper()}10DE"
            if ident.upper() not in known:
                wrong.setdefault(ident, []).append(str(dev.get("address")))
        for ident, addresses in sorted(wrong.items()):
            out.append(Finding("gpus", f"GPU(s) {', '.join(addresses)} have PCI id {ident}, not a {model.key} "
                                       f"({', '.join(model.pci_device_ids)})"))
    return out


def _fabric_findings(node: Node, state: NodeStateData) -> list[Finding]:
    """A forced ``driver.fabric_manager`` the node's PCI bus contradicts: Fabric Manager would fail to start, or
    NVSwitch GPUs would stay unusable (:mod:`gpu_provision.stages.fabric`); an NVLink 5 board whose NVLSM the
    driver's source does not carry."""
    if not driver.managed(node):
        return []
    out = []
    reason = fabric.mismatch(node, state)
    if reason:
        out.append(Finding("fabric-manager", reason))
    model = fabric.model_mismatch(node, state)
    if model:
        out.append(Finding("fabric-manager", model, fatal=False))
    missing = fabric.nvlsm_missing(node, family(state.system), state)
    if missing:
        out.append(Finding("fabric-manager", missing))
    return out


def _pinning_findings(node: Node, state: NodeStateData) -> list[Finding]:
    """NVIDIA's pinning package for the wanted driver, missing from a CUDA repository whose other pinning packages the
    node's package index knows (a version published before the packages were, or a mirror behind): apt would fail
    on the name. Nothing is said while the index knows none (the repository is not configured yet)."""
    entry, name = driver.pinning_entry(node, state), driver.pinning_package(node, state)
    if not driver.managed(node) or entry is None or name is None or state.package(name).version:
        return []
    known = state.section("runtime").get("apt_names", {}).get(entry["prefix"]) or []
    if not known or name in known:
        return []
    shown = ", ".join(known[:6]) + (f" and {len(known) - 6} more" if len(known) > 6 else "")
    return [Finding("driver-pinning", f"NVIDIA's CUDA repository, as this node's package index knows it, has no {name} "
                                      f"(it has {shown}): set driver.version to a version it has a pinning package "
                                      "for, or give driver.branch alone")]


def branch_warning(node: Node, state: NodeStateData) -> str | None:
    """Why the wanted driver branch may be missing from NVIDIA's CUDA repository for this release and architecture:
    it is older than the first branch the repository was seen to carry (``packages.json``
    ``cuda_repository.first_branch``). A warning, since that reading may be out of date."""
    if not driver.managed(node) or not driver.uses_repository(state, node):
        return None
    values = repos.placeholders(state.system)
    path = f"{values['distro']}/{values['cuda_arch']}"
    first = package_data()["cuda_repository"]["first_branch"].get(path)
    branch = node.driver.spell("branch")
    if not first or int(branch) >= int(first):
        return None
    return (f"NVIDIA's CUDA repository for {path} was seen to carry driver branches from {first} on, not {branch}: "
            f"the install may find no package of branch {branch} there")


def _branch_findings(node: Node, state: NodeStateData) -> list[Finding]:
    warning = branch_warning(node, state)
    return [Finding("driver-branch", warning, fatal=False)] if warning else []


def _runtime_findings(node: Node, state: NodeStateData) -> list[Finding]:
    rt = node.container_runtime
    if rt.docker_source == "distro" and state.package_manager == "dnf":
        return [Finding("container-runtime", "RHEL has no distribution Docker or containerd package; "
                                             "use container_runtime.docker_source: docker")]
    return []


def kubernetes_findings(cluster: Cluster, state: NodeStateData) -> list[Finding]:
    """Version moves kubeadm does not make (``kubernetes.skew`` and ``kubernetes.upgrade`` in packages.json, with
    their sources): an installed kubelet, or on a control plane the cluster itself, moved more than one minor at a
    time or back to an earlier minor. Between patches of one minor either way is a move the upgrade steps make
    (``operations.kubernetes.upgrade``): the first control plane upgrades before any other member changes."""
    if not cluster.kubernetes.enabled:
        return []
    skew = package_data()["kubernetes"]["skew"]
    version = cluster.kubernetes.version
    want = minor(version)
    if want is None:
        return []
    out = []
    installed = state.package("kubelet").version
    have = minor(installed)
    if have is not None and not 0 <= want - have <= skew["upgrade_minors"]:
        out.append(Finding("kubernetes-skew", f"kubelet {installed} is installed and the file wants {version}: "
                                              "kubeadm clusters move one minor at a time, forward only"))
    api_version = (state.section("kubernetes").get("api") or {}).get("cluster_version")
    api = minor(api_version)
    if api is not None and not 0 <= want - api <= skew["upgrade_minors"]:
        out.append(Finding("kubernetes-skew", f"the control plane runs {api_version} and the file wants {version}: "
                                              "kubeadm upgrades a cluster one minor at a time and does not take it "
                                              "back to an earlier minor (between patches of one minor either way)"))
    return out


def _probe_findings(state: NodeStateData) -> list[Finding]:
    """Commands the probe gave up on (``ssh.probe_timeout``): the stages would otherwise act on readings that are
    missing, not negative (a package that is there but could not be asked about)."""
    late = [str(line) for line in state.raw.get("timed_out") or []]
    if not late:
        return []
    return [Finding("probe", f"the node did not answer in time ({'; '.join(late[:3])}); nothing is changed on "
                             "a partial reading: find what hangs there, or raise ssh.probe_timeout")]


def findings(node: Node, cluster: Cluster, state: NodeStateData) -> list[Finding]:
    """Every failed check (fatal) and warning for ``node``; only the probe's when it timed out (the other checks
    would read its missing readings as an unknown OS, no disk, no memory)."""
    late = _probe_findings(state)
    if late:
        return late
    out = [*_os_findings(state), *_resource_findings(state), *_module_findings(node, state),
           *_kernel_guard_findings(node, state), *_gpu_findings(node, state), *_fabric_findings(node, state),
           *_branch_findings(node, state), *_pinning_findings(node, state), *_runtime_findings(node, state),
           *kubernetes_findings(cluster, state)]
    if "nouveau" in state.system.get("modules", []):
        out.append(Finding("nouveau", "nouveau is loaded; the driver stage blacklists it and the node needs a "
                                      "reboot", fatal=False))
    if family(state.system) is None and not any(f.check == "os" for f in out):
        out.append(Finding("os", "unknown OS family"))
    return _ignoring(node, out)


def _ignoring(node: Node, found: list[Finding]) -> list[Finding]:
    """``found`` with the failures the node's ``preflight.ignore`` names turned into warnings that say so."""
    ignored = set(node.preflight.ignore)
    return [Finding(f.check, f"{f.message} (ignored: preflight.ignore)", fatal=False)
            if f.fatal and f.check in ignored else f for f in found]


def request(node: Node, cluster: Cluster) -> Request:
    """System, GPU, runtime (package availability, precompiled modules) and signing (DKMS's certificate under
    Secure Boot, the site's own with ``driver.signing_key``) sections; with Kubernetes, the installed kubelet and
    the API's version (for the skew check)."""
    driver = node.driver
    site = {f"key={driver.signing_key}", f"certificate={driver.signing_certificate}"} if driver.signing_key else set()
    if not cluster.kubernetes.enabled:
        return Request(sections={"system", "gpu", "runtime", "signing"}, signing=site)
    return Request(sections={"system", "gpu", "runtime", "signing", "kubernetes"}, packages={"kubelet"}, signing=site)


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Preflight converges nothing."""
    return []


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """Failed checks, so a drift report shows a node that a deploy would stop, and the kernel guard, which a deploy
    would not stop but would not reboot either."""
    return [Difference("preflight", f.check, "pass", f.message, NAME) for f in findings(node, cluster, state)
            if f.fatal or f.check == kernel_guard.CHECK]


@deploy("Preflight checks")
def preflight_stage() -> None:
    """Check the node; warn about what the later stages fix, fail this node alone for what they cannot."""
    target = commands.this_host()
    node, cluster = node_for(host), cluster_for(host)
    found = findings(node, cluster, current_state(target, request(node, cluster)))
    for finding in found:
        if not finding.fatal:
            target.log_styled(f"preflight warning: {finding.message}", fg="yellow", log_func=logger.warning)
    fatal = [f.message for f in found if f.fatal]
    if fatal:
        commands.fail(name="Preflight checks", reason="preflight failed: " + "; ".join(fatal))
    else:
        target.noop("preflight checks passed")
