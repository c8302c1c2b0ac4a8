"""Host (controller-machine) packages the test rig and its package mirror need; scripts/setup.sh installs them."""

from __future__ import annotations


def host_packages() -> list[str]:
    """Every Debian package the rig, the mirror builder and the Vagrantfile check use on the controller."""
    from gpu_provision.rig.mirror import MIRROR_HOST_PACKAGES
    from gpu_provision.rig.requirements import HOST_PACKAGES

    return sorted({*HOST_PACKAGES, *MIRROR_HOST_PACKAGES, "ruby"})


if __name__ == "__main__":
    print(*host_packages())
