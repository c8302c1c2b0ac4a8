"""Bring the rig up, report on it, reset or kill single nodes, and take it all down again.

``up`` and ``down`` are idempotent. ``up`` adds nodes to a running rig and leaves running nodes with the same
description alone; a node whose description changed is booted fresh. ``down`` stops every process the rig started,
unmounts every overlay, deletes the bridge and the blackhole route, and forgets what the nodes changed (the next
``up`` boots fresh nodes); the ssh keys and the caches stay.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gpu_provision
import gpu_provision_rig
from gpu_provision_rig import aptproxy, cgroups, limits, network, sshkeys
from gpu_provision_rig.base import ensure_base
from gpu_provision_rig.config import (
    BRIDGE_ADDRESS,
    MIRROR_PORT,
    SSH_PORT,
    RigNode,
    RigPaths,
    check_distinct,
)
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.node import (
    NodeLayout,
    is_mounted,
    leader_pid,
    mount_overlay,
    unmount_overlay,
    wipe,
    write_node_files,
)
from gpu_provision_rig.procs import read_pid, start_daemon, stop_daemon, wait_gone

log = logging.getLogger(__name__)

REQUIRED_TOOLS = ("mmdebstrap", "systemd-nspawn", "apt-cacher-ng", "ip", "nsenter", "mount", "ssh-keygen")
NODE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
            "HOME": "/root", "TERM": "dumb"}
SSH_WAIT_S = 180.0
NODE_STOP_S = 20.0
NODE_LEFTOVER_S = 2.0


@dataclass(frozen=True)
class NodeStatus:
    """One node as ``rig status``/``rig inventory`` shows it."""

    name: str
    ssh_address: str
    bridge_address: str
    state: str  # "running" (sshd answers), "booting" (node process alive), "stopped"
    gpu_model: str | None
    gpu_count: int

    def to_json(self) -> dict[str, object]:
        """The status as a JSON object."""
        return dict(self.__dict__)


def missing_requirements() -> list[str]:
    """What keeps the rig from running here: not root, or required programs missing (empty list: nothing)."""
    missing = [] if os.geteuid() == 0 else ["root privileges"]
    missing += [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    return missing


def ssh_banner(address: str, port: int = SSH_PORT, timeout: float = 2.0) -> str | None:
    """The SSH identification line the node sends through its forwarder, or None if none arrives."""
    try:
        with socket.create_connection((address, port), timeout=timeout) as sock:
            sock.settimeout(timeout)
            data = sock.recv(256)
    except OSError:
        return None
    line = data.split(b"\r\n", 1)[0].decode(errors="replace")
    return line if line.startswith("SSH-") else None


class Rig:
    """The local test rig in one state directory (see :class:`RigPaths`)."""

    def __init__(self, paths: RigPaths | None = None):
        self.paths = paths or RigPaths.from_env()

    # -- state ---------------------------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self.paths.state.mkdir(parents=True, exist_ok=True)
        with open(self.paths.lock_file, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield

    def _read_state(self) -> dict[str, dict[str, object]]:
        try:
            data: dict[str, dict[str, object]] = json.loads(self.paths.state_file.read_text())["nodes"]
        except (OSError, ValueError, KeyError):
            return {}
        return data

    def _write_state(self, nodes: dict[str, dict[str, object]]) -> None:
        tmp = self.paths.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"nodes": nodes}, indent=2, sort_keys=True) + "\n")
        tmp.replace(self.paths.state_file)

    def nodes(self) -> list[RigNode]:
        """The nodes the rig was last brought up with, in address order."""
        nodes = [RigNode.from_json(entry) for entry in self._read_state().values()]
        return sorted(nodes, key=lambda n: n.index)

    def node(self, name: str) -> RigNode:
        """The rig node called ``name``; RigError if the rig has none."""
        for node in self.nodes():
            if node.name == name:
                return node
        raise RigError(f"the rig has no node {name!r}")

    def layout(self, name: str) -> NodeLayout:
        """Where node ``name`` keeps its files."""
        return NodeLayout.of(self.paths, name)

    def _forward_pidfile(self, name: str) -> Path:
        return self.paths.run / f"forward-{name}.pid"

    @property
    def _mirror_pidfile(self) -> Path:
        return self.paths.run / "mirror-http.pid"

    # -- up ------------------------------------------------------------------------------------------------------

    def up(self, nodes: list[RigNode], wait: bool = True) -> list[NodeStatus]:
        """Start the rig's network, proxy, mirror and the given nodes (keeping others already running)."""
        missing = missing_requirements()
        if missing:
            raise RigError(f"the rig cannot run here, missing: {', '.join(missing)}")
        check_distinct(nodes)
        with self._locked():
            state = self._read_state()
            check_distinct([RigNode.from_json(v) for k, v in state.items() if k not in {n.name for n in nodes}]
                           + nodes)
            bases = {suite: ensure_base(self.paths.cache, suite=suite) for suite in sorted({n.suite for n in nodes})}
            for d in (self.paths.run, self.paths.logs):
                d.mkdir(parents=True, exist_ok=True)
            sshkeys.make_key(self.paths.client_key, "gpu-provision-rig")
            limits.ensure_inotify_instances()
            network.ensure_network()
            aptproxy.start_proxy(self.paths)
            self._serve_mirror()
            for node in nodes:
                base = bases[node.suite]
                previous = state.get(node.name)
                same = previous is not None and previous.get("base") == str(base) and \
                    RigNode.from_json(previous) == node
                if same and read_pid(self.layout(node.name).pidfile) is not None:
                    continue
                if previous is not None:
                    self._stop_node(node.name, fresh=True)
                state[node.name] = {**node.to_json(), "base": str(base)}
                self._write_state(state)
                self._start_node(node, base)
            self._write_known_hosts()
        if wait:
            self.wait_ssh([n.name for n in nodes])
        return self.status()

    def _serve_mirror(self) -> None:
        """Build the package mirror and serve it read-only on the bridge.

        The build runs at every ``up``: it is incremental (an unchanged stand-in costs a hash), and a changed one must
        reach nodes that install from the mirror while it is already being served.
        """
        from gpu_provision_rig import mirror

        self.paths.mirror.mkdir(parents=True, exist_ok=True)
        info = mirror.build_mirror(self.paths.mirror)
        key_link = self.paths.state / "mirror-key.asc"
        key_link.unlink(missing_ok=True)
        key_link.symlink_to(Path(info.key_path).resolve())
        if read_pid(self._mirror_pidfile) is not None:
            return
        start_daemon([sys.executable, "-m", "gpu_provision_rig.httpserve", str(info.root), "--bind", BRIDGE_ADDRESS,
                      "--port", str(MIRROR_PORT)], self._mirror_pidfile, self.paths.logs / "mirror-http.log",
                     env=self._python_env())

    @staticmethod
    def _python_env() -> dict[str, str]:
        """Environment for the rig's Python daemons: the rig and the product importable wherever each is installed."""
        roots = dict.fromkeys(str(Path(module.__file__ or "").resolve().parents[1])
                              for module in (gpu_provision, gpu_provision_rig))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*roots, env.get("PYTHONPATH")]))
        return env

    def _start_node(self, node: RigNode, base: Path) -> None:
        layout = self.layout(node.name)
        layout.dir.mkdir(parents=True, exist_ok=True)
        sshkeys.make_key(layout.host_key, f"root@{node.name}")
        mount_overlay(layout, base)
        write_node_files(layout, node, sshkeys.public_key(self.paths.client_key))
        start_daemon([sys.executable, "-m", "gpu_provision_rig.node", "--name", node.name, "--dir", str(layout.dir)],
                     layout.pidfile, layout.log, env=self._python_env())
        start_daemon([sys.executable, "-m", "gpu_provision_rig.forward", f"{node.ssh_address}:{SSH_PORT}",
                      f"{node.bridge_address}:{SSH_PORT}", "--node-pidfile", str(layout.pidfile)],
                     self._forward_pidfile(node.name), self.paths.logs / f"forward-{node.name}.log",
                     env=self._python_env())

    def _write_known_hosts(self) -> None:
        entries = [(n.ssh_address, self.layout(n.name).host_key) for n in self.nodes()]
        sshkeys.write_known_hosts(self.paths.known_hosts, entries)

    def wait_ssh(self, names: list[str], timeout: float = SSH_WAIT_S) -> None:
        """Wait until every named node's sshd answers through its loopback forwarder."""
        waiting = {name: self.node(name) for name in names}
        deadline = time.monotonic() + timeout
        while waiting:
            for name, node in list(waiting.items()):
                if ssh_banner(node.ssh_address, timeout=1.0) is not None:
                    del waiting[name]
                elif read_pid(self.layout(name).pidfile) is None:
                    raise RigError(f"rig node {name} stopped while booting; see {self.layout(name).log}")
            if waiting and time.monotonic() > deadline:
                raise RigError(f"rig nodes without sshd after {timeout:.0f} s: {', '.join(sorted(waiting))}")
            if waiting:
                time.sleep(0.1)

    # -- single nodes --------------------------------------------------------------------------------------------

    def _stop_node(self, name: str, fresh: bool, timeout: float = NODE_STOP_S) -> None:
        """Stop node ``name`` (clean poweroff, or kill it when ``fresh`` as its changes are dropped anyway) and
        return only when none of its processes is left: the node process, nspawn, the node's systemd and whatever
        it started (all in the node's own cgroups, see :mod:`gpu_provision_rig.cgroups`)."""
        layout = self.layout(name)
        if fresh:
            self._kill_leader(layout)
        stop_daemon(layout.pidfile, timeout=timeout)
        leader = leader_pid(layout)
        if leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(leader, signal.SIGKILL)
            wait_gone(layout.leader_pidfile, 5.0)
        layout.leader_pidfile.unlink(missing_ok=True)
        # The node process has had ``timeout`` to power the node off; what is left gets a moment, then SIGKILL.
        killed = cgroups.clear(layout.dir, grace=NODE_LEFTOVER_S)
        if killed:
            log.warning("node %s: killed %d process(es) left after it stopped", name, len(killed))
        left = cgroups.processes(layout.dir)
        if left:
            raise RigError(f"rig node {name}: processes {sorted(left)} did not end after SIGKILL")
        unmount_overlay(layout)
        if fresh:
            wipe(layout)

    @staticmethod
    def _kill_leader(layout: NodeLayout) -> None:
        leader = leader_pid(layout)
        if leader is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(leader, signal.SIGKILL)

    def reset_node(self, name: str, wait: bool = True) -> None:
        """Make node ``name`` fresh: drop everything it changed and boot it again."""
        node = self.node(name)
        with self._locked():
            base = Path(str(self._read_state()[name]["base"]))
            self._stop_node(name, fresh=True)
            self._start_node(node, base)
        if wait:
            self.wait_ssh([name])

    def remove(self, names: list[str]) -> None:
        """Stop the named nodes and forget them (host keys included); the rest of the rig keeps running."""
        with self._locked():
            state = self._read_state()
            for name in names:
                stop_daemon(self._forward_pidfile(name))
                self._stop_node(name, fresh=True)
                shutil.rmtree(self.layout(name).dir, ignore_errors=True)
                state.pop(name, None)
            self._write_state(state)
            self._write_known_hosts()

    def kill_node(self, name: str) -> None:
        """Cut node ``name``'s power: SIGKILL its PID 1, as a crash would. It stays down until reset."""
        layout = self.layout(self.node(name).name)
        if leader_pid(layout) is None:
            raise RigError(f"rig node {name} is not running")
        self._kill_leader(layout)
        wait_gone(layout.pidfile, 10.0)

    def node_exec(self, name: str, argv: list[str], timeout: float | None = None,
                  input: str | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` inside node ``name`` (all its namespaces, root) from the host, without SSH."""
        leader = leader_pid(self.layout(self.node(name).name))
        if leader is None:
            raise RigError(f"rig node {name} is not running")
        return subprocess.run(["nsenter", "-t", str(leader), "-a", "--", *argv], capture_output=True, text=True,
                              timeout=timeout, input=input, env=NODE_ENV)

    # -- status and down -----------------------------------------------------------------------------------------

    def status(self) -> list[NodeStatus]:
        """State of every node the rig knows."""
        result = []
        for node in self.nodes():
            if read_pid(self.layout(node.name).pidfile) is None:
                state = "stopped"
            elif read_pid(self._forward_pidfile(node.name)) is not None and ssh_banner(node.ssh_address):
                state = "running"
            else:
                state = "booting"
            result.append(NodeStatus(node.name, node.ssh_address, node.bridge_address, state, node.gpu_model,
                                     node.gpu_count))
        return result

    def services(self) -> dict[str, object]:
        """Host-side services of the rig and whether each is up."""
        return {
            "bridge": network.bridge_exists(),
            "blackhole_route": network.blackhole_present(),
            "apt_proxy": aptproxy.proxy_pid(self.paths) is not None,
            "mirror_http": read_pid(self._mirror_pidfile) is not None,
            "mirror_url": f"http://{BRIDGE_ADDRESS}:{MIRROR_PORT}/",
        }

    def down(self) -> None:
        """Stop everything the rig started and remove its network; idempotent."""
        with self._locked():
            node_root = self.paths.state / "nodes"
            names = sorted(p.name for p in node_root.iterdir()) if node_root.is_dir() else []
            for name in names:
                stop_daemon(self._forward_pidfile(name))
                self._stop_node(name, fresh=True)
            for stale in self.paths.run.glob("forward-*.pid") if self.paths.run.is_dir() else []:
                stop_daemon(stale)
            self._unmount_leftovers()
            stop_daemon(self._mirror_pidfile)
            aptproxy.stop_proxy(self.paths)
            network.remove_network()
            self.paths.state_file.unlink(missing_ok=True)
            self.paths.known_hosts.unlink(missing_ok=True)

    def _unmount_leftovers(self) -> None:
        """Unmount anything still mounted below the state dir (deepest first), e.g. after a crashed ``up``."""
        prefix = str(self.paths.state.resolve()) + "/"
        with open("/proc/self/mountinfo") as f:
            targets = [line.split()[4] for line in f if line.split()[4].startswith(prefix)]
        for target in sorted(set(targets), key=len, reverse=True):
            while is_mounted(Path(target)):
                subprocess.run(["umount", "-l", target], check=False)
