"""Docker inside a rig node: installed from the Debian archive through the apt proxy, runs a container.

No registry is reachable, so the image is made on the node: busybox-static's one binary, imported as a filesystem
tarball with ``docker import``.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.rig

INSTALL = ("DEBIAN_FRONTEND=noninteractive apt-get update -q && DEBIAN_FRONTEND=noninteractive "
           "apt-get install -y -q --no-install-recommends docker.io busybox-static")
BUILD_IMAGE = ("set -e; rm -rf /tmp/img; mkdir -p /tmp/img/bin; cp /bin/busybox /tmp/img/bin/busybox; "
               "tar -C /tmp/img -c . | docker import - rig/busybox:1")


def test_docker_runs_a_container(rig_nodes, ssh):
    node = rig_nodes[0]
    install = ssh(node, INSTALL)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-2000:]
    assert ssh(node, "systemctl is-active docker").stdout.strip() == "active"
    build = ssh(node, BUILD_IMAGE)
    assert build.returncode == 0, build.stderr
    run = ssh(node, "docker run --rm rig/busybox:1 /bin/busybox sh -c 'echo hello from $(/bin/busybox hostname)'")
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("hello from ")
    info = ssh(node, "docker info --format '{{.Driver}} {{.CgroupVersion}}'")
    # overlay2 works because /var/lib/docker is a plain host directory, not the node's overlay root.
    assert info.stdout.split() == ["overlay2", "1"]
