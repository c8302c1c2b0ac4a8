"""Fixtures for tests against the local systemd-nspawn rig.

``rig`` (session): the :class:`Rig`. The rig may be shared with other users of the machine (benchmarks, manual
runs, other test sessions), so a session only touches its own nodes, named ``rt<pid>-<n>`` on free loopback
addresses: it drops nodes of dead sessions first, removes its own at the end, and takes the whole rig down only if
no other node is left. ``rig_nodes`` (module): brings up nodes of the shapes (GPU model, count) the module names in
``RIG_NODE_SHAPES`` (default :data:`DEFAULT_SHAPES`; a shape may name the node's Debian release third), or the
named nodes in ``RIG_NODES``, and returns them;
modules asking for the same shapes share running nodes. ``reset_node``: makes a node fresh (overlay wiped, booted
again). ``rig_exclusive``: skips a test that would disturb other users' nodes. Rig tests carry
``@pytest.mark.rig``; they are skipped, with the reason, where the rig cannot run (not root, mmdebstrap or
systemd-nspawn missing).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from gpu_provision_rig.config import RigNode
from gpu_provision_rig.lifecycle import Rig, missing_requirements

DEFAULT_SHAPES: list[tuple[str | None, int]] = [("H200", 2), (None, 0)]
"""GPU model and count of each node a module gets unless it sets ``RIG_NODE_SHAPES``."""
SSH_TIMEOUT_S = 60
_SESSION_NAME = re.compile(r"^rt(\d+)-\d+$")
# Loopback indices handed to test nodes, from the top down (other users of the rig tend to take low ones).
_TEST_INDICES = range(150, 130, -1)


class SessionRig:
    """The rig as one pytest session uses it: its own nodes (``rt<pid>-<n>``), the rest left alone."""

    def __init__(self, rig: Rig):
        self.rig = rig
        self.prefix = f"rt{os.getpid()}-"
        self.by_shapes: dict[tuple[tuple[Any, ...], ...], list[RigNode]] = {}
        self.started: set[str] = set()

    def own(self, node: RigNode) -> bool:
        """Whether ``node`` belongs to this session."""
        return node.name.startswith(self.prefix) or node.name in self.started

    def up(self, nodes: list[RigNode]) -> list[RigNode]:
        """Bring ``nodes`` up and remember them for removal at the end of the session."""
        self.started.update(n.name for n in nodes)
        self.rig.up(nodes)
        return nodes

    def drop_stale(self) -> None:
        """Remove nodes left by test sessions whose process is gone."""
        stale = [n.name for n in self.rig.nodes()
                 if (m := _SESSION_NAME.match(n.name)) and not Path(f"/proc/{m.group(1)}").exists()]
        if stale:
            self.rig.remove(stale)

    def nodes_for(self, shapes: Sequence[tuple[Any, ...]]) -> list[RigNode]:
        """Running nodes of the given shapes (GPU model, count and, optionally, the Debian release), made on first
        use on free loopback addresses."""
        key = tuple(shapes)
        if key not in self.by_shapes:
            taken = {n.index for n in self.rig.nodes()} | {n.index for ns in self.by_shapes.values() for n in ns}
            free = [i for i in _TEST_INDICES if i not in taken]
            first = sum(len(ns) for ns in self.by_shapes.values()) + 1
            self.by_shapes[key] = [
                RigNode(f"{self.prefix}{first + i}", f"127.0.10.{free[i]}", shape[0], shape[1] if shape[0] else 0,
                        *shape[2:])
                for i, shape in enumerate(shapes)]
        return self.up(self.by_shapes[key])

    def close(self) -> None:
        """Remove this session's nodes; take the rig down if nobody else has nodes on it."""
        self.rig.remove([n.name for n in self.rig.nodes() if self.own(n)])
        if not self.rig.nodes():
            self.rig.down()


@pytest.fixture(scope="session")
def session_rig() -> Iterator[SessionRig]:
    """This session's view of the shared rig; skips the test where the rig cannot run."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the rig cannot run here: missing {', '.join(missing)}")
    srig = SessionRig(Rig())
    srig.drop_stale()
    yield srig
    srig.close()


@pytest.fixture(scope="session")
def rig(session_rig: SessionRig) -> Rig:
    """The rig (shared with other users of the machine, if any)."""
    return session_rig.rig


@pytest.fixture(scope="module")
def rig_nodes(request: pytest.FixtureRequest, session_rig: SessionRig) -> list[RigNode]:
    """The module's nodes, running with sshd up: ``RIG_NODES`` (a list of :class:`RigNode`, names and addresses
    chosen by the module) if it has one, else fresh session nodes of ``RIG_NODE_SHAPES`` (default
    :data:`DEFAULT_SHAPES`)."""
    named: list[RigNode] | None = getattr(request.module, "RIG_NODES", None)
    if named is not None:
        return session_rig.up(named)
    return session_rig.nodes_for(getattr(request.module, "RIG_NODE_SHAPES", DEFAULT_SHAPES))


@pytest.fixture
def rig_exclusive(session_rig: SessionRig, rig_nodes: list[RigNode]) -> Rig:
    """The rig, for a test that disturbs every node on it; skips while other users' nodes run."""
    others = sorted(n.name for n in session_rig.rig.nodes() if not session_rig.own(n))
    if others:
        pytest.skip(f"the rig is shared with running nodes {', '.join(others)}; not disturbing them")
    return session_rig.rig


@pytest.fixture
def reset_node(rig: Rig) -> Callable[[str], None]:
    """Function making a node fresh: everything it changed is dropped and it boots again."""
    return rig.reset_node


@dataclass
class Ssh:
    """OpenSSH client for rig nodes, strict host key checking on, rig key and known_hosts by default."""

    rig: Rig

    def __call__(self, node: RigNode, command: str, key: Path | None = None,
                 known_hosts: Path | None = None, user: str = "root",
                 input: str | None = None, timeout: float = SSH_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run ``command`` on ``node`` as ``user`` (root unless told), for up to ``timeout`` seconds; never raises
        on a failing command."""
        argv = ["ssh", "-F", "/dev/null", "-i", str(key or self.rig.paths.client_key),
                "-o", f"UserKnownHostsFile={known_hosts or self.rig.paths.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                "-o", "ConnectTimeout=10", f"{user}@{node.ssh_address}", command]
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input)


@pytest.fixture(scope="session")
def rig_ssh(rig: Rig) -> Ssh:
    """:class:`Ssh` for module-scoped fixtures (test modules cannot import it: ``conftest`` names several modules)."""
    return Ssh(rig)


@pytest.fixture
def ssh(rig_ssh: Ssh) -> Ssh:
    """Run a command on a node over real SSH through its loopback forwarder."""
    return rig_ssh


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
