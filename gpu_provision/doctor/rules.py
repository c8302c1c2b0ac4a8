"""The doctor's rule table: each known fault with the archive items it reads, what it means and how to fix it.

A rule's check is a pure function of one node's :class:`~gpu_provision.doctor.evidence.Evidence` returning one
line per instance of the fault (a GPU, an image, a user, an Xid code); no line means the fault is absent. A rule
whose evidence is missing from the archive says nothing: the doctor names faults it can show, never guesses.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from gpu_provision.doctor.evidence import Evidence
from gpu_provision.doctor.xid import xid_events
from gpu_provision.node.versions import version_key


class Found(NamedTuple):
    """One instance whose fix is its own (the exact command for that device file, stage or GPU), where the rule's
    fix alone would leave the reader to work it out."""

    detail: str
    fix: str


@dataclass(frozen=True)
class DoctorRule:
    """One known fault: ``id``, ``title`` (the symptom users search for), ``evidence`` (archive items read),
    ``explanation``, ``fix``, and ``check`` (evidence -> one line per instance found, or a :class:`Found` where the
    instance has a fix of its own)."""

    id: str
    title: str
    evidence: tuple[str, ...]
    explanation: str
    fix: str
    check: Callable[[Evidence], Sequence[str | Found]]


def _image_cuda(image: str, env: list[str], declared: str | None) -> str | None:
    """The CUDA version an image needs: its ``NVIDIA_REQUIRE_CUDA`` (what the container toolkit enforces), else its
    ``CUDA_VERSION``, else the version the cluster file declares, else a version in its tag (``cuda:12.4.1-...``)."""
    values = dict(item.split("=", 1) for item in env if "=" in item)
    for text, pattern in ((values.get("NVIDIA_REQUIRE_CUDA"), r"cuda>=(\d+\.\d+)"),
                          (values.get("CUDA_VERSION"), r"^(\d+\.\d+)"), (declared, r"^(\d+\.\d+)"),
                          (image.rsplit("/", 1)[-1].partition(":")[2], r"^(\d+\.\d+)")):
        match = re.search(pattern, text or "")
        if match:
            return match.group(1)
    return None


def cuda_insufficient(ev: Evidence) -> list[str]:
    """Images that need a newer CUDA than the loaded driver supports."""
    driver = ev.driver_cuda()
    if driver is None:
        return []
    found = ev.json("runtime/images.json") or {}
    out = []
    for image, declared in sorted(ev.expect.images.items()):
        needed = _image_cuda(image, (found.get(image) or {}).get("env") or [], declared)
        if needed and version_key(needed) > version_key(driver):
            out.append(f"{image} needs CUDA {needed}; the driver supports CUDA {driver}")
    return out


def _may_open(mode: str, group: str, user: str, groups: list[str]) -> bool:
    bits = int(mode, 8)
    return user == "root" or bool(bits & 0o006) or (group in groups and bool(bits & 0o060))


def nvml_permissions(ev: Evidence) -> list[str]:
    """Configured GPU users who cannot open the NVIDIA device files (mode and group against their groups)."""
    devices = ev.json("system/devices.json") or {}
    users = ev.json("system/users.json") or {}
    core = {path: d for path, d in devices.items() if re.fullmatch(r"/dev/nvidia(\d+|ctl)", path)}
    out = []
    for user in ev.expect.users:
        if user not in users:
            continue
        if users[user] is None:
            out.append(f"user {user} does not exist on the node")
            continue
        refused = [p for p, d in sorted(core.items()) if not _may_open(d["mode"], d["group"], user, users[user])]
        if refused:
            d = core[refused[0]]
            out.append(f"user {user} (groups: {', '.join(users[user]) or 'none'}) cannot open {', '.join(refused)} "
                       f"(mode {d['mode']}, group {d['group']})")
    if "Insufficient Permissions" in (ev.text("nvidia-smi/nvidia-smi.txt") or ""):
        out.append("nvidia-smi printed: Failed to initialize NVML: Insufficient Permissions")
    return out


def library_mismatch(ev: Evidence) -> list[str]:
    """Userspace NVML libraries whose version differs from the loaded kernel module's."""
    module = ev.module_version()
    out = [f"loaded kernel module {module}, library {path} is {version}"
           for path, version in sorted(ev.library_versions().items()) if module and version != module]
    printed = ev.text("nvidia-smi/nvidia-smi.txt") or ""
    if not out and "Driver/library version mismatch" in printed:
        nvml = re.search(r"NVML library version:\s*(\d+(?:\.\d+)*)", printed)
        seen = [f"loaded kernel module {module}"] if module else []
        seen += [f"NVML library {nvml.group(1)}"] if nvml else []
        out.append("nvidia-smi printed: Failed to initialize NVML: Driver/library version mismatch"
                   + (f" ({', '.join(seen)})" if seen else ""))
    return out


def xid_errors(ev: Evidence) -> list[str]:
    """One line per Xid code in this boot's kernel log, decoded with the catalogue and its immediate action."""
    out = []
    for events in xid_events(ev.text("kernel/nvidia.log") or ""):
        entry = events.entry()
        note = "" if entry["status"] == "confirmed" else f" [catalogue entry {entry['status']}]"
        out.append(f"Xid {events.code} ({entry['mnemonic']}: {entry['description']}) x{events.count} on "
                   f"{', '.join(events.gpus)}; {events.action()}{note}")
    return out


def fabric_manager_down(ev: Evidence) -> list[str]:
    """NVSwitch GPUs whose fabric registration did not complete (Fabric Manager stopped or failing)."""
    out = []
    for gpu in ev.gpus():
        state, status = (gpu.findtext("fabric/state") or "N/A").strip(), (gpu.findtext("fabric/status") or "").strip()
        if state != "N/A" and (state != "Completed" or status not in ("Success", "N/A", "")):
            out.append(f"GPU {gpu.get('id')}: fabric state {state}, status {status or 'none'}")
    # The probe's services section: unit -> {"loaded", "enabled", "active"} (None for a unit systemd lacks).
    unit = ev.probe("services").get("nvidia-fabricmanager") or {}
    if out and unit.get("active") and unit["active"] != "active":
        out.append(f"nvidia-fabricmanager is {unit['active']}")
    return out


def nouveau_loaded(ev: Evidence) -> list[str]:
    """The nouveau module is loaded, or holds a GPU (it binds the GPUs the NVIDIA driver needs)."""
    out = ["nouveau is loaded"] if "nouveau" in ev.modules() else []
    return out + [f"GPU {address} is bound to nouveau" for address, driver in sorted(ev.pci_drivers().items())
                  if driver == "nouveau"]


#: The kernel's refusal of a module whose signature it cannot check against a key it trusts (kernel/module/signing.c,
#: module_sig_check: ``pr_notice("Loading of %s is rejected")`` where signatures are enforced, as Debian's kernels
#: do under Secure Boot, seen on its 6.1 and 6.12 kernels in the rig's Secure Boot VMs; later kernels put the
#: module's name first, ``"<module>: loading of ..."``); ``modprobe`` then prints "Key was rejected by service".
SIGNATURE_REJECTED = re.compile(r"(?:(\S+): loading|Loading) of (unsigned module|module with unavailable key|"
                                r"module with unsupported crypto) is rejected")


def signature_rejected(ev: Evidence) -> list[str]:
    """The kernel refused modules for their signature while no NVIDIA module is loaded (or refused one that names
    itself as NVIDIA's): one line per reason, with how often."""
    loaded = any(m.startswith("nvidia") for m in ev.modules())
    counts: dict[tuple[str, str], int] = {}
    for line in (ev.text("kernel/nvidia.log") or "").splitlines():
        match = SIGNATURE_REJECTED.search(line)
        if not match or (loaded and not (match.group(1) or "").startswith("nvidia")):
            continue
        key = (match.group(1) or "a module", match.group(2))
        counts[key] = counts.get(key, 0) + 1
    note = "" if loaded else "; no NVIDIA module is loaded"
    return [f"the kernel rejected {module} ({reason}) x{count}{note}" for (module, reason), count in counts.items()]


def reboot_pending(ev: Evidence) -> list[str]:
    """A newer kernel installed than the one running (saying when no NVIDIA modules were found for it), or the
    distribution's reboot-required flag."""
    system = ev.probe("system")
    out = []
    running, pending = system.get("kernel"), system.get("kernel_pending")
    if running and pending and running != pending:
        modules = system.get("nvidia_modules")
        missing = isinstance(modules, dict) and pending in modules and not modules[pending]
        out.append(f"running kernel {running}, newest installed {pending}"
                   + (" (no NVIDIA modules found for it)" if missing else ""))
    if ev.node_file("/var/run/reboot-required") is not None:
        packages = " ".join((ev.node_file("/var/run/reboot-required.pkgs") or "").split())
        out.append("/var/run/reboot-required is present" + (f" (packages: {packages})" if packages else ""))
    return out


def mig_pending(ev: Evidence) -> list[str]:
    """GPUs whose MIG mode waits for a GPU reset (current and pending modes differ)."""
    out = []
    for gpu in ev.gpus():
        current = (gpu.findtext("mig_mode/current_mig") or "N/A").strip()
        pending = (gpu.findtext("mig_mode/pending_mig") or "N/A").strip()
        if current != pending:
            out.append(f"GPU {gpu.get('id')}: MIG {current}, pending {pending}")
    return out


def _expected_runtime(ev: Evidence) -> str | None:
    if ev.expect.runtime:
        return ev.expect.runtime
    if ev.node_file("/etc/docker/daemon.json") is not None or ev.text("runtime/docker-info.json"):
        return "docker"
    return "containerd" if ev.node_file("/etc/containerd/config.toml") is not None else None


def _installed(ev: Evidence, runtime: str) -> bool:
    """Whether the probe found ``runtime``'s binary; a runtime not installed at all is drift, not this fault."""
    return bool(ev.probe("runtime").get(f"{runtime}_version"))


def runtime_unconfigured(ev: Evidence) -> list[str]:
    """The container runtime knows no ``nvidia`` runtime (nor, for containerd, CDI), so containers get no GPU.

    Only an installed runtime can be misconfigured: on a node without it (not deployed yet) drift names the missing
    package, and this rule stays quiet rather than blame a configuration nothing reads.
    """
    if not ev.gpus():
        return []
    runtime = _expected_runtime(ev)
    if runtime == "docker" and (ev.node_file("/etc/docker/daemon.json") is not None
                                or ev.text("runtime/docker-info.json") or _installed(ev, "docker")):
        try:
            daemon = json.loads(ev.node_file("/etc/docker/daemon.json") or "{}")
        except ValueError:
            return ["/etc/docker/daemon.json is not valid JSON"]
        info = ev.json("runtime/docker-info.json") or {}
        if "nvidia" not in (daemon.get("runtimes") or {}) and "nvidia" not in (info.get("Runtimes") or {}):
            return ["docker: no 'nvidia' runtime in /etc/docker/daemon.json"]
    if runtime == "containerd":
        config = ev.node_file("/etc/containerd/config.toml")
        if config is None:
            return ["containerd: /etc/containerd/config.toml is missing"] if _installed(ev, "containerd") else []
        # nvidia-ctk writes a drop-in under conf.d where containerd's config imports it.
        config += "".join(text for name, text in ev.files.items() if name.startswith("files/etc/containerd/conf.d/"))
        if not re.search(r"runtimes\.['\"]?nvidia['\"]?\]", config) and not re.search(r"enable_cdi\s*=\s*true", config):
            return ["containerd: no 'nvidia' runtime (and CDI off) in /etc/containerd/config.toml"]
    return []


def device_plugin_missing(ev: Evidence) -> list[str]:
    """A GPU node whose kubelet runs but has no NVIDIA device plugin socket registered."""
    listing = ev.text("listings/var/lib/kubelet/device-plugins.txt")
    if listing is None or not ev.gpus():
        return []
    names = listing.split()
    if "kubelet.sock" in names and not any(n.startswith("nvidia") for n in names):
        return ["kubelet has no nvidia*.sock in /var/lib/kubelet/device-plugins (sockets: "
                f"{', '.join(names)})"]
    return []


RULES: tuple[DoctorRule, ...] = (
    DoctorRule("cuda-driver-insufficient", "CUDA driver version is insufficient for CUDA runtime version",
         ("nvidia-smi/q.xml", "runtime/images.json", "expectations.json"),
         "A container image built for a newer CUDA than the node's driver supports fails at CUDA initialisation "
         "(the container toolkit refuses images whose NVIDIA_REQUIRE_CUDA the driver does not meet).",
         "Install a driver branch that supports the image's CUDA version (driver.branch), or use an image built "
         "for the driver's CUDA version or older.", cuda_insufficient),
    DoctorRule("nvml-permissions", "Failed to initialize NVML: Insufficient Permissions",
         ("system/devices.json", "system/users.json", "nvidia-smi/nvidia-smi.txt"),
         "The NVIDIA device files (/dev/nvidiactl, /dev/nvidiaN) are not readable and writable by the user, "
         "neither by their mode nor through a group the user belongs to.",
         "Set permissions.group/permissions.mode and list the user in permissions.users, deploy, then log in "
         "again so the new group applies.", nvml_permissions),
    DoctorRule("driver-library-mismatch", "Failed to initialize NVML: Driver/library version mismatch",
         ("files/proc/driver/nvidia/version", "versions/libnvidia-ml.txt", "nvidia-smi/nvidia-smi.txt"),
         "The userspace driver libraries were upgraded while the older kernel module stays loaded.",
         "Reboot the node (or unload and reload the nvidia modules once no process uses the GPUs); hold the "
         "driver packages so unattended upgrades cannot do it again.", library_mismatch),
    DoctorRule("xid-errors", "NVRM: Xid", ("kernel/nvidia.log",),
         "The driver logged Xid events: GPU, memory, NVLink or application faults, decoded with NVIDIA's Xid "
         "catalogue.", "Follow each code's immediate action; repeated hardware codes on one GPU call for NVIDIA "
         "support with this bundle.", xid_errors),
    DoctorRule("fabric-manager-down", "cudaErrorSystemNotReady: system not yet initialized (NVSwitch)",
         ("nvidia-smi/q.xml", "probe.json"),
         "On NVSwitch systems (HGX) CUDA cannot start until Fabric Manager has trained the fabric and registered "
         "every GPU; a stopped or failing Fabric Manager leaves the GPUs unregistered.",
         "Install nvidia-fabricmanager of exactly the driver's version and start it (driver.fabric_manager); read "
         "journals/nvidia-fabricmanager.log for its reason.", fabric_manager_down),
    DoctorRule("nouveau-loaded", "nouveau is loaded / NVIDIA driver not loaded",
         ("files/proc/modules", "probe.json", "system/pci.json"),
         "The open-source nouveau module holds the GPUs (it is loaded, or bound to a GPU on the PCI bus), so the "
         "NVIDIA driver cannot bind to them.",
         "Blacklist nouveau (the driver stage writes /etc/modprobe.d/blacklist-nouveau.conf), rebuild the "
         "initramfs and reboot.", nouveau_loaded),
    DoctorRule("module-signature-rejected", "modprobe: ERROR: could not insert 'nvidia': Key was rejected by service",
         ("kernel/nvidia.log", "files/proc/modules"),
         "Secure Boot is on and the kernel enforces module signatures: it refuses a module that is unsigned or "
         "signed by a key it does not trust. A driver built by DKMS is signed with DKMS's own certificate, which the "
         "firmware trusts only once it is enrolled as a MOK.",
         "Enroll DKMS's certificate (mokutil --import /var/lib/dkms/mok.pub; Ubuntu: /var/lib/shim-signed/mok/"
         "MOK.der), reboot and confirm it in the MOK Manager at the console; or use signed precompiled modules "
         "(Ubuntu) or turn Secure Boot off. gpu-provision drift --stage preflight names the certificate and whether "
         "it is enrolled.", signature_rejected),
    DoctorRule("reboot-pending", "kernel installed but not running (reboot required)",
         ("probe.json", "files/var/run/reboot-required"),
         "A newer kernel (or a package asking for a reboot) is installed: the driver modules built for it are "
         "not loaded until the node reboots. A kernel without NVIDIA modules boots with no GPU driver.",
         "Make sure the new kernel has the NVIDIA modules (its headers for DKMS, or the precompiled modules "
         "package), then drain the node and reboot it (driver.reboot: allowed lets the deploy do it); "
         "driver.hold_kernel keeps kernels from being upgraded underneath the driver.", reboot_pending),
    DoctorRule("mig-pending", "MIG mode pending: a GPU reset is required", ("nvidia-smi/q.xml",),
         "MIG mode was changed but takes effect only after a GPU reset; until then the GPU keeps its old mode.",
         "Stop the GPU's processes and reset it (nvidia-smi -r -i GPU), or reboot; the gpu-provision-mig boot "
         "unit applies the layout at boot.", mig_pending),
    DoctorRule("runtime-not-configured", "could not select device driver \"\" with capabilities: [[gpu]]",
         ("files/etc/docker/daemon.json", "runtime/docker-info.json", "files/etc/containerd/config.toml"),
         "The container runtime has no nvidia runtime configured, so containers asking for GPUs get none.",
         "Deploy the toolkit stage (nvidia-ctk runtime configure) and restart the runtime.", runtime_unconfigured),
    DoctorRule("device-plugin-not-registered", "0/N nodes are available: Insufficient nvidia.com/gpu",
         ("listings/var/lib/kubelet/device-plugins.txt", "journals/kubelet.log"),
         "The kubelet runs but no NVIDIA device plugin registered with it, so the node offers no nvidia.com/gpu.",
         "Check the device plugin DaemonSet's pod on this node (kubectl -n kube-system get pods -o wide) and its "
         "log; it needs the nvidia runtime (or CDI) to see the GPUs.", device_plugin_missing),
)
