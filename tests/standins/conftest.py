"""Fixtures for the stand-in and simulator tests; the helpers they share live in simnode.py."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import simtree
from simnode import OPEN_VERSION_LINE, SimNode


@pytest.fixture
def sim_node(tmp_path: Path) -> Iterator[SimNode]:
    """A simulated node with driver 580.159.04 (open module) 'loaded' and no GPUs configured yet."""
    env = dict(os.environ)
    env.update(simtree.lay_out(tmp_path, OPEN_VERSION_LINE))
    yield SimNode(tmp_path, env)
