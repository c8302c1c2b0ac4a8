"""Shared fixtures: paths to the real captured outputs and the example cluster files."""

from __future__ import annotations

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
