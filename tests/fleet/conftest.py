"""Fixtures for the fleet runner tests: a loopback port nothing listens on, a private cache directory."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def probe_records(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """The controller's notes of which nodes hold the probe's modules go to a temporary cache, not the user's."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))
