"""Canned probe answers for stage tests: fresh nodes per OS, and the answer a node gives once converged."""

from __future__ import annotations

import copy
import json
from typing import Any

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, Want, sha256

SYSTEMS: dict[str, dict[str, Any]] = {
    "debian12": {"os_id": "debian", "os_version": "12", "codename": "bookworm", "arch": "x86_64",
                 "kernel": "6.1.0-28-amd64", "kernel_pending": "6.1.0-28-amd64"},
    "ubuntu2404": {"os_id": "ubuntu", "os_like": "debian", "os_version": "24.04", "codename": "noble",
                   "arch": "x86_64", "kernel": "6.8.0-45-generic", "kernel_pending": "6.8.0-47-generic"},
    "ubuntu2204-arm": {"os_id": "ubuntu", "os_like": "debian", "os_version": "22.04", "codename": "jammy",
                       "arch": "aarch64", "kernel": "6.5.0-1020-nvidia-64k", "kernel_pending": "6.5.0-1020-nvidia-64k"},
    "rocky9": {"os_id": "rocky", "os_like": "rhel centos fedora", "os_version": "9.4", "arch": "x86_64",
               "kernel": "5.14.0-427.13.1.el9_4.x86_64", "kernel_pending": "5.14.0-427.13.1.el9_4.x86_64"},
}
MANAGER = {"debian12": "apt", "ubuntu2404": "apt", "ubuntu2204-arm": "apt", "rocky9": "dnf"}


def h200_pci(count: int, device: str = "0x2335") -> list[dict[str, Any]]:
    """PCI entries of ``count`` NVIDIA GPUs as the gpu section reports them."""
    return [{"address": f"0000:{0x18 + i:02x}:00.0", "device": device, "class": "0x030200", "gpu": True}
            for i in range(count)]


def nvswitch_pci(count: int) -> list[dict[str, Any]]:
    """PCI entries of ``count`` NVSwitches (NVIDIA functions of class 0x068000) as the gpu section reports them."""
    return [{"address": f"0000:{0x05 + i:02x}:00.0", "device": "0x22a3", "class": "0x068000", "gpu": False}
            for i in range(count)]


def nvlink5_bridges(count: int) -> list[dict[str, Any]]:
    """``count`` NVLink 5 management bridges (ConnectX-7 functions with SW_MNG in their VPD) as the gpu section
    reports them: an HGX B200 or B300 board, whose NVSwitches are not PCI functions of the host."""
    return [{"address": f"0000:{0xa0 + i:02x}:00.1", "vendor": "0x15b3", "device": "0x1021"} for i in range(count)]


def fresh(os_key: str, gpus: int = 0, device: str = "0x2335", secure_boot: str = "disabled",
          modules: tuple[str, ...] = (), nvswitches: int = 0, bridges: int = 0) -> dict[str, Any]:
    """A node as installed: no NVIDIA software, headers for its kernels, ``gpus`` GPUs, ``nvswitches``
    NVSwitches on the PCI bus and ``bridges`` NVLink 5 management bridges."""
    system = dict(SYSTEMS[os_key])
    kernels = {system["kernel"], system["kernel_pending"]}
    system.update(secure_boot=secure_boot, mem_total_kib=512 * 1024 * 1024, disk_free_bytes=200 * 1024**3,
                  modules=list(modules), headers={k: True for k in kernels}, sysctls={}, swaps=[])
    return {
        "system": system,
        "packages": {"manager": MANAGER[os_key], "packages": {}},
        "files": {},
        "services": {},
        "accounts": {},
        "gpu": {"smi_rc": None, "gpus": [], "pci": nvswitch_pci(nvswitches) + h200_pci(gpus, device), "devices": {},
                "nvlink5_bridges": nvlink5_bridges(bridges), "driver_version_line": None},
        "runtime": {"nvidia_ctk_version": None, "containerd_version": None, "docker_version": None,
                    "cdi_spec_mtime": None, "cdi_run_spec_mtime": None, "driver_installed_at": None,
                    "precompiled_modules": [], "headers_available": [], "dev_char_missing": []},
    }


def converged(raw: dict[str, Any], wants: list[Want], gid: int = 990) -> dict[str, Any]:
    """``raw`` as the node answers once ``wants`` are met (what a correct deploy leaves behind)."""
    out = copy.deepcopy(raw)
    for want in wants:
        if isinstance(want, PackageWant):
            version = (want.version or "1.0").replace("*", "0")
            if "-" not in version:
                version += "-1"
            out["packages"]["packages"][want.name] = {"version": version, "held": want.held}
        elif isinstance(want, FileWant):
            current = out["files"].get(want.path, {}).get("content")
            text = want.desired_text(current)
            out["files"][want.path] = {"exists": True, "type": "file", "mode": want.mode, "owner": want.owner,
                                       "group": want.group, "sha256": sha256(text), "content": text}
        elif isinstance(want, UnitWant):
            out["services"][want.name] = {"loaded": True, "enabled": "enabled" if want.enabled else "disabled",
                                          "active": "active" if want.running else "inactive"}
        elif isinstance(want, GroupWant):
            out["accounts"][want.name] = {"gid": gid, "members": sorted(want.members)}
    return out


def with_file(raw: dict[str, Any], path: str, text: str) -> dict[str, Any]:
    """``raw`` with a regular file at ``path`` holding ``text``."""
    out = copy.deepcopy(raw)
    out["files"][path] = {"exists": True, "type": "file", "mode": "0644", "owner": "root", "group": "root",
                          "sha256": sha256(text), "content": text}
    return out


def dumps(data: Any) -> str:
    """JSON as nvidia-ctk writes daemon.json (four-space indent, sorted keys)."""
    return json.dumps(data, indent=4, sort_keys=True) + "\n"
