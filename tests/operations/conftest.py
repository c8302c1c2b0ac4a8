"""Per-test reset of the per-host registries operations keep."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpu_provision.facts import state as state_fact
from gpu_provision.operations import commands, files


@pytest.fixture(autouse=True)
def _fresh_registries() -> Iterator[None]:
    # Fake hosts are short-lived: a new one may reuse an old one's id, so per-host caches start empty per test.
    for registry in (state_fact._CACHE, state_fact._GENERATION, files._CHANGED, commands._BASE_REQUEST):
        registry.clear()
    yield
