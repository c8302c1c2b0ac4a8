"""What the node probe is asked for (:class:`Request`) and typed access to its answer (:class:`NodeStateData`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gpu_provision.spec.vendordata import package_data


@dataclass
class Request:
    """The sections and items a probe run must read."""

    packages: set[str] = field(default_factory=set)
    #: Name prefixes whose installed packages the probe lists (``nvidia-driver-pinning-``): packages a stage must
    #: find without knowing their full names.
    package_prefixes: set[str] = field(default_factory=set)
    files: set[str] = field(default_factory=set)
    contents: set[str] = field(default_factory=set)
    units: set[str] = field(default_factory=set)
    groups: set[str] = field(default_factory=set)
    sysctls: set[str] = field(default_factory=set)
    sections: set[str] = field(default_factory=lambda: {"system"})
    #: The site's DKMS signing files the signing section checks, as ``key=PATH`` and ``certificate=PATH``
    #: (``driver.signing_key``, ``driver.signing_certificate``).
    signing: set[str] = field(default_factory=set)

    def merge(self, other: Request) -> Request:
        """The union of two requests."""
        return Request(*(getattr(self, f) | getattr(other, f) for f in self.__dataclass_fields__))

    def covers(self, other: Request) -> bool:
        """Whether this request reads everything ``other`` does."""
        return all(getattr(other, f) <= getattr(self, f) for f in self.__dataclass_fields__)

    def to_probe(self) -> dict[str, Any]:
        """The probe's request document."""
        out: dict[str, Any] = {"system": {"sysctls": sorted(self.sysctls)}}
        if self.packages or self.package_prefixes:
            out["packages"] = {"names": sorted(self.packages), "prefixes": sorted(self.package_prefixes)}
        if self.files or self.contents:
            out["files"] = {"paths": sorted(self.files), "content": sorted(self.contents)}
        if self.units:
            out["services"] = {"units": sorted(self.units)}
        if self.groups:
            out["accounts"] = {"groups": sorted(self.groups)}
        for section in self.sections - {"system"}:
            out.setdefault(section, {})
        if "gpu" in self.sections:
            out["gpu"] = {"nvlink5_bridge": _nvlink5_bridge()}
        if "runtime" in self.sections:
            out["runtime"] = {"apt_prefixes": pinning_prefixes()}
        if "kubernetes" in self.sections:
            out["kubernetes"] = {"kubelet_binary": package_data()["kubernetes"]["upgrade"]["kubelet_binary"]}
        if "signing" in self.sections:
            out["signing"] = _dkms_signing()
            site = dict(item.split("=", 1) for item in sorted(self.signing))
            if site:
                out["signing"]["site"] = site
        return out

    def to_json(self) -> str:
        """Canonical JSON form (the fact argument and cache key)."""
        return json.dumps({f: sorted(getattr(self, f)) for f in self.__dataclass_fields__}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Request:
        """Inverse of :meth:`to_json`."""
        return cls(**{k: set(v) for k, v in json.loads(text).items()})


def pinning_prefixes() -> list[str]:
    """The name prefix of NVIDIA's driver pinning packages (``packages.json``, ``driver.<family>.pinning``), whose
    names the package index knows the runtime section lists."""
    return sorted({e["pinning"]["prefix"] for e in package_data()["driver"].values() if e.get("pinning")})


def _nvlink5_bridge() -> dict[str, str]:
    """The vendor and VPD marker of an NVLink 5 board's management bridge (``packages.json``, with its source)."""
    fact = package_data()["nvlink5_bridge"]
    return {"vendor": fact["vendor"], "vpd_marker": fact["vpd_marker"]}


def _dkms_signing() -> dict[str, Any]:
    """Where DKMS keeps the certificate it signs modules with (``packages.json``, ``dkms_signing``, with its
    source): the framework files that may name it and each distribution's default."""
    fact = package_data()["dkms_signing"]
    return {"framework_conf": fact["framework_conf"], "certificate": fact["certificate"]}


@dataclass(frozen=True)
class PackageState:
    """An installed package (version None when absent)."""

    version: str | None
    held: bool


@dataclass(frozen=True)
class FileState:
    """A path on the node."""

    exists: bool
    type: str | None = None
    mode: str | None = None
    owner: str | None = None
    group: str | None = None
    sha256: str | None = None
    content: str | None = None
    target: str | None = None


@dataclass(frozen=True)
class UnitState:
    """A systemd unit."""

    loaded: bool
    enabled: str
    active: str


class NodeStateData:
    """Typed access to one probe answer."""

    def __init__(self, raw: dict[str, Any]):
        self.raw = raw

    @property
    def system(self) -> dict[str, Any]:
        """The system section (see ``probe/sections/system.py``)."""
        return self.raw.get("system", {})

    @property
    def package_manager(self) -> str | None:
        """``apt``, ``dnf`` or None."""
        return self.raw.get("packages", {}).get("manager")

    def package(self, name: str) -> PackageState:
        """Installed version and hold of ``name``."""
        entry = self.raw.get("packages", {}).get("packages", {}).get(name) or {}
        return PackageState(entry.get("version"), bool(entry.get("held")))

    def installed_with_prefix(self, prefix: str) -> list[str]:
        """The installed packages whose names start with ``prefix`` (asked for with ``Request.package_prefixes``)."""
        return list(self.raw.get("packages", {}).get("prefixed", {}).get(prefix, []))

    def file(self, path: str) -> FileState:
        """State of ``path``."""
        entry = self.raw.get("files", {}).get(path) or {"exists": False}
        return FileState(**entry)

    def unit(self, name: str) -> UnitState | None:
        """State of a systemd unit, None when systemd could not be asked."""
        entry = self.raw.get("services", {}).get(name)
        return UnitState(**entry) if entry else None

    def group(self, name: str) -> dict[str, Any] | None:
        """``{"gid": .., "members": [..]}`` or None when the group does not exist."""
        return self.raw.get("accounts", {}).get(name)

    def section(self, name: str) -> dict[str, Any]:
        """Any other section's raw answer (``gpu``, ``mig``, ``kubernetes``...)."""
        return self.raw.get(name, {})
