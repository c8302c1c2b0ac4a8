"""Host (controller-machine) packages the test rig and its package mirror need; scripts/setup-dev.sh installs them.

``python -m gpu_provision_rig.hostdeps`` prints them on one line, for ``apt-get install``.
"""

from __future__ import annotations

from gpu_provision_rig.mirror import MIRROR_HOST_PACKAGES
from gpu_provision_rig.requirements import HOST_PACKAGES


def host_packages() -> list[str]:
    """Every Debian package the rig, the mirror builder and the Vagrantfile check use on the controller."""
    return sorted({*HOST_PACKAGES, *MIRROR_HOST_PACKAGES, "ruby"})


if __name__ == "__main__":
    print(*host_packages())
