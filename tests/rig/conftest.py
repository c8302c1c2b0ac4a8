"""Fixtures for tests against the local systemd-nspawn rig.

``rig`` (session): the :class:`Rig`, taken down before the first rig test (a crashed earlier session leaves no
trace) and after the last. ``rig_nodes`` (module): brings up the nodes the module names in ``RIG_NODES`` (default
:data:`DEFAULT_NODES`) on the shared rig and returns them; modules asking for the same nodes share running nodes.
``reset_node``: makes a node fresh (overlay wiped, booted again). Rig tests carry ``@pytest.mark.rig``; they are
skipped, with the reason, where the rig cannot run (not root, mmdebstrap or systemd-nspawn missing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpu_provision.rig.config import RigNode
from gpu_provision.rig.lifecycle import Rig, missing_requirements

DEFAULT_NODES = [
    RigNode("node1", "127.0.10.1", gpu_model="H200", gpu_count=2),
    RigNode("node2", "127.0.10.2"),
]
SSH_TIMEOUT_S = 60


@pytest.fixture(scope="session")
def rig() -> Iterator[Rig]:
    """The shared rig; skips the test where the rig cannot run."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the rig cannot run here: missing {', '.join(missing)}")
    the_rig = Rig()
    the_rig.down()
    yield the_rig
    the_rig.down()


@pytest.fixture(scope="module")
def rig_nodes(request: pytest.FixtureRequest, rig: Rig) -> list[RigNode]:
    """The module's ``RIG_NODES`` (or :data:`DEFAULT_NODES`), running with sshd up."""
    nodes: list[RigNode] = getattr(request.module, "RIG_NODES", DEFAULT_NODES)
    rig.up(nodes)
    return nodes


@pytest.fixture
def reset_node(rig: Rig) -> Callable[[str], None]:
    """Function making a node fresh: everything it changed is dropped and it boots again."""
    return rig.reset_node


@dataclass
class Ssh:
    """OpenSSH client for rig nodes, strict host key checking on, rig key and known_hosts by default."""

    rig: Rig

    def __call__(self, node: RigNode, command: str, key: Path | None = None,
                 known_hosts: Path | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``node`` as root; never raises on a failing command."""
        argv = ["ssh", "-F", "/dev/null", "-i", str(key or self.rig.paths.client_key),
                "-o", f"UserKnownHostsFile={known_hosts or self.rig.paths.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "ConnectTimeout=10", f"root@{node.ssh_address}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=SSH_TIMEOUT_S)


@pytest.fixture
def ssh(rig: Rig) -> Ssh:
    """Run a command on a node over real SSH through its loopback forwarder."""
    return Ssh(rig)


@dataclass
class PyinfraResult:
    """One pyinfra CLI run: exit status, combined output and the grand total of its results table."""

    returncode: int
    output: str

    def totals(self) -> dict[str, int]:
        """``{"hosts", "success", "error", "no_change"}`` from the ``Grand total`` row (``-`` counts as 0)."""
        match = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", self.output)
        assert match, f"no results table in pyinfra output:\n{self.output}"
        values = [0 if v == "-" else int(v) for v in match.groups()]
        return dict(zip(("hosts", "success", "error", "no_change"), values, strict=True))

    def host_lines(self, address: str) -> list[str]:
        """Lines pyinfra printed for the host ``address``."""
        return [line.strip() for line in self.output.splitlines() if f"[{address}]" in line]


@dataclass
class Pyinfra:
    """Runs the real pyinfra CLI against rig nodes from files in a test's temporary directory."""

    rig: Rig
    workdir: Path

    def inventory(self, nodes: list[RigNode], key: Path | None = None, known_hosts: Path | None = None,
                  name: str = "inventory.py") -> Path:
        """A pyinfra inventory file for ``nodes``: root by key, the rig's known_hosts, strict checking."""
        data = {"ssh_user": "root", "ssh_key": str(key or self.rig.paths.client_key),
                "ssh_known_hosts_file": str(known_hosts or self.rig.paths.known_hosts),
                "ssh_strict_host_key_checking": "yes"}
        hosts = ", ".join(f"({n.ssh_address!r}, {data!r})" for n in nodes)
        path = self.workdir / name
        path.write_text(f"rig_nodes = [{hosts}]\n")
        return path

    def deploy(self, text: str, name: str = "deploy.py") -> Path:
        """Write a deploy file."""
        path = self.workdir / name
        path.write_text(text)
        return path

    def run(self, inventory: Path, deploy: Path, timeout: float = 300) -> PyinfraResult:
        """Run ``pyinfra -y INVENTORY DEPLOY`` (no prompt); the output is kept for assertions."""
        env = {**os.environ, "COLUMNS": "200"}
        proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(inventory), str(deploy)],
                              capture_output=True, text=True, timeout=timeout, cwd=self.workdir, env=env)
        return PyinfraResult(proc.returncode, proc.stdout + proc.stderr)

    def start(self, inventory: Path, deploy: Path) -> subprocess.Popen[str]:
        """Start a pyinfra run in the background (for tests that act on nodes while it runs)."""
        return subprocess.Popen([sys.executable, "-m", "pyinfra", "-y", str(inventory), str(deploy)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=self.workdir,
                                env={**os.environ, "COLUMNS": "200"})


@pytest.fixture
def pyinfra(rig: Rig, tmp_path: Path) -> Pyinfra:
    """pyinfra CLI runner with inventory and deploy files in the test's temporary directory."""
    return Pyinfra(rig, tmp_path)
