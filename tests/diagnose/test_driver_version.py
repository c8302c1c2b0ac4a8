"""The one reader of the loaded module's version (``/proc/driver/nvidia/version``) on the texts real drivers write."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.node.driver_version import module_version

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_real_h200_file() -> None:
    assert module_version((FIXTURES / "h200" / "proc_driver_nvidia_version.txt").read_text()) == "580.159.04"


@pytest.mark.parametrize(("text", "version"), [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (nixbld@)", "580.159.04"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 16:21:13 UTC 2025", "580.95.05"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.172.08  Release Build  (dvs-builder@U16)",
     "570.172.08"),
    ("NVRM version: NVIDIA UNIX aarch64 Kernel Module  550.54  Tue Feb  6 2024", "550.54"),
    # Another number on the line (a GCC version, a date) is never taken for the module's.
    ("GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)", None),
    ("", None),
    (None, None),
])
def test_flavours_and_absence(text: str | None, version: str | None) -> None:
    assert module_version(text) == version
