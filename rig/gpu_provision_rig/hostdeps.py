"""Host (controller-machine) packages the test rig and its package mirror need; scripts/setup-dev.sh installs them.

``python -m gpu_provision_rig.hostdeps`` prints them on one line, for ``apt-get install``;
``python -m gpu_provision_rig.hostdeps --no-recommends`` prints those installed without their recommended packages:
the box builder's, the VM tier's and ``vagrant up``'s (libvirt's recommended packages would bring daemons and
drivers nothing here uses; ``libvirt-daemon-system`` defines libvirt's NAT network ``default`` but, without systemd
and without recommends, starts nothing: ``gpu-provision-rig libvirt up`` starts the daemons and only its own
isolated network).
"""

from __future__ import annotations

from gpu_provision_rig.box import BOX_HOST_PACKAGES
from gpu_provision_rig.libvirt import LIBVIRT_HOST_PACKAGES
from gpu_provision_rig.mirror import MIRROR_HOST_PACKAGES
from gpu_provision_rig.requirements import HOST_PACKAGES
from gpu_provision_rig.vm import VM_HOST_PACKAGES


def host_packages() -> list[str]:
    """Every Debian package the rig, the mirror builder, the box builder, the VM tier and the Vagrantfile check
    use on the controller."""
    return sorted({*HOST_PACKAGES, *MIRROR_HOST_PACKAGES, "ruby"})


def lean_packages() -> list[str]:
    """The packages installed without recommends: the box builder's, the VM tier's and ``vagrant up``'s."""
    return sorted({*BOX_HOST_PACKAGES, *VM_HOST_PACKAGES, *LIBVIRT_HOST_PACKAGES}
                  - {*HOST_PACKAGES, *MIRROR_HOST_PACKAGES})


if __name__ == "__main__":
    import sys

    print(*(lean_packages() if sys.argv[1:] == ["--no-recommends"] else host_packages()))
