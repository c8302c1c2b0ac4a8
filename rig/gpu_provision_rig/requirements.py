"""Debian packages the rig needs on the host and in its base node image.

``scripts/setup-dev.sh`` installs the host list, with the mirror's, through :mod:`gpu_provision_rig.hostdeps`.
"""

HOST_PACKAGES: tuple[str, ...] = (
    "mmdebstrap",  # builds the base root filesystem
    "systemd-container",  # systemd-nspawn
    "apt-cacher-ng",  # the nodes' only way to the Debian archive
    "iproute2",  # bridge and blackhole route
    "util-linux",  # nsenter, mount
    "openssh-client",  # ssh-keygen for rig and host keys; ssh for tests
    "ruby",  # `ruby -c Vagrantfile` in CI
)

NODE_PACKAGES: tuple[str, ...] = (
    "openssh-server",
    "python3",
    "systemd",
    "systemd-sysv",
    "dbus",
    "sudo",
    "ca-certificates",
    "iproute2",
    "kmod",
    "procps",
)
"""Installed into the base root filesystem of every node; their hash is part of the base cache key."""
