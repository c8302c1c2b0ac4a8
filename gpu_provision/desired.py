"""Desired state as data, and how it differs from a node's probed state.

A stage describes what a node should have as a list of wants (packages, files, units, groups). The same list
serves two readers: the generic operations in :mod:`gpu_provision.operations` converge it, and
:func:`differences` reports it for drift checks. Whether a want is met is decided once, by its own ``unmet(state)``:
drift lists those differences and each operation's planner turns the same differences into commands, so
``pyinfra ... --dry`` and ``gpu-provision drift`` agree by construction. Stages with state that is not one of these kinds (MIG layouts, kubeadm) return their own
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

    def unmet(self, state: NodeStateData, stage: str = "") -> list[Difference]:
        """How the node's package differs from this want: ``package`` (wrong version, missing, or present when it
        should be absent) or ``package-hold`` (right version, not held); empty when met."""
        pkg = state.package(self.name)
        if not self.present:
            return [] if pkg.version is None else [Difference("package", self.name, "absent", pkg.version, stage)]
        if not version_matches(self.version, pkg.version):
            return [Difference("package", self.name, self.version or "installed", pkg.version or "absent", stage)]
        if self.held and not pkg.held:
            return [Difference("package-hold", self.name, "held", "not held", stage)]
        return []


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

    def unmet(self, state: NodeStateData, stage: str = "") -> list[Difference]:
        """How the node's file differs from this want; see :meth:`unmet_at`."""
        return self.unmet_at(state.file(self.path), stage)

    def unmet_at(self, current: FileState, stage: str = "") -> list[Difference]:
        """How ``current`` differs from this want: ``file`` (absent, or other content) and ``file-mode``,
        ``file-owner``, ``file-group`` for an existing file; empty when met.

        JSON merges compare parsed content, not text: another tool (``nvidia-ctk runtime configure``) may lay out the
        same keys differently, and that is no drift, and rewriting it would restart its service on every run.
        """
        if not current.exists:
            return [Difference("file", self.path, "present", "absent", stage)]
        out: list[Difference] = []
        if self._content_met(current):
            pass
        elif self.merge:
            out.append(Difference("file", self.path, f"contains {json.dumps(self.keys, sort_keys=True)}",
                                  "other content", stage))
        else:
            out.append(Difference("file", self.path, f"sha256 {sha256(self.content or '')[:12]}",
                                  f"sha256 {(current.sha256 or '')[:12]}", stage))
        for attr in ("mode", "owner", "group"):
            if getattr(current, attr) != getattr(self, attr):
                out.append(Difference(f"file-{attr}", self.path, getattr(self, attr), getattr(current, attr), stage))
        return out

    def _content_met(self, current: FileState) -> bool:
        if current.type != "file":
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

    def unmet(self, state: NodeStateData, stage: str = "") -> list[Difference]:
        """How the node's unit differs from this want: ``service`` (not installed, when the want asks it enabled
        or running; a unit wanted neither is met by its absence), else ``service-enabled`` and
        ``service-active``; empty when met."""
        unit = state.unit(self.name)
        if unit is None or not unit.loaded:
            wanted = self.enabled is True or self.running is True
            return [Difference("service", self.name, "installed", "missing", stage)] if wanted else []
        out: list[Difference] = []
        if self.enabled is not None and (unit.enabled == "enabled") != self.enabled:
            out.append(Difference("service-enabled", self.name, "enabled" if self.enabled else "disabled",
                                  unit.enabled, stage))
        if self.running is not None and (unit.active == "active") != self.running:
            out.append(Difference("service-active", self.name, "active" if self.running else "inactive",
                                  unit.active, stage))
        return out


@dataclass(frozen=True)
class GroupWant:
    """A group that exists and has at least ``members``."""

    name: str
    members: tuple[str, ...] = ()

    def unmet(self, state: NodeStateData, stage: str = "") -> list[Difference]:
        """How the node's group differs from this want: ``group`` (absent) or ``group-members`` (some wanted
        member missing; other members are the site's and never count); empty when met."""
        group = state.group(self.name)
        if group is None:
            return [Difference("group", self.name, "present", "absent", stage)]
        if set(self.members) - set(group["members"]):
            return [Difference("group-members", self.name, sorted(self.members), group["members"], stage)]
        return []


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
    """Every want that ``state`` does not satisfy, as expected vs actual: each want's own :meth:`unmet`, the same
    answer the operations act on."""
    return [difference for want in wants for difference in want.unmet(state, stage)]
