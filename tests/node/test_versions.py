"""The one version order (``gpu_provision.node.versions``), on real version strings, and every comparison that
uses it: rollbacks in the package operation, the newest kernel in the probe, the CUDA minimum in the verifier."""

from __future__ import annotations

import random

import pytest

from gpu_provision.desired import version_matches
from gpu_provision.node.probe import system
from gpu_provision.node.verify.checks import cuda_version_check
from gpu_provision.node.versions import at_least, minor, version_key
from gpu_provision.operations.packages import is_downgrade

#: Oldest first, as dpkg --compare-versions orders them.
ORDERED = [
    ["1.0~~", "1.0~rc1", "1.0", "1.0.1"],  # ~ sorts before everything, even the end of the string
    ["5:27.3.1-1~ubuntu.24.04~noble", "5:27.3.1-1", "5:27.3.1-1ubuntu1"],
    ["27.3.1-1", "1:27.3.1-0", "5:27.3.1-1~ubuntu.24.04~noble"],  # an epoch outranks the rest
    ["1.36.4-1", "1.36.4-1.1", "1.36.10-1.1"],
    ["580.95.05", "580.126.09", "580.159.04", "580.159.04-1", "590.44.01-1"],
    ["580.159.04-1", "1:580.95.05-0ubuntu1"],
    ["3:580.95.05-1.el9", "3:580.126.09-1.el9", "3:580.159.04-1.el9"],
    ["5.14.0-427.13.1.el9_4.x86_64", "5.14.0-503.11.1.el9_5.x86_64"],
    ["6.8.0-9-generic", "6.8.0-45-generic", "6.8.0-100-generic"],
    ["12.4", "12.4.1", "12.8", "13.0"],
]


@pytest.mark.parametrize("ordered", ORDERED, ids=[o[0] for o in ORDERED])
def test_real_versions_sort_as_dpkg_orders_them(ordered: list[str]) -> None:
    shuffled = list(ordered)
    random.Random(0).shuffle(shuffled)
    assert sorted(shuffled, key=version_key) == ordered
    for older, newer in zip(ordered, ordered[1:]):
        assert version_key(older) < version_key(newer)
        # A wanted version that the installed one satisfies (``12.4`` by ``12.4.1``) is no rollback.
        assert is_downgrade(older, newer) is not version_matches(older, newer)
        assert not is_downgrade(newer, older)


def test_equal_versions_have_equal_keys() -> None:
    assert version_key("1:580.95.05-0ubuntu1") == version_key("1:580.95.05-0ubuntu1")
    assert version_key("580.95.05") == version_key("0:580.95.05")


def test_a_branch_compares_only_its_own_parts() -> None:
    assert version_key("580", 1) == version_key("580.159.04-1", 1)
    assert version_key("580", 1) < version_key("590.44.01-1", 1)


def test_the_probe_picks_the_newest_kernel_in_this_order(monkeypatch: pytest.MonkeyPatch) -> None:
    kernels = ["6.8.0-100-generic", "6.8.0-45-generic", "6.8.0-9-generic"]
    monkeypatch.setattr(system.os, "listdir", lambda folder: kernels if folder == "/lib/modules" else [])
    monkeypatch.setattr(system, "_kernel_in_modules", lambda name: True)  # each folder holds its kernel's modules
    assert system._pending_kernel("6.8.0-45-generic") == ("6.8.0-100-generic", sorted(kernels, key=version_key))


@pytest.mark.parametrize(("found", "minimum", "status"), [("12.8", "12.4", "pass"), ("12.4", "12.4.1", "fail"),
                                                          ("13.0", "12.10", "pass"), ("12.9", "12.10", "fail")])
def test_the_verifier_compares_cuda_versions_in_this_order(found: str, minimum: str, status: str) -> None:
    assert cuda_version_check(found, {"cuda_min": minimum}, "nvidia-smi").status == status


@pytest.mark.parametrize(("version", "minimum", "parts", "met"), [
    ("1.18.0-1", "1.18.0", 3, True),  # a toolkit release whatever its packaging revision
    ("1.17.8-1", "1.18.0", 3, False),
    ("1.18.10", "1.18.9", 3, True),  # numbers, not text
    ("1.31.4", "1.31", 2, True),  # the 1.31 release of Kubernetes
    ("1.30.9", "1.31", 2, False),
    ("1.100.0", "1.31", 2, True),
    ("1.0~rc1", "1.0", None, False),  # dpkg's order: a pre-release is below its release
    ("1:580.95.05-0ubuntu1", "590.44.01", None, True),  # an epoch outranks the rest
])
def test_at_least_is_the_one_order_with_the_parts_a_rule_counts(version: str, minimum: str, parts: int | None,
                                                                 met: bool) -> None:
    assert at_least(version, minimum, parts) is met
    assert at_least(version, minimum, parts) is (version_key(version, parts) >= version_key(minimum, parts))


@pytest.mark.parametrize(("version", "number"), [
    ("v1.36.4", 36), ("1.36.4-1.1", 36), ("0:1.36.4", 36), ("1.9", 9), ("1.36.4~rc.1", 36),
    ("1", None), ("", None), (None, None), ("v1.x", None),
])
def test_minor_reads_the_minor_number_however_the_version_is_written(version: str | None,
                                                                      number: int | None) -> None:
    assert minor(version) == number
