"""The placement search: which memory slices each GPU instance of a layout occupies (the only implementation).

A layout fits when every instance gets a start from its profile's placement table, no two instances share a memory
slice, no profile exceeds its instance limit, at most one ``+me`` or ``+me.all`` profile is used, only ``-me``
instances sit beside a ``+me.all`` one (it takes every media engine), and the compute slices add up to at most the
GPU's total. Whether a mixed layout fits depends on placement, not only on the slice count, so this
searches placements depth-first (the tables are small: at most 8 slots and 7 instances), most constrained instance
first (largest, then fewest starts), taking each profile's starts in the driver's order.

The controller plans with it on the catalog's table (the cluster file's checks, the plan, drift) and the node
applier on the table the driver prints; the two tables are equal (tested), so both sides get the same placements.
The controller words its errors from :class:`Search` and :func:`over_limit`. Node-side code: Python 3.9+,
standard library only.
"""

from __future__ import annotations

from typing import List, Mapping, NamedTuple, Optional, Tuple

from .model import Placement, Profile, ProfileTable


class UnknownProfile(ValueError):
    """A layout names a profile the GPU does not have."""

    def __init__(self, name: str):
        super().__init__(name)
        self.name = name


class Search(NamedTuple):
    """The outcome of a placement search.

    ``placements`` ordered by start, or None when the layout does not fit; then ``partial`` is the deepest partial
    placement the search reached and ``failed`` the instance it could not place after it.
    """

    placements: Optional[Tuple[Placement, ...]]
    partial: Tuple[Placement, ...]
    failed: Optional[Profile]


def instances(table: ProfileTable, counts: Mapping[str, int]) -> List[Profile]:
    """The instances of a layout (profile name or id -> count), most constrained first.

    Raises :class:`UnknownProfile` for a name the table lacks.
    """
    out: List[Profile] = []
    for name, count in counts.items():
        if not count:
            continue
        profile = table.profile(name)
        if profile is None:
            raise UnknownProfile(name)
        out.extend([profile] * count)
    out.sort(key=lambda p: (-p.memory_slices, len(p.starts), p.name))
    return out


def over_limit(table: ProfileTable, counts: Mapping[str, int]) -> Optional[Tuple[Profile, int]]:
    """The first profile of ``counts`` asked for more often than the GPU allows, with that count, else None."""
    for name, count in counts.items():
        profile = table.profile(name)
        if profile is not None and count > profile.max_instances:
            return profile, count
    return None


def media_extensions(table: ProfileTable, counts: Mapping[str, int]) -> int:
    """How many ``+me`` and ``+me.all`` instances ``counts`` asks for (a GPU has one media-extension instance at
    most: both hold its one OFA)."""
    total = 0
    for name, count in counts.items():
        profile = table.profile(name)
        if profile is not None and profile.media_extensions:
            total += count
    return total


def beside_all_media(table: ProfileTable, counts: Mapping[str, int]) -> Optional[Tuple[Profile, Profile]]:
    """A ``+me.all`` profile of ``counts`` and an instance beside it that needs media engines, else None.

    NVIDIA's tables give a ``+me.all`` instance every media engine of the GPU and do not say what the driver does with
    another instance that expects some, so only ``-me`` instances (which have none) are placed beside it.
    """
    profiles = [(table.profile(name), count) for name, count in counts.items() if count]
    greedy = next((p for p, _ in profiles if p is not None and p.all_media_engines), None)
    if greedy is None:
        return None
    for profile, count in profiles:
        if profile is None or profile.no_media_engines:
            continue
        if profile is not greedy or count > 1:
            return greedy, profile
    return None


def search(table: ProfileTable, wanted: List[Profile]) -> Search:
    """Place ``wanted`` (as :func:`instances` orders them) on the table's memory and compute slices."""
    used = [False] * table.memory_slices
    chosen: List[Placement] = []
    best: Tuple[Tuple[Placement, ...], int] = ((), 0)

    def place(i: int, compute_left: int) -> bool:
        nonlocal best
        if i == len(wanted):
            return True
        profile = wanted[i]
        if profile.compute_slices <= compute_left:
            for start in profile.starts:
                span = range(start, start + profile.memory_slices)
                if span.stop > table.memory_slices or any(used[s] for s in span):
                    continue
                for s in span:
                    used[s] = True
                chosen.append(Placement(profile.name, start, profile.memory_slices))
                if place(i + 1, compute_left - profile.compute_slices):
                    return True
                chosen.pop()
                for s in span:
                    used[s] = False
        if i >= best[1]:
            best = (tuple(chosen), i)
        return False

    if place(0, table.compute_slices):
        return Search(tuple(sorted(chosen, key=lambda p: p.start)), tuple(chosen), None)
    return Search(None, best[0], wanted[best[1]])


def plan(table: ProfileTable, counts: Mapping[str, int]) -> Optional[Tuple[Placement, ...]]:
    """Placements for ``counts`` ordered by start, or None when the layout does not fit the table at all."""
    try:
        wanted = instances(table, counts)
    except UnknownProfile:
        return None
    if over_limit(table, counts) or media_extensions(table, counts) > 1 or beside_all_media(table, counts):
        return None
    return search(table, wanted).placements

