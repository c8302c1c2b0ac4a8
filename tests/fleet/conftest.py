"""Fixtures for the fleet runner tests: a loopback port nothing listens on, a private cache directory."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture(autouse=True)
def probe_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's notes of which nodes hold the probe's modules go to a temporary cache, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


@pytest.fixture
def closed_port() -> int:
    """A TCP port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
