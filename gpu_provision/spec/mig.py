"""MIG layouts in the cluster file: does a layout fit a GPU model, at which placements, and what to say when not.

The search itself is :mod:`gpu_provision.node.mig.placement` (the one implementation, shared with the node applier);
this module words its outcome for the person who wrote the cluster file: which profile could not be placed, the
slots already taken at that point, and the largest sub-layout that would fit.
"""

from __future__ import annotations

import functools
import itertools
import re

from gpu_provision.errors import MigLayoutError
from gpu_provision.node.mig import placement
from gpu_provision.node.mig.model import Placement, ProfileTable


def _instances(table: ProfileTable, counts: dict[str, int]) -> list:
    try:
        return placement.instances(table, counts)
    except placement.UnknownProfile as exc:
        allowed = ", ".join(p.name for p in table.profiles)
        raise MigLayoutError(f"'{exc.name}' is not a MIG profile of this GPU (allowed: {allowed})",
                             profile=exc.name) from None


def _limits_problem(table: ProfileTable, counts: dict[str, int]) -> tuple[str, str | None] | None:
    """What breaks an instance limit, and the profile to blame (None for the one-``+me`` rule), else None."""
    over = placement.over_limit(table, counts)
    if over:
        profile, count = over
        return f"{count} x {profile.name} exceeds its limit of {profile.max_instances} per GPU", profile.name
    me = placement.media_extensions(table, counts)
    if me > 1:
        return f"{me} '+me' instances requested; a GPU has one media-extension instance at most", None
    beside = placement.beside_all_media(table, counts)
    if beside:
        greedy, other = beside
        return (f"{other.name} cannot sit beside {greedy.name}: a '+me.all' instance takes every media engine, so only "
                f"'-me' instances may share its GPU"), other.name
    return None


def fits(table: ProfileTable, counts: dict[str, int]) -> bool:
    """Whether ``counts`` can be placed on a GPU with this table."""
    try:
        plan(table, counts)
    except MigLayoutError:
        return False
    return True


def suggest(table: ProfileTable, counts: dict[str, int]) -> dict[str, int] | None:
    """The sub-layout of ``counts`` that fits and uses the most memory slices (then the most instances).

    Bounded: each count is clamped to its profile's instance limit and sub-layouts needing more memory slices than
    the GPU has are skipped before any placement search, so seven profiles asked for seven times each try a few
    hundred sub-layouts, not millions. Identical GPUs (a 16-GPU node with one layout) share one answer.
    """
    found = _suggest(table, tuple((n, c) for n, c in counts.items() if c > 0 and table.profile(n)))
    return dict(found) if found else None


@functools.lru_cache(maxsize=256)
def _suggest(table: ProfileTable, asked: tuple[tuple[str, int], ...]) -> tuple[tuple[str, int], ...] | None:
    names = [n for n, _ in asked]
    profiles = [table.profile(n) for n in names]
    ranges = [range(min(c, p.max_instances if p else c), -1, -1) for (_, c), p in zip(asked, profiles)]
    best: tuple[tuple[int, int], tuple[tuple[str, int], ...]] | None = None
    for combo in itertools.product(*ranges):
        if sum(c * p.memory_slices for c, p in zip(combo, profiles) if p) > table.memory_slices:
            continue
        candidate = tuple((n, c) for n, c in zip(names, combo) if c)
        if not candidate or candidate == asked or _limits_problem(table, dict(candidate)):
            continue
        wanted = placement.instances(table, dict(candidate))
        score = (sum(p.memory_slices for p in wanted), len(wanted))
        if (best is None or score > best[0]) and placement.search(table, wanted).placements is not None:
            best = (score, candidate)
    return best[1] if best else None


def plan(table: ProfileTable, counts: dict[str, int]) -> tuple[Placement, ...]:
    """Concrete placements for ``counts``, ordered by start slice.

    Raises :class:`MigLayoutError` naming the profile that could not be placed, the slots already taken at that
    point, and a layout that fits. A layout that fits is planned once per table and layout, however many GPUs and
    nodes ask for it: a fleet's file repeats the same few layouts thousands of times (a refusal is not cached, so
    each one raises its own error).
    """
    return _plan(table, tuple((n, c) for n, c in counts.items() if c))


@functools.lru_cache(maxsize=1024)
def _plan(table: ProfileTable, asked: tuple[tuple[str, int], ...]) -> tuple[Placement, ...]:
    counts = dict(asked)
    wanted = _instances(table, counts)
    limits = _limits_problem(table, counts)
    partial: tuple[Placement, ...] = ()
    if limits is None:
        found = placement.search(table, wanted)
        if found.placements is not None:
            return found.placements
        assert found.failed is not None
        profile, partial = found.failed, found.partial
        taken = ", ".join(str(p) for p in sorted(partial, key=lambda p: p.start))
        free = sorted(set(range(table.memory_slices)) - {s for p in partial for s in p.slices})
        problem = (f"{profile.name} does not fit: it needs {profile.memory_slices} memory slice(s) starting at one of "
                   f"{{{','.join(map(str, profile.starts))}}}, and with {taken or 'nothing'} placed the free slices "
                   f"are {{{','.join(map(str, free))}}}")
        failed_profile: str | None = profile.name
    else:
        problem, failed_profile = limits
    suggestion = suggest(table, counts)
    hint = ""
    if suggestion:
        hint = "; a layout that fits: " + format_layout(suggestion)
    raise MigLayoutError(problem + hint, profile=failed_profile,
                         taken=[(p.profile, p.start, p.size) for p in partial], suggestion=suggestion)


def format_layout(counts: dict[str, int]) -> str:
    """``{"1g.18gb": 2, "3g.71gb": 1}`` -> ``1g.18gb x2 + 3g.71gb``."""
    return " + ".join(f"{n} x{c}" if c > 1 else n for n, c in counts.items() if c)


#: The most instances of one profile a written layout may ask for: far above any GPU's limit (seven), so a count
#: over the limit is still a layout that does not fit, said as such, and small enough to plan without harm.
MAX_COUNT = 999


def parse_layout(text: str) -> dict[str, int]:
    """Parse ``"1g.18gb x2 + 2g.35gb + 3g.71gb"`` or ``"1g.18gb=2,3g.71gb=1"`` into profile counts."""
    counts: dict[str, int] = {}
    # "+" joins terms, except in a profile suffix: "+me", "+me.all", "+gfx".
    for part in re.split(r",|\+(?!me\b|gfx\b)", text):
        part = part.strip()
        if not part:
            continue
        name, _, count = part.replace("=", " x").replace("*", " x").partition(" x")
        name, count = name.strip(), count.strip()
        # A count is decimal, from 1 to MAX_COUNT, and so is a profile's total over its terms: 'x0', 'x-1' or
        # 'x99999999999999' is a mistyped argument ('x-1' placed nothing and reported a fit; a huge count exhausted
        # memory).
        total = counts.get(name, 0) + (int(count) if re.fullmatch(r"[1-9][0-9]{0,5}", count) else 0 if count else 1)
        if total == counts.get(name, 0) or total > MAX_COUNT:
            raise MigLayoutError(f"cannot read '{part}' (expected PROFILE or PROFILE xN, N from 1 to {MAX_COUNT} "
                                 "in all)", profile=name)
        counts[name] = total
    return counts
