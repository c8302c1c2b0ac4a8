"""Fixtures for the MIG tests: the real H200 tables, and a simulated H200 node in a temp directory on which the
installed applier runs (see migsim.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from migsim import H200_FIXTURES, MigNode, make_node


@pytest.fixture
def mig_node(tmp_path: Path) -> Iterator[MigNode]:
    """A node with two simulated H200s, driver 580.159.04 loaded, the applier installed, no services running."""
    node = make_node(tmp_path)
    yield node
    state = tmp_path / "systemctl.json"
    if state.exists():
        node.sh("systemctl", "stop", *json.loads(state.read_text()))


@pytest.fixture
def h200_table() -> dict:
    """The H200 profile table as the driver printed it (tests/fixtures/h200 -lgip and -lgipp)."""
    from gpu_provision.node.mig import nvsmi
    from gpu_provision.node.probe import mig as probe

    rows = nvsmi.parse_lgip((H200_FIXTURES / "nvidia-smi_mig_-lgip.txt").read_text())
    placements = nvsmi.parse_lgipp((H200_FIXTURES / "nvidia-smi_mig_-lgipp.txt").read_text())
    return probe.profile_table(rows[0], placements[0])
