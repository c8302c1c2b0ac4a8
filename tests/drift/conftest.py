"""Fixtures for drift tests: a small stage set, a canned probe answer that matches it, loopback ports."""

from __future__ import annotations

import copy
import socket
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
from drift_samples import IN_SYNC, make_stage, mig_extra, permission_wants, runtime_wants


@pytest.fixture(autouse=True)
def probe_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's notes of which nodes hold the probe's modules go to a temporary cache, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture
def stages() -> list[SimpleNamespace]:
    """Three stages: runtime (package, file, unit), permissions (group, file), mig (extra differences only)."""
    return [
        make_stage("runtime", runtime_wants),
        make_stage("permissions", permission_wants),
        make_stage("mig", lambda n, c, s: [], mig_extra, frozenset({"mig"})),
    ]


@pytest.fixture
def in_sync() -> dict[str, Any]:
    """A probe answer in which every stage of :func:`stages` is satisfied."""
    return copy.deepcopy(IN_SYNC)


@pytest.fixture
def silent_listener() -> Iterator[tuple[str, int]]:
    """(address, port) on loopback that accepts connections and never says anything (a stalled sshd)."""
    sock = socket.socket()
    sock.bind(("127.0.0.3", 0))
    sock.listen(16)
    try:
        yield "127.0.0.3", int(sock.getsockname()[1])
    finally:
        sock.close()
