"""MIG layout planning: does a layout fit a GPU model, and at which placements.

A layout fits when every instance gets a start from its profile's placement table, no two instances share a memory
slice, no profile exceeds its instance limit, at most one ``+me`` profile is used, and the compute slices add up to
at most the model's total. Whether a mixed layout fits depends on placement, not only on the slice count, so the
planner searches placements (the tables are small: at most 8 slots and 7 instances).
"""

from __future__ import annotations

import itertools
import re

from gpu_provision.errors import MigLayoutError
from gpu_provision.spec.catalog import MigProfile, MigTable
from gpu_provision.spec.model import MigPlacement


def expand(table: MigTable, counts: dict[str, int]) -> list[MigProfile]:
    """The instances of a layout, most constrained first (largest size, then fewest starts)."""
    out: list[MigProfile] = []
    for name, count in counts.items():
        profile = table.profile(name)
        if profile is None:
            allowed = ", ".join(p.name for p in table.profiles)
            raise MigLayoutError(f"'{name}' is not a MIG profile of this GPU (allowed: {allowed})", profile=name)
        out.extend([profile] * count)
    out.sort(key=lambda p: (-p.memory_slices, len(p.starts), p.name))
    return out


def _search(instances: list[MigProfile], table: MigTable) -> tuple[list[MigPlacement] | None, list[MigPlacement], int]:
    """Depth-first placement search; returns (placements or None, deepest partial placement, index that failed)."""
    used = [False] * table.memory_slices
    chosen: list[MigPlacement] = []
    best: tuple[list[MigPlacement], int] = ([], 0)

    def place(i: int, compute_left: int) -> bool:
        nonlocal best
        if i == len(instances):
            return True
        profile = instances[i]
        if profile.compute_slices <= compute_left:
            for start in profile.starts:
                span = range(start, start + profile.memory_slices)
                if span.stop > table.memory_slices or any(used[s] for s in span):
                    continue
                for s in span:
                    used[s] = True
                chosen.append(MigPlacement(profile.name, start, profile.memory_slices))
                if place(i + 1, compute_left - profile.compute_slices):
                    return True
                chosen.pop()
                for s in span:
                    used[s] = False
        if i >= best[1]:
            best = (list(chosen), i)
        return False

    if place(0, table.compute_slices):
        return sorted(chosen, key=lambda p: p.start), chosen, -1
    return None, best[0], best[1]


def _limits_problem(table: MigTable, counts: dict[str, int]) -> str | None:
    for name, count in counts.items():
        profile = table.profile(name)
        if profile and count > profile.max_instances:
            return f"{count} x {profile.name} exceeds its limit of {profile.max_instances} per GPU"
    me = sum(c for n, c in counts.items() if n.endswith("+me"))
    if me > 1:
        return f"{me} '+me' instances requested; a GPU has one media-extension instance at most"
    return None


def fits(table: MigTable, counts: dict[str, int]) -> bool:
    """Whether ``counts`` can be placed on a GPU with this table."""
    try:
        plan(table, counts)
    except MigLayoutError:
        return False
    return True


def suggest(table: MigTable, counts: dict[str, int]) -> dict[str, int] | None:
    """The sub-layout of ``counts`` that fits and uses the most memory slices (then the most instances)."""
    names = [n for n, c in counts.items() if c > 0 and table.profile(n)]
    best: tuple[tuple[int, int], dict[str, int]] | None = None
    for combo in itertools.product(*(range(counts[n], -1, -1) for n in names)):
        candidate = {n: c for n, c in zip(names, combo) if c}
        if not candidate or candidate == {n: counts[n] for n in names}:
            continue
        if _limits_problem(table, candidate):
            continue
        instances = expand(table, candidate)
        if _search(instances, table)[0] is None:
            continue
        score = (sum(p.memory_slices for p in instances), len(instances))
        if best is None or score > best[0]:
            best = (score, candidate)
    return best[1] if best else None


def plan(table: MigTable, counts: dict[str, int]) -> tuple[MigPlacement, ...]:
    """Concrete placements for ``counts``, ordered by start slice.

    Raises :class:`MigLayoutError` naming the profile that could not be placed, the slots already taken at that
    point, and a layout that fits.
    """
    counts = {n: c for n, c in counts.items() if c}
    instances = expand(table, counts)
    problem = _limits_problem(table, counts)
    if problem is None:
        placements, partial, failed = _search(instances, table)
        if placements is not None:
            return tuple(placements)
        profile = instances[failed]
        taken = ", ".join(f"{p.profile}@{p.start}:{p.size}" for p in sorted(partial, key=lambda p: p.start))
        free = sorted(set(range(table.memory_slices)) - {s for p in partial for s in range(p.start, p.start + p.size)})
        problem = (f"{profile.name} does not fit: it needs {profile.memory_slices} memory slice(s) starting at one of "
                   f"{{{','.join(map(str, profile.starts))}}}, and with {taken or 'nothing'} placed the free slices "
                   f"are {{{','.join(map(str, free))}}}")
        failed_profile: str | None = profile.name
    else:
        failed_profile = problem.split(" x ")[-1].split(" ")[0] if " x " in problem else None
        partial = []
    suggestion = suggest(table, counts)
    hint = ""
    if suggestion:
        hint = "; a layout that fits: " + format_layout(suggestion)
    raise MigLayoutError(problem + hint, profile=failed_profile,
                         taken=[(p.profile, p.start, p.size) for p in partial], suggestion=suggestion)


def format_layout(counts: dict[str, int]) -> str:
    """``{"1g.18gb": 2, "3g.71gb": 1}`` -> ``1g.18gb x2 + 3g.71gb``."""
    return " + ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items() if c)


def parse_layout(text: str) -> dict[str, int]:
    """Parse ``"1g.18gb x2 + 2g.35gb + 3g.71gb"`` or ``"1g.18gb=2,3g.71gb=1"`` into profile counts."""
    counts: dict[str, int] = {}
    # "+" joins terms, except in a "+me" profile suffix.
    for part in re.split(r",|\+(?!me\b)", text):
        part = part.strip()
        if not part:
            continue
        name, _, count = part.replace("=", " x").replace("*", " x").partition(" x")
        name = name.strip()
        try:
            number = int(count) if count.strip() else 1
        except ValueError:
            raise MigLayoutError(f"cannot read '{part}' (expected PROFILE or PROFILE xN)", profile=name) from None
        counts[name] = counts.get(name, 0) + number
    return counts
