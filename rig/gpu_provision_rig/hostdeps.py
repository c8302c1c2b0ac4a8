"""Host (controller-machine) packages the test rig and its package mirror need; scripts/setup-dev.sh installs them.

``python -m gpu_provision_rig.hostdeps`` prints them on one line, for ``apt-get install``;
``python -m gpu_provision_rig.hostdeps --no-recommends`` prints those installed without their recommended packages:
the box builder's and the VM tier's (``vagrant`` recommends ``vagrant-libvirt`` and with it a libvirt daemon whose
default network would NAT guests to the outside; the tier runs QEMU itself and starts no libvirt).
"""

from __future__ import annotations

from gpu_provision_rig.box import BOX_HOST_PACKAGES
from gpu_provision_rig.mirror import MIRROR_HOST_PACKAGES
from gpu_provision_rig.requirements import HOST_PACKAGES
from gpu_provision_rig.vm import VM_HOST_PACKAGES


def host_packages() -> list[str]:
    """Every Debian package the rig, the mirror builder, the box builder, the VM tier and the Vagrantfile check
    use on the controller."""
    return sorted({*HOST_PACKAGES, *MIRROR_HOST_PACKAGES, "ruby"})


def lean_packages() -> list[str]:
    """The packages installed without recommends: the box builder's and the VM tier's."""
    return sorted({*BOX_HOST_PACKAGES, *VM_HOST_PACKAGES} - {*HOST_PACKAGES, *MIRROR_HOST_PACKAGES})


if __name__ == "__main__":
    import sys

    print(*(lean_packages() if sys.argv[1:] == ["--no-recommends"] else host_packages()))
