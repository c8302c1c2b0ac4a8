"""Reads from the node: nvidia-smi, /proc/driver/nvidia, PCI devices in sysfs, device files.

Every root path comes from the expectations' ``paths`` (defaults ``/sys``, ``/dev``, ``/proc``, ``nvidia-smi``;
``driver_version_file`` replaces ``/proc/driver/nvidia/version``) so a test rig can point the agent at simulated
trees. A reader returns None where the source is absent.
"""

from __future__ import annotations

import grp
import os
import pwd
import stat
import subprocess

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

NVIDIA_VENDOR = "0x10de"
# 0x0300 VGA controller, 0x0302 3D controller; NVSwitches (0x0680) and audio functions are not GPUs.
GPU_CLASSES = ("0x0300", "0x0302")
_EMPTY_ANSWERS = ("No MIG-enabled devices found", "No GPU instances found", "No compute instances found")


def run(argv: list[str], timeout: float = 60.0, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run a command; return ``{returncode, stdout, stderr, command}`` or ``{error, command}`` if it cannot start."""
    command = " ".join(argv)
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        return {"error": f"{argv[0]} not found", "command": command}
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s", "command": command}
    except OSError as exc:
        return {"error": f"cannot run {argv[0]}: {exc}", "command": command}
    return {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "command": command}


def read_text(path: str) -> str | None:
    """Return a file's text, or None when it is absent or unreadable."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


class Smi:
    """Runs one ``nvidia-smi`` binary (the real one, or a simulator named in the expectations)."""

    def __init__(self, binary: str = "nvidia-smi"):
        self.binary = binary

    def text(self, *args: str, timeout: float = 60.0) -> tuple[str | None, str | None]:
        """Return ``(stdout, None)`` on success or ``(None, reason)``."""
        result = run([self.binary, *args], timeout=timeout)
        if "error" in result:
            return None, result["error"]
        if result["returncode"] != 0:
            # "mig -lgi" and "-lci" exit 6 (not found) when there is nothing to list, yet the message is the answer.
            said = result["stdout"] + result["stderr"]
            if any(empty in said for empty in _EMPTY_ANSWERS):
                return said, None
            message = (result["stderr"] or result["stdout"]).strip().splitlines()[-1:] or [""]
            return None, f"nvidia-smi {' '.join(args)} exited {result['returncode']}: {message[0][:200]}"
        return result["stdout"], None


def pci_gpus(sysfs: str = "/sys") -> list[dict[str, str]] | None:
    """List NVIDIA GPUs on the PCI bus: ``[{bus_id, device_id (0xDDDD10DE), class}]``; None without sysfs."""
    root = os.path.join(sysfs, "bus", "pci", "devices")
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return None
    gpus = []
    for name in names:
        base = os.path.join(root, name)
        vendor = (read_text(os.path.join(base, "vendor")) or "").strip().lower()
        if vendor != NVIDIA_VENDOR:
            continue
        klass = (read_text(os.path.join(base, "class")) or "").strip().lower()
        if not klass.startswith(GPU_CLASSES):
            continue
        device = (read_text(os.path.join(base, "device")) or "").strip().lower().removeprefix("0x")
        gpus.append({"bus_id": name.lower(), "device_id": f"0x{device.upper()}10DE", "class": klass})
    return gpus


def stat_device(path: str) -> dict[str, Any] | None:
    """Return ``{owner, group, mode}`` of a device file (mode as 4-digit octal), or None when absent."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    try:
        owner = pwd.getpwuid(info.st_uid).pw_name
    except KeyError:
        owner = str(info.st_uid)
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return {"owner": owner, "group": group, "mode": f"{stat.S_IMODE(info.st_mode):04o}"}


def host_facts(proc: str = "/proc") -> dict[str, Any]:
    """Kernel release and OS name, for the report's header."""
    release = (read_text(os.path.join(proc, "sys", "kernel", "osrelease")) or "").strip() or os.uname().release
    os_name = None
    for line in (read_text("/etc/os-release") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            os_name = line.split("=", 1)[1].strip().strip('"')
    return {"kernel": release, "os": os_name, "hostname": os.uname().nodename}
