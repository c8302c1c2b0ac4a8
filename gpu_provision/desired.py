"""Desired state as data, and how it differs from a node's probed state.

A stage describes what a node should have as a list of wants (packages, files, units, groups). The same list
serves two readers: the generic operations in :mod:`gpu_provision.operations` converge it, and
:func:`differences` reports it for drift checks, so ``pyinfra ... --dry`` and ``gpu-provision drift`` agree by
construction. Stages with state that is not one of these kinds (MIG layouts, kubeadm) return their own
:class:`Difference` objects from the same probe answer.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

from gpu_provision.state import FileState, NodeStateData, Request


@dataclass(frozen=True)
class PackageWant:
    """A package installed (at ``version`` when given, as the package manager spells it) and optionally held."""

    name: str
    version: str | None = None
    held: bool = False
    present: bool = True


@dataclass(frozen=True)
class FileWant:
    """A file with exact ``content`` (text, or bytes for a binary file), or (``merge="json"``) a JSON file
    containing ``keys``, other keys kept."""

    path: str
    content: str | bytes | None = None
    merge: Literal["json"] | None = None
    keys: dict[str, Any] = field(default_factory=dict)
    mode: str = "0644"
    owner: str = "root"
    group: str = "root"
    #: Keep a copy of the previous file (``PATH.gpu-provision.bak``) before replacing it.
    backup: bool = True

    def satisfied_by(self, current: FileState) -> bool:
        """Whether the file's content already is what this want asks for (mode and owner aside).

        JSON merges compare parsed content, not text: another tool (``nvidia-ctk runtime configure``) may lay out the
        same keys differently, and that is no drift.
        """
        if not current.exists or current.type != "file":
            return False
        if self.merge == "json":
            try:
                data = json.loads(current.content) if current.content is not None else None
            except ValueError:
                return False
            return isinstance(data, dict) and deep_merge(data, self.keys) == data
        return self.content is None or sha256(self.content) == current.sha256

    def desired_text(self, current: str | None) -> str | bytes:
        """The text the file should have, given its current text (merges keep foreign keys)."""
        if self.merge == "json":
            try:
                data = json.loads(current) if current and current.strip() else {}
            except ValueError:
                data = {}
            if not isinstance(data, dict):
                data = {}
            return json.dumps(deep_merge(data, self.keys), indent=2, sort_keys=True) + "\n"
        return self.content or ""


@dataclass(frozen=True)
class UnitWant:
    """A systemd unit enabled and/or running; restarted when any file in ``restart_on`` changes."""

    name: str
    enabled: bool | None = True
    running: bool | None = True
    restart_on: tuple[str, ...] = ()


@dataclass(frozen=True)
class GroupWant:
    """A group that exists and has at least ``members``."""

    name: str
    members: tuple[str, ...] = ()


Want = PackageWant | FileWant | UnitWant | GroupWant


@dataclass(frozen=True)
class Difference:
    """One way a node differs from the cluster file."""

    kind: str
    item: str
    expected: Any
    actual: Any
    stage: str = ""
    #: The file (or files) the finding was read from, where the item is not that file itself (``nvidia-runtime
    #: docker`` read from ``/etc/docker/daemon.json``), so a reader knows where to look.
    source: str = ""

    def __str__(self) -> str:
        read = f" (read {self.source})" if self.source else ""
        return f"{self.kind} {self.item}: expected {self.expected}, found {self.actual}{read}"


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``overlay``'s keys set recursively (mappings merge, other values replace)."""
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def request_for(wants: list[Want]) -> Request:
    """The probe request that reads everything ``wants`` compares."""
    req = Request()
    for want in wants:
        if isinstance(want, PackageWant):
            req.packages.add(want.name)
        elif isinstance(want, FileWant):
            req.files.add(want.path)
            if want.merge:
                req.contents.add(want.path)
        elif isinstance(want, UnitWant):
            req.units.add(want.name)
        elif isinstance(want, GroupWant):
            req.groups.add(want.name)
    return req


def version_matches(wanted: str | None, installed: str | None) -> bool:
    """Whether an installed version satisfies a wanted one (``580.159.04`` matches ``580.159.04-1``; ``580.*``
    matches any 580 version)."""
    if installed is None:
        return False
    if wanted is None:
        return True
    if wanted.endswith("*"):
        return installed.startswith(wanted[:-1])
    return installed == wanted or installed.startswith(wanted + "-") or installed.split(":", 1)[-1].startswith(wanted)


def sha256(text: str | bytes) -> str:
    """Hex SHA-256 of UTF-8 ``text`` (or of bytes as they are)."""
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def differences(wants: list[Want], state: NodeStateData, stage: str = "") -> list[Difference]:
    """Every want that ``state`` does not satisfy, as expected vs actual."""
    out: list[Difference] = []
    for want in wants:
        if isinstance(want, PackageWant):
            pkg = state.package(want.name)
            if not want.present:
                if pkg.version is not None:
                    out.append(Difference("package", want.name, "absent", pkg.version, stage))
                continue
            if not version_matches(want.version, pkg.version):
                out.append(Difference("package", want.name, want.version or "installed", pkg.version or "absent", stage))
            elif want.held and not pkg.held:
                out.append(Difference("package-hold", want.name, "held", "not held", stage))
        elif isinstance(want, FileWant):
            f = state.file(want.path)
            if not f.exists:
                out.append(Difference("file", want.path, "present", "absent", stage))
                continue
            if want.satisfied_by(f):
                pass
            elif want.merge:
                out.append(Difference("file", want.path, f"contains {json.dumps(want.keys, sort_keys=True)}",
                                      "other content", stage))
            else:
                out.append(Difference("file", want.path, f"sha256 {sha256(want.content or '')[:12]}",
                                      f"sha256 {(f.sha256 or '')[:12]}", stage))
            for attr in ("mode", "owner", "group"):
                if getattr(f, attr) != getattr(want, attr):
                    out.append(Difference(f"file-{attr}", want.path, getattr(want, attr), getattr(f, attr), stage))
        elif isinstance(want, UnitWant):
            unit = state.unit(want.name)
            if unit is None or not unit.loaded:
                out.append(Difference("service", want.name, "installed", "missing", stage))
                continue
            if want.enabled is not None and (unit.enabled == "enabled") != want.enabled:
                out.append(Difference("service-enabled", want.name, "enabled" if want.enabled else "disabled",
                                      unit.enabled, stage))
            if want.running is not None and (unit.active == "active") != want.running:
                out.append(Difference("service-active", want.name, "active" if want.running else "inactive",
                                      unit.active, stage))
        elif isinstance(want, GroupWant):
            group = state.group(want.name)
            if group is None:
                out.append(Difference("group", want.name, "present", "absent", stage))
            else:
                missing = sorted(set(want.members) - set(group["members"]))
                if missing:
                    out.append(Difference("group-members", want.name, sorted(want.members), group["members"], stage))
    return out
