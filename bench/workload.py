"""The state every tool checks: pinned and held packages, config files, services, a group with a member.

One :class:`Workload` is rendered three ways, so the tools check the same things: as a drift stage for
gpu-provision (:meth:`Workload.stage`), as a stock pyinfra deploy (``bench/stock_deploy.py`` reads
:meth:`Workload.to_json`) and as an Ansible playbook (:func:`bench.playbook.write_playbook`). :func:`converge_script`
brings a node to it (setup, not measured).
"""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, request_for

#: Packages every rig node has from its base image; the first three are held.
PACKAGES = ("openssh-server", "sudo", "kmod", "ca-certificates", "dbus", "iproute2", "python3", "systemd")
HELD = 3
#: Units every rig node runs (absent from the loopback fleet, which has no systemd).
UNITS = ("ssh.service", "systemd-networkd.service")
GROUP = "gpu-bench"
MEMBER = "benchuser"
FILE_DIR = "/etc/gpu-provision-bench"


def file_text(index: int) -> str:
    """Content of bench config file ``index`` (deterministic, a few hundred bytes)."""
    lines = [f"# gpu-provision benchmark file {index}"] + [f"key{index}_{k} = value {k * index}" for k in range(12)]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Workload:
    """What each node must have."""

    versions: dict[str, str]
    files: int = 8
    units: tuple[str, ...] = UNITS
    held: tuple[str, ...] = field(default=PACKAGES[:HELD])

    @property
    def file_paths(self) -> list[str]:
        """Paths of the config files."""
        return [f"{FILE_DIR}/bench-{i:03d}.conf" for i in range(self.files)]

    @property
    def operations(self) -> int:
        """Operations a stock deploy needs: one for all packages, one per file, per unit, group, member."""
        return 1 + self.files + len(self.units) + 2

    def wants(self) -> list[Any]:
        """The workload as gpu-provision wants."""
        out: list[Any] = [PackageWant(n, v, held=n in self.held) for n, v in sorted(self.versions.items())]
        out += [FileWant(p, content=file_text(i), mode="0644") for i, p in enumerate(self.file_paths)]
        out += [UnitWant(u) for u in self.units]
        out.append(GroupWant(GROUP, (MEMBER,)))
        return out

    def stage(self) -> SimpleNamespace:
        """A drift stage (request/wants) for this workload."""
        wants = self.wants()
        return SimpleNamespace(NAME="bench", request=lambda node, cluster: request_for(wants),
                               wants=lambda node, cluster, state: wants)

    def to_json(self) -> dict[str, Any]:
        """Plain form, read by the stock pyinfra deploy and the playbook writer."""
        return {"versions": self.versions, "held": list(self.held), "units": list(self.units),
                "files": [{"path": p, "text": file_text(i)} for i, p in enumerate(self.file_paths)],
                "group": GROUP, "member": MEMBER}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        """Inverse of :meth:`to_json`."""
        return cls(versions=dict(data["versions"]), files=len(data["files"]), units=tuple(data["units"]),
                   held=tuple(data["held"]))

    def with_files(self, files: int) -> Workload:
        """The same workload with ``files`` config files."""
        return Workload(self.versions, files, self.units, self.held)

    def without_units(self) -> Workload:
        """The same workload without services (for nodes without systemd)."""
        return Workload(self.versions, self.files, (), self.held)


def base_versions(root: Path) -> dict[str, str]:
    """Installed versions of :data:`PACKAGES` in a Debian root file system (read with its own dpkg-query)."""
    out = subprocess.run(["chroot", str(root), "/usr/bin/dpkg-query", "-W", "-f", "${Package}\t${Version}\n",
                          *PACKAGES], capture_output=True, text=True, check=True, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    versions = dict(line.split("\t", 1) for line in out.stdout.splitlines() if "\t" in line)
    missing = set(PACKAGES) - set(versions)
    if missing:
        raise RuntimeError(f"base image lacks {', '.join(sorted(missing))}")
    return versions


def converge_script(workload: Workload, max_files: int) -> str:
    """Shell that brings a node to ``workload`` (files beyond it up to ``max_files`` too, so a larger workload
    is also in sync), holds the packages and installs python3-apt, which Ansible's apt module needs."""
    big = workload.with_files(max(max_files, workload.files))
    lines = ["set -e", f"mkdir -p {FILE_DIR}"]
    for i, path in enumerate(big.file_paths):
        lines.append(f"printf %s {shlex.quote(file_text(i))} > {path}; chmod 0644 {path}; chown root:root {path}")
    lines.append(f"apt-mark hold {' '.join(workload.held)} >/dev/null")
    lines.append(f"getent group {GROUP} >/dev/null || groupadd {GROUP}")
    lines.append(f"id {MEMBER} >/dev/null 2>&1 || useradd -M -s /usr/sbin/nologin {MEMBER}")
    lines.append(f"usermod -a -G {GROUP} {MEMBER}")
    lines.append("dpkg-query -W python3-apt >/dev/null 2>&1 || "
                 "{ apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y python3-apt; } "
                 ">/dev/null")
    return "\n".join(lines) + "\n"


def write_json(path: Path, workload: Workload) -> Path:
    """Write the workload's plain form to ``path``."""
    path.write_text(json.dumps(workload.to_json(), indent=1))
    return path
