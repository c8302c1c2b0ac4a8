"""OS, kernel (running and pending), architecture, Secure Boot, memory, disk and loaded modules."""

import os
import platform
import re


def _os_release():
    out = {}
    try:
        with open("/etc/os-release") as f:
            for line in f:
                key, _, value = line.strip().partition("=")
                if key:
                    out[key] = value.strip('"')
    except OSError:
        pass
    return out


def _kernel_key(version):
    return [int(p) if p.isdigit() else p for p in re.split(r"[.-]", version)]


def _pending_kernel(running):
    # The newest installed kernel is the one the next boot picks (Debian, Ubuntu and RHEL default boot order).
    installed = set()
    for folder, prefix in (("/boot", "vmlinuz-"), ("/lib/modules", "")):
        try:
            for name in os.listdir(folder):
                if name.startswith(prefix) and name[len(prefix):][:1].isdigit():
                    installed.add(name[len(prefix):])
        except OSError:
            pass
    if not installed:
        return running, []
    ordered = sorted(installed, key=_kernel_key)
    return ordered[-1], ordered


def _secure_boot():
    try:
        for name in os.listdir("/sys/firmware/efi/efivars"):
            if name.startswith("SecureBoot-"):
                with open(os.path.join("/sys/firmware/efi/efivars", name), "rb") as f:
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


def _headers(kernel):
    return os.path.isdir("/lib/modules/%s/build" % kernel) or os.path.isdir("/usr/src/linux-headers-%s" % kernel)


def collect(request):
    """Read the system facts; ``request`` may name extra ``sysctls`` to read."""
    release = _os_release()
    running = platform.release()
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
        "arch": platform.machine(),
        "kernel": running,
        "kernel_pending": pending,
        "kernels_installed": installed,
        "headers": {k: _headers(k) for k in sorted({running, pending})},
        "secure_boot": _secure_boot(),
        "mem_total_kib": _meminfo_kib(),
        "disk_free_bytes": stat.f_bavail * stat.f_frsize,
        "modules": _modules(),
        "sysctls": sysctls,
        "swaps": swaps,
        "python": platform.python_version(),
    }
