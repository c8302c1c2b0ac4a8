"""Which way a wanted package version goes from the installed one: a rollback takes dnf's downgrade."""

from __future__ import annotations

import pytest

from gpu_provision.operations.packages import is_downgrade


@pytest.mark.parametrize(("wanted", "installed", "down"), [
    ("580.126.09-1", "580.159.04-1", True),
    ("580.159.04-1", "580.126.09-1", False),
    ("580.126.09", "580.159.04-1.el9", True),
    ("580.*", "590.44.01-1", True),
    ("590.*", "580.126.09-1", False),
    ("580.*", "580.159.04-1", False),  # already on the branch: nothing to change
    ("1.32.6", "1.33.2-150500.1.1", True),
    ("1.33.10", "1.33.9-150500.1.1", False),  # numbers compare as numbers, not text
    ("1.17.7-1", "1.17.8-1", True),
    ("1.17.8-1", "1.17.8-1", False),
    ("1:2.0", "3.0", False),  # an epoch outranks the rest
    ("2.0", "1:1.0", True),
    ("580.126.09-1", None, False),  # not installed: an install
    (None, "580.159.04-1", False),  # any version will do
])
def test_rollbacks_are_told_from_upgrades(wanted: str | None, installed: str | None, down: bool) -> None:
    assert is_downgrade(wanted, installed) is down
