"""Where the simulated driver places GPU instances and what each may sit beside (stand-in, not NVIDIA software).

A GPU instance takes memory slices ``start .. start+size-1`` from its profile's placement table and compute slices
from the GPU's total; no two instances share a memory slice, no profile exceeds its instance limit, one
media-extension (``+me`` or ``+me.all``) instance at most exists, and only ``-me`` instances sit beside a ``+me.all``
one (the rule of the GPU model files' RTX PRO 6000 sources, which NVIDIA's table implies without stating it).
"""

from __future__ import annotations

import uuid as uuidlib

from gpusim_hardware import Gpu

_MEDIA_EXTENSIONS = ("+me", "+me.all")
_ALL_MEDIA = "+me.all"
_NO_MEDIA = "-me"


def gi_id_for(start: int, size: int, slices: int) -> int:
    """GPU-instance id from its placement: slots numbered like a binary heap over the memory slices
    (whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14). Real drivers number instances in their
    own way; consumers must read ids from ``mig -lgi``."""
    level_size = slices
    base = 0
    while level_size > size and level_size > 1:
        base = base * 2 + 1
        level_size //= 2
    return base + start // max(size, 1)


def occupied(gs: dict) -> tuple[set[int], int]:
    """Memory slices in use and compute slices in use on one GPU."""
    slots: set[int] = set()
    compute = 0
    for gi in gs["gis"]:
        slots.update(range(gi["start"], gi["start"] + gi["size"]))
        compute += gi["compute_slices"]
    return slots, compute


def media_conflict(name: str, existing: list[str]) -> bool:
    """Whether an instance of profile ``name`` clashes with the instances ``existing`` over media engines.

    A ``+me`` or ``+me.all`` instance holds the GPU's one OFA, so only one of them exists; a ``+me.all`` instance
    takes every media engine besides, so only ``-me`` instances (which have none) sit beside it.
    """
    if name.endswith(_MEDIA_EXTENSIONS) and any(other.endswith(_MEDIA_EXTENSIONS) for other in existing):
        return True
    if name.endswith(_ALL_MEDIA) and any(not other.endswith(_NO_MEDIA) for other in existing):
        return True
    return not name.endswith(_NO_MEDIA) and any(other.endswith(_ALL_MEDIA) for other in existing)


def fits(gpu: Gpu, gs: dict, profile: dict, start: int) -> bool:
    """Whether ``profile`` can be placed at ``start`` given what already exists."""
    if start not in profile["starts"]:
        return False
    count = sum(1 for gi in gs["gis"] if gi["profile_id"] == profile["id"])
    if count >= int(profile["max_instances"]):
        return False
    if media_conflict(profile["name"], [gi["name"] for gi in gs["gis"]]):
        return False
    slots, compute = occupied(gs)
    wanted = set(range(start, start + int(profile["memory_slices"])))
    if wanted & slots:
        return False
    return compute + int(profile["compute_slices"]) <= gpu.compute_slices


def free_count(gpu: Gpu, gs: dict, profile: dict) -> int:
    """How many more instances of ``profile`` could be created now (the -lgip Free column)."""
    trial = {"gis": list(gs["gis"])}
    count = 0
    while True:
        start = next((s for s in sorted(profile["starts"], reverse=True) if fits(gpu, trial, profile, s)), None)
        if start is None:
            return count
        trial["gis"].append(make_gi(gpu, profile, start))
        count += 1


def make_gi(gpu: Gpu, profile: dict, start: int) -> dict:
    size = int(profile["memory_slices"])
    return {
        "id": gi_id_for(start, size, gpu.memory_slices),
        "profile_id": int(profile["id"]),
        "name": profile["name"],
        "start": start,
        "size": size,
        "compute_slices": int(profile["compute_slices"]),
        "cis": [],
    }


def mig_uuid(gpu: Gpu, gi: dict, ci: dict) -> str:
    """Stable MIG device UUID derived from the parent GPU and the instance ids."""
    return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{gpu.uuid}/{gi['id']}/{ci['id']}"))


def gi_memory_mib(gpu: Gpu, gi: dict) -> int:
    profile = next(p for p in gpu.profiles if int(p["id"]) == gi["profile_id"])
    return int(round(float(gpu.resources(profile)["memory_gib"]) * 1024))
