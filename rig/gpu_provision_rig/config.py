"""Addresses, names and paths of the local test rig, and the node description it is driven by.

Two address ranges only: the controller side reaches node N through a forwarder on the loopback address
``127.0.10.N`` port 22; the node itself has ``10.77.0.(10+N)`` on the rig's private bridge, whose host side is
``10.77.0.1``. Nothing else is ever addressed.
"""

from __future__ import annotations

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from gpu_provision_rig.errors import RigError

SUBNET = "10.77.0.0/24"
#: The isolated libvirt network of ``vagrant up`` on the rig (:mod:`gpu_provision_rig.libvirt`).
LIBVIRT_SUBNET = "10.77.1.0/24"
BRIDGE_ADDRESS = "10.77.0.1"
BRIDGE_NAME = "gprig0"
APT_PROXY_PORT = 3142
MIRROR_PORT = 8080
SSH_PORT = 22
LOOPBACK_PREFIX = "127.0.10."
NODE_ADDRESS_OFFSET = 10
MAX_NODE_INDEX = 200

DEFAULT_STATE_DIR = "/var/tmp/gpu-provision-rig"
DEFAULT_CACHE_DIR = "/var/cache/gpu-provision/rig"
STATE_DIR_ENV = "GPU_PROVISION_RIG_DIR"
CACHE_DIR_ENV = "GPU_PROVISION_RIG_CACHE"
#: Set to ``1``, it runs the real-package tier (Debian's real NVIDIA packages, real DKMS builds; 10 to 40 minutes):
#: the tests' switch and the bench's, named once.
REAL_PACKAGES_ENV = "GPU_PROVISION_REAL_PACKAGES"

#: Login user of every node whose sudo needs no password (``/etc/sudoers.d``), logging in with the rig's key.
SUDO_USER = "ops"
#: Login user of every node whose sudo asks for :data:`SUDO_PASSWORD` (group ``sudo``), logging in with the rig's key.
PASSWORD_SUDO_USER = "opspw"
#: The password of :data:`PASSWORD_SUDO_USER`: rig nodes only (no password logins over SSH), for the sudo prompt.
SUDO_PASSWORD = "rig-sudo-password"

_NODE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,30}$")


@dataclass(frozen=True)
class RigNode:
    """One node the rig runs: its name, the loopback address the controller uses, and its simulated GPUs.

    ``ssh_address`` must be ``127.0.10.N`` (1 <= N <= 200); N also picks the node's bridge address.
    """

    name: str
    ssh_address: str
    gpu_model: str | None = None
    gpu_count: int = 0
    #: The Debian release the node runs (``bookworm``: Debian 12, ``trixie``: Debian 13).
    suite: str = "bookworm"

    def __post_init__(self) -> None:
        if not _NODE_NAME.match(self.name):
            raise RigError(f"rig node name {self.name!r}: use lower-case letters, digits and '-', at most 31")
        index_text = self.ssh_address.removeprefix(LOOPBACK_PREFIX)
        if index_text == self.ssh_address or not index_text.isdigit() or not 1 <= int(index_text) <= MAX_NODE_INDEX:
            raise RigError(
                f"rig node {self.name}: address {self.ssh_address!r} is not {LOOPBACK_PREFIX}N with 1 <= N <= {MAX_NODE_INDEX}"
            )
        if self.gpu_count < 0 or (self.gpu_model is None and self.gpu_count):
            raise RigError(f"rig node {self.name}: {self.gpu_count} GPUs need a GPU model")

    @property
    def index(self) -> int:
        """N of the node's loopback address ``127.0.10.N``."""
        return int(self.ssh_address.removeprefix(LOOPBACK_PREFIX))

    @property
    def bridge_address(self) -> str:
        """The node's own address on the rig bridge."""
        return str(ipaddress.ip_address(BRIDGE_ADDRESS) + NODE_ADDRESS_OFFSET - 1 + self.index)

    def to_json(self) -> dict[str, object]:
        """The node as stored in the rig state file."""
        return {"name": self.name, "ssh_address": self.ssh_address, "gpu_model": self.gpu_model,
                "gpu_count": self.gpu_count, "suite": self.suite}

    @classmethod
    def from_json(cls, data: dict[str, object]) -> RigNode:
        """Inverse of :meth:`to_json`."""
        model = data.get("gpu_model")
        count = data.get("gpu_count", 0)
        return cls(name=str(data["name"]), ssh_address=str(data["ssh_address"]),
                   gpu_model=None if model is None else str(model), gpu_count=int(str(count)),
                   suite=str(data.get("suite", "bookworm")))


def numbered_nodes(count: int, gpu_model: str | None = None, gpus_per_node: int = 0,
                   suite: str = "bookworm") -> list[RigNode]:
    """``node1`` .. ``nodeN`` on ``127.0.10.1`` .. ``127.0.10.N``, each with the same simulated GPUs and release."""
    if not 1 <= count <= MAX_NODE_INDEX:
        raise RigError(f"node count {count} outside 1..{MAX_NODE_INDEX}")
    return [RigNode(f"node{i}", f"{LOOPBACK_PREFIX}{i}", gpu_model, gpus_per_node if gpu_model else 0, suite)
            for i in range(1, count + 1)]


def check_distinct(nodes: list[RigNode]) -> None:
    """Refuse two nodes with the same name or the same address."""
    for attr in ("name", "ssh_address"):
        seen: set[str] = set()
        for node in nodes:
            value = getattr(node, attr)
            if value in seen:
                raise RigError(f"two rig nodes share the {attr.replace('_', ' ')} {value}")
            seen.add(value)


@dataclass(frozen=True)
class RigPaths:
    """Where the rig keeps its state (keys, pid files, logs, node overlays) and its caches (base roots, apt)."""

    state: Path
    cache: Path

    @classmethod
    def from_env(cls) -> RigPaths:
        """Paths from ``GPU_PROVISION_RIG_DIR`` and ``GPU_PROVISION_RIG_CACHE``, else the defaults."""
        return cls(Path(os.environ.get(STATE_DIR_ENV) or DEFAULT_STATE_DIR),
                   Path(os.environ.get(CACHE_DIR_ENV) or DEFAULT_CACHE_DIR))

    @property
    def client_key(self) -> Path:
        """Private ed25519 key the controller logs in with (``root``)."""
        return self.state / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """known_hosts naming each node's host key under its loopback address."""
        return self.state / "known_hosts"

    @property
    def state_file(self) -> Path:
        """JSON record of the nodes the rig was asked to run."""
        return self.state / "rig.json"

    @property
    def lock_file(self) -> Path:
        """Serialises ``up``/``down``/resets of the same rig."""
        return self.state / "lock"

    @property
    def run(self) -> Path:
        """Pid files."""
        return self.state / "run"

    @property
    def logs(self) -> Path:
        """Logs of every daemon the rig starts."""
        return self.state / "logs"

    @property
    def mirror(self) -> Path:
        """Where the package mirror is built and served from."""
        return self.state / "mirror"

    def node_dir(self, name: str) -> Path:
        """Per-node directory: overlay upper/work/root, docker dir, host keys."""
        return self.state / "nodes" / name
