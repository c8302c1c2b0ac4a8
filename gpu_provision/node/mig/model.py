"""The MIG model: what a GPU is asked for, the layout planned from it with its placements, and the profile table
it is planned on.

With :class:`gpu_provision.node.mig.layout.Action` these are the only types a MIG layout takes in gpu-provision:
a :class:`MigLayout` is what the cluster file (or a mig-parted layout file) asks of one GPU, profile counts; a
:class:`GpuLayout` of :class:`Placement` values is what is planned from it on a :class:`ProfileTable`, by the
controller on the catalog's table and by the node applier on the table the driver prints; the plan, drift,
``mig-assert`` and the verification expectations read :class:`GpuLayout` values. Node-side code: Python 3.9+,
standard library only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Mapping, Optional, Tuple


@dataclass(frozen=True)
class Placement:
    """One GPU instance at a concrete placement: memory slices ``start .. start+size-1``."""

    profile: str
    start: int
    size: int

    def __str__(self) -> str:
        return f"{self.profile}@{self.start}:{self.size}"

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Placement:
        """A placement from any mapping with ``profile``, ``start`` and ``size``: the expectations file's entries,
        the probe's GPU instances and the rows of ``nvidia-smi mig -lgi`` (:mod:`.nvsmi`) alike."""
        return cls(str(data["profile"]), int(data["start"]), int(data["size"]))

    @property
    def slices(self) -> range:
        """The memory slices the instance occupies."""
        return range(self.start, self.start + self.size)


def fmt_placements(placements: Iterable[Placement]) -> str:
    """``2g.35gb@0:2, 1g.18gb@2:1, ...`` ordered by start (``none`` when empty): how every message writes them."""
    return ", ".join(str(p) for p in sorted(placements, key=lambda p: (p.start, p.profile))) or "none"


@dataclass(frozen=True)
class GpuLayout:
    """The MIG layout one GPU should have (or has): MIG mode, and its GPU instances at their placements.

    Each instance carries one compute instance spanning it (what the device plugin hands out), so a layout needs no
    compute-instance list.
    """

    enabled: bool
    placements: Tuple[Placement, ...] = ()

    @classmethod
    def placed(cls, placements: Iterable[Placement]) -> GpuLayout:
        """An enabled layout with ``placements`` in start order, so two layouts holding the same instances are equal
        whatever order they were listed or read in."""
        return cls(True, tuple(sorted(placements, key=lambda p: (p.start, p.size, p.profile))))

    def __str__(self) -> str:
        if not self.enabled:
            return "MIG disabled"
        return fmt_placements(self.placements) if self.placements else "MIG enabled, no instances"


@dataclass(frozen=True)
class MigLayout:
    """The MIG layout asked of one GPU: MIG mode and instance counts as written, and the layout planned from them.

    The cluster file's loader and the mig-parted reader (:func:`gpu_provision.node.mig.migparted.requested`, on
    the controller and on the node) create it from the counts; on the controller ``planned`` is what every other
    reader (the deploy's plan, drift, ``mig-assert``, verification) compares a GPU with, planned once by
    :func:`gpu_provision.spec.resolve.derive`.
    """

    #: Profile name -> instance count, e.g. ``{"1g.18gb": 2, "3g.71gb": 1}``; empty with MIG enabled and no instances.
    profiles: Dict[str, int]
    enabled: bool = True
    #: MIG mode and placements planned on the model's placement table; None until the cluster file is resolved.
    planned: Optional[GpuLayout] = None
    #: Name of the mig-parted config this layout came from, if any.
    config_name: Optional[str] = None


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile of a GPU (a row of ``nvidia-smi mig -lgip`` with its ``-lgipp`` placements)."""

    name: str
    id: int
    memory_slices: int
    compute_slices: int
    max_instances: int
    starts: Tuple[int, ...]

    @property
    def media_extensions(self) -> bool:
        """Whether this is a ``+me`` or ``+me.all`` profile: both hold the GPU's one OFA, so at most one per GPU."""
        return self.name.endswith(("+me", "+me.all"))

    @property
    def all_media_engines(self) -> bool:
        """Whether this is a ``+me.all`` profile, which takes every media engine of the GPU: NVIDIA's tables give it
        all of them, so only ``-me`` instances (which have none) can sit beside it."""
        return self.name.endswith("+me.all")

    @property
    def no_media_engines(self) -> bool:
        """Whether this is a ``-me`` profile: pure compute, without any media engine."""
        return self.name.endswith("-me")


@dataclass(frozen=True)
class ProfileTable:
    """A GPU's MIG geometry and profiles, as the catalog records it for a model or the driver prints it for a GPU.

    The catalog's facts about the table (``min_driver``, ``placements_source``) do not take part in comparisons, so
    a model's table equals the one the driver reports for a GPU of that model.
    """

    memory_slices: int
    compute_slices: int
    profiles: Tuple[Profile, ...]
    min_driver: str = field(default="", compare=False)
    placements_source: str = field(default="", compare=False)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ProfileTable:
        """A table from a GPU model file's ``mig`` object or the probe's ``tables`` entry (same keys)."""
        return cls(
            memory_slices=int(data["memory_slices"]),
            compute_slices=int(data["compute_slices"]),
            profiles=tuple(Profile(p["name"], int(p["id"]), int(p["memory_slices"]), int(p["compute_slices"]),
                                   int(p["max_instances"]), tuple(int(s) for s in p["starts"]))
                           for p in data["profiles"]),
            min_driver=str(data.get("min_driver", "")),
            placements_source=str(data.get("placements_source", "")),
        )

    def profile(self, name: str) -> Optional[Profile]:
        """The profile called ``name`` (``"3g.71gb"``, ``"MIG 3g.71gb"`` or its numeric id), or None."""
        name = name[4:].strip() if name.startswith("MIG ") else name.strip()
        for p in self.profiles:
            if p.name == name or str(p.id) == name:
                return p
        return None
