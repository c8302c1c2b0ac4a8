"""The one order of version strings: package versions, kernel releases, driver and CUDA versions.

One home for every comparison, on the node (the probe's newest installed kernel, the verifier's CUDA minimum) and on
the controller (rollbacks in the package operation, the cluster file's version checks, the doctor's CUDA rule, the
toolkit release's configuration files, kubeadm's configuration API, Kubernetes' version skew), so the two sides never
order one pair of versions differently. Node-side code: Python 3.9+, standard library; the controller imports it
like the rest of :mod:`gpu_provision.node`.

The order is dpkg's (``[epoch:]upstream[-revision]``; digits compare as numbers, letters below other characters, and
``~`` below everything, even the end of the string, so ``1.0~rc1`` comes before ``1.0``). rpm orders the versions
that NVIDIA, Docker, Kubernetes and the kernels publish the same way (``3:580.95.05-1.el9``, ``1.36.4-1.1``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:  # the verification agent imports this module on every run: no typing at run time there
    from typing import List, Optional, Tuple

    _Part = Tuple[Tuple[int, ...], int]
#: What a missing part compares as: no letters, number 0 (so ``1.0`` is below ``1.0.1`` and above ``1.0~rc1``).
_END: _Part = ((0,), 0)


def _char(c: str) -> int:
    if c == "~":
        return -1
    return ord(c) if c.isalpha() else ord(c) + 256


def _parts(text: str) -> Tuple[_Part, ...]:
    """``text`` as dpkg compares it: alternating runs of non-digits (by character) and digits (as a number)."""
    out: List[_Part] = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and not text[j].isdigit():
            j += 1
        k = j
        while k < len(text) and text[k].isdigit():
            k += 1
        out.append((tuple(_char(c) for c in text[i:j]) + (0,), int(text[j:k] or 0)))
        i = k
    out.append(_END)
    return tuple(out)


#: Keys already made (immutable, so shared): a cluster file compares the same few versions on every node. A dict
#: rather than functools.lru_cache, whose import (functools, collections) the node's probe would pay on every run.
_KEYS: dict = {}
_KEYS_MAX = 4096


def version_key(version: str, parts: Optional[int] = None) -> Tuple[int, Tuple[_Part, ...], Tuple[_Part, ...]]:
    """A sort key for ``version``: ``sorted(versions, key=version_key)`` puts the newest last. Kept for the
    strings last asked about (at most 4,096, then the keys are made afresh).

    ``parts`` keeps only that many dot-separated parts of the upstream version and drops the revision, to compare
    a branch (``580`` of a ``580.*`` glob) with a full version (``590.44.01-1`` as ``590``).
    """
    key = _KEYS.get((version, parts))
    if key is None:
        if len(_KEYS) >= _KEYS_MAX:
            _KEYS.clear()
        key = _KEYS[(version, parts)] = _key(version, parts)
    return key


def _key(version: str, parts: Optional[int]) -> Tuple[int, Tuple[_Part, ...], Tuple[_Part, ...]]:
    epoch, colon, rest = version.partition(":")
    if not colon or not epoch.isdigit():
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    if parts is not None:
        upstream, revision = ".".join(upstream.split(".")[:parts]), ""
    return int(epoch), _parts(upstream), _parts(revision)


def at_least(version: str, minimum: str, parts: Optional[int] = None) -> bool:
    """Whether ``version`` is ``minimum`` or newer in :func:`version_key`'s order; ``parts`` as there (``3``:
    ``1.18.0-1`` is 1.18.0 whatever its packaging revision; ``2``: ``1.31.4`` is the 1.31 release)."""
    return version_key(version, parts) >= version_key(minimum, parts)


def minor(version: Optional[str]) -> Optional[int]:
    """The minor number of a version however it is written (``36`` for ``v1.36.4``, ``1.36.4-1.1`` or
    ``0:1.36.4``), for policies counted in minors (Kubernetes' version skew); None when it has none."""
    epoch, colon, rest = (version or "").partition(":")
    parts = (rest if colon and epoch.isdigit() else version or "").lstrip("v").split(".")
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
