"""OS, kernel (running and pending, with the NVIDIA modules built for each), architecture, Secure Boot, memory,
disk and loaded modules."""

import os
import sys

from ..versions import version_key
from . import _command, _dpkg


def os_release(path="/etc/os-release"):
    """The fields of os-release (``ID``, ``VERSION_ID``, ...), empty when the file cannot be read."""
    out = {}
    try:
        with open(path) as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key:
                    out[key] = value.strip('"')
    except OSError:
        pass
    return out


def running_kernel():
    """The running kernel's release (``uname -r``)."""
    return os.uname().release


def _kernel_in_modules(name):
    # A kernel's own modules (kernel/, modules.order) make it installed; a folder holding only what others put
    # there (headers' build link, DKMS's updates/ for the running kernel of a container) does not.
    top = os.path.join("/lib/modules", name)
    return os.path.isdir(os.path.join(top, "kernel")) or os.path.exists(os.path.join(top, "modules.order"))


def _pending_kernel(running):
    # The newest installed kernel is the one the next boot picks (Debian, Ubuntu and RHEL default boot order).
    installed = set()
    for folder, prefix in (("/boot", "vmlinuz-"), ("/lib/modules", "")):
        try:
            for name in os.listdir(folder):
                version = name[len(prefix):]
                if name.startswith(prefix) and version[:1].isdigit() and (prefix or _kernel_in_modules(name)):
                    installed.add(version)
        except OSError:
            pass
    if not installed:
        return running, []
    ordered = sorted(installed, key=version_key)
    return ordered[-1], ordered


def secure_boot(efivars="/sys/firmware/efi/efivars"):
    """``enabled`` or ``disabled`` as the firmware's SecureBoot variable says, ``unknown`` without one, ``not-efi``
    on a machine that did not boot through UEFI."""
    try:
        for name in os.listdir(efivars):
            if name.startswith("SecureBoot-"):
                with open(os.path.join(efivars, name), "rb") as f:
                    data = f.read()
                return "enabled" if data[-1:] == b"\x01" else "disabled"
        return "unknown"
    except OSError:
        return "not-efi"


def _meminfo_kib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _modules():
    try:
        with open("/proc/modules") as f:
            return sorted(line.split()[0] for line in f)
    except OSError:
        return []


#: The NVIDIA kernel module's file names, plain or compressed as kmod reads them: NVIDIA's ``nvidia.ko`` and
#: Debian's ``nvidia-current.ko`` (its packages rename the module so that driver branches can sit side by side).
MODULE_FILES = tuple(stem + ext for stem in ("nvidia.ko", "nvidia-current.ko") for ext in ("", ".xz", ".zst", ".gz"))


def _module_files(kernel):
    # DKMS installs under updates/dkms, Ubuntu's precompiled linux-modules-nvidia-* under kernel/nvidia-*, RHEL's
    # kmod packages under extra: any nvidia.ko* in the kernel's tree is a module the next boot can load.
    found = []
    top = "/lib/modules/%s" % kernel
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ("build", "source")]
        found.extend(os.path.join(folder, f) for f in files if f in MODULE_FILES)
    return sorted(found)


def _dkms_built():
    # `dkms status` lines: "nvidia/580.95.05, 6.8.0-50-generic, x86_64: installed" (older dkms: "nvidia, 580..."),
    # Debian's "nvidia-current/535.261.03, 6.1.0-57-amd64, x86_64: installed".
    if not _command.available("dkms"):
        return set()  # no DKMS, nothing built by it: not worth a process on every check
    text = _command.output(["dkms", "status"])  # timed out: the section answers an error, never a guess
    out = set()
    for line in text.splitlines():
        head, _, status = line.rpartition(":")
        parts = [p.strip() for p in head.split(",")]
        if parts and parts[0].startswith("nvidia") and status.strip().startswith("installed") and len(parts) >= 3:
            out.add(parts[-2])
    return out


def _precompiled_packages():
    # Ubuntu's signed precompiled modules: linux-modules-nvidia-<branch>-server[-open]-<kernel>, installed.
    return {name for name, _, abbrev in _dpkg.entries(prefix="linux-modules-nvidia-") if abbrev[1:2] == "i"}


def nvidia_modules(kernels):
    """Per kernel, where its NVIDIA modules come from: ``dkms``, ``package`` (a precompiled package), ``files``
    (a module file of another origin), or None when the kernel has none."""
    dkms, packages = _dkms_built(), _precompiled_packages()
    out = {}
    for kernel in kernels:
        files = _module_files(kernel)
        if kernel in dkms or any("/updates/dkms/" in f for f in files):
            out[kernel] = "dkms"
        elif any(p.endswith("-" + kernel) for p in packages):
            out[kernel] = "package"
        else:
            out[kernel] = "files" if files else None
    return out


def _headers(kernel):
    return os.path.isdir("/lib/modules/%s/build" % kernel) or os.path.isdir("/usr/src/linux-headers-%s" % kernel)


def collect(request):
    """Read the system facts; ``request`` may name extra ``sysctls`` to read."""
    release = os_release()
    running = running_kernel()
    pending, installed = _pending_kernel(running)
    stat = os.statvfs("/")
    sysctls = {}
    for name in (request or {}).get("sysctls", []):
        try:
            with open("/proc/sys/" + name.replace(".", "/")) as f:
                sysctls[name] = f.read().strip()
        except OSError:
            sysctls[name] = None
    swaps = []
    try:
        with open("/proc/swaps") as f:
            swaps = [line.split()[0] for line in f.readlines()[1:] if line.strip()]
    except OSError:
        pass
    return {
        "os_id": release.get("ID", ""),
        "os_like": release.get("ID_LIKE", ""),
        "os_version": release.get("VERSION_ID", ""),
        "codename": release.get("VERSION_CODENAME", ""),
        "arch": os.uname().machine,
        "kernel": running,
        "kernel_pending": pending,
        "kernels_installed": installed,
        "headers": {k: _headers(k) for k in sorted({running, pending})},
        "nvidia_modules": nvidia_modules(sorted({running, pending})),
        "secure_boot": secure_boot(),
        "mem_total_kib": _meminfo_kib(),
        "disk_free_bytes": stat.f_bavail * stat.f_frsize,
        "modules": _modules(),
        "sysctls": sysctls,
        "swaps": swaps,
        "python": "%d.%d.%d" % sys.version_info[:3],
    }
