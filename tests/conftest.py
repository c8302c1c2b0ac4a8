"""Shared fixtures: paths to the real captured outputs and the example cluster files, a closed loopback port."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def fixtures() -> Path:
    """tests/fixtures: real outputs captured on H200 hosts (never edited)."""
    return ROOT / "tests" / "fixtures"


@pytest.fixture
def repo_root() -> Path:
    """The repository root."""
    return ROOT


@pytest.fixture
def closed_port() -> int:
    """A TCP port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
