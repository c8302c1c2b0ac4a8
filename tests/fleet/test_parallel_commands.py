"""Every fleet command reaches its hosts at once, not one after another, and says in its report, without a
traceback, which hosts did not answer: each starts through :func:`gpu_provision.startup.fleet_process` (gevent's
patches before any connection; without them paramiko's blocking sockets would hold the whole gevent hub and a fleet
would be worked through one host at a time). ``verify`` and ``diagnose`` used to let paramiko print a traceback
for every stalled host.

The hosts are loopback listeners that accept and never speak (stalled sshds): the commands run as users run them,
and the listeners count how many of their connections were open at the same moment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HOSTS = 4


#: The stalled hosts, run as a process of their own (a thread in the test process would share it with the gevent
#: hub that in-process fleet tests start): one listener per address, accepting and never speaking, until standard
#: input closes; then it prints how many connections it accepted and the most that were open at once.
STALLED_HOSTS = """
import json, selectors, socket, sys
listeners = []
for address in sys.argv[1:]:
    sock = socket.socket()
    sock.bind((address, 0))
    sock.listen(8)
    listeners.append(sock)
print(json.dumps([list(s.getsockname()) for s in listeners]), flush=True)
watch = selectors.DefaultSelector()
for sock in listeners:
    watch.register(sock, selectors.EVENT_READ)
watch.register(sys.stdin, selectors.EVENT_READ)
open_now, accepted, most_open = set(), 0, 0
while True:
    for key, _ in watch.select():
        if key.fileobj is sys.stdin:
            print(json.dumps({"accepted": accepted, "most_open": most_open}), flush=True)
            sys.exit(0)
        if key.fileobj in listeners:
            conn, _ = key.fileobj.accept()
            watch.register(conn, selectors.EVENT_READ)
            open_now.add(conn)
            accepted += 1
            most_open = max(most_open, len(open_now))
            continue
        conn = key.fileobj
        try:
            data = conn.recv(4096)
        except OSError:
            data = b""
        if not data:  # the client gave up on this host and closed
            watch.unregister(conn)
            open_now.discard(conn)
            conn.close()
"""


class StalledHosts:
    """Loopback hosts (one address each) that accept every connection and never speak, counting connections."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", STALLED_HOSTS, *(f"127.0.0.{40 + i}" for i in range(HOSTS))],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        self.addresses = [(address, int(port)) for address, port in json.loads(self.proc.stdout.readline())]

    def counts(self) -> dict[str, int]:
        """Stop the hosts; how many connections they accepted and the most open at once."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        counts = json.loads(self.proc.stdout.readline())
        self.proc.wait(timeout=10)
        return counts

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def stalled() -> Iterator[StalledHosts]:
    hosts = StalledHosts()
    try:
        yield hosts
    finally:
        hosts.close()


def cluster_file(path: Path, hosts: list[tuple[str, int]]) -> Path:
    nodes = [{"name": f"gpu-{i}", "address": address, "ssh": {"port": port}, "gpus": {"model": "H200", "count": 1}}
             for i, (address, port) in enumerate(hosts)]
    path.write_text(json.dumps({
        "version": "v1",
        "cluster": {"name": "parallel", "kubernetes": {"enabled": False},
                    "ssh": {"user": "root", "connect_timeout": 3, "strict_host_key_checking": False}},
        "nodes": nodes}))
    return path


@pytest.mark.parametrize("command", [["drift"], ["verify"], ["diagnose"], ["rollout", "plan"]])
def test_the_command_connects_to_every_host_at_once(command: list[str], stalled: StalledHosts, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    cluster = cluster_file(tmp_path / "cluster.yaml", stalled.addresses)
    # From a scratch directory (diagnose writes its bundles under the current one), with the project's inventory.py.
    done = subprocess.run([sys.executable, "-m", "gpu_provision.cli", *command, str(ROOT / "inventory.py"),
                           "--cluster", str(cluster), "--json"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0  # no host answered
    counts = stalled.counts()
    assert counts["accepted"] == HOSTS, (counts, done.stdout, done.stderr)
    assert counts["most_open"] == HOSTS, f"at most {counts['most_open']} of {HOSTS} connections open at once"
