"""The real-package tier: tests that install Debian's real NVIDIA driver packages and build them with real DKMS.

They take 10 to 40 minutes on two cores, so they are left out of the default run (README, "The two commands"):
``GPU_PROVISION_REAL_PACKAGES=1`` runs them.
"""

from __future__ import annotations

import os

import pytest

from gpu_provision_rig.config import REAL_PACKAGES_ENV

ENABLED = os.environ.get(REAL_PACKAGES_ENV) == "1"
#: Skips a test module unless the tier is asked for.
SKIP_UNLESS_ASKED = pytest.mark.skipif(not ENABLED, reason=f"real-package tier: set {REAL_PACKAGES_ENV}=1")
#: Debian's driver version per release, as its archive holds it (bookworm's security update 535.309.01-0+deb12u1,
#: trixie's 550.163.01-2, read with apt on 2026-12-02; gpu_provision/data/packages.json, source ``debian-archive``).
#: A later update moves it: the tests then fail at the install, naming the version apt could not find.
VERSIONS = {"bookworm": "535.309.01", "trixie": "550.163.01"}
#: Debian's name for the module DKMS builds (its packages rename ``nvidia`` so that branches can sit side by side).
DKMS_MODULE = "nvidia-current"
