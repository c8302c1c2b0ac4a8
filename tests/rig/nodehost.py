"""testinfra hosts for rig nodes: the rig tests' node assertions go through testinfra, not hand-written SSH calls.

A host is reached like the conformance suite reaches one (testinfra's ``ssh://`` backend, the rig's key, and an
OpenSSH client configuration for known_hosts and strict checking: pytest-testinfra 10 takes client options from
``ssh_config`` only). ``ssh`` stays for actions (fault injection, running things); what a test asserts about a
node's packages, holds, services, files and groups it reads through ``host.package``, ``host.file``,
``host.service``, ``host.group`` and ``host.check_output``. Test modules import the ``node_host`` fixture by name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import testinfra

from gpu_provision_rig.config import SUDO_USER, RigNode


def ssh_config(path: Path, known_hosts: Path) -> Path:
    """Writes the client configuration testinfra's ssh backend reads (strict checking, the rig's known_hosts)."""
    path.write_text(f"Host 127.0.10.*\n  UserKnownHostsFile {known_hosts}\n  StrictHostKeyChecking yes\n"
                    "  BatchMode yes\n  IdentitiesOnly yes\n  ConnectTimeout 10\n")
    return path


def host_for(node: RigNode, key: Path, config: Path, sudo: bool = False) -> Any:
    """The testinfra host of ``node``: root over SSH, or the sudo user ``ops`` through ``sudo`` when asked."""
    user = SUDO_USER if sudo else "root"
    return testinfra.get_host(f"ssh://{user}@{node.ssh_address}", ssh_identity_file=str(key),
                              ssh_config=str(config), sudo=sudo)


@pytest.fixture(scope="module")
def node_host(rig: Any, tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Any]:
    """Function giving a rig node's testinfra host (``node_host(node)``, or ``node_host(node, sudo=True)``)."""
    config = ssh_config(tmp_path_factory.mktemp("testinfra") / "ssh_config", rig.paths.known_hosts)

    def get(node: RigNode, sudo: bool = False) -> Any:
        return host_for(node, rig.paths.client_key, config, sudo)

    return get
