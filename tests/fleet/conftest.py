"""Fixtures for the fleet runner tests: a loopback port nothing listens on."""

from __future__ import annotations

import socket

import pytest


@pytest.fixture
def closed_port() -> int:
    """A TCP port on 127.0.0.1 with nothing listening (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
