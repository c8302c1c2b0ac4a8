"""Live counts of fleet commands as a user sees them: on a terminal one line rewritten in place on standard error,
a summary line at the end everywhere, nothing of it on standard output (so ``--json`` stays one JSON document)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def cluster(path: Path, port: int, names: list[str]) -> Path:
    """A cluster file whose nodes all sit on a closed loopback port (127.0.0.N: each one is a quick failure)."""
    doc = {"version": "v1",
           "cluster": {"name": "progress", "kubernetes": {"enabled": False},
                       "ssh": {"user": "root", "connect_timeout": 2, "strict_host_key_checking": False}},
           "nodes": [{"name": n, "address": f"127.0.0.{i}", "ssh": {"port": port},
                      "gpus": {"model": "H200", "count": 1}} for i, n in enumerate(names, start=1)]}
    path.write_text(json.dumps(doc))
    return path


def run_with_terminal(argv: list[str]) -> tuple[int, str, str]:
    """Run ``argv`` with standard error on a pseudo-terminal and standard output on a pipe."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=follower, stdin=subprocess.DEVNULL)
    os.close(follower)
    screen = b""
    while True:
        ready, _, _ = select.select([leader], [], [], 120)
        if not ready:
            proc.kill()
            break
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the follower side closed: the command has exited
            break
        if not chunk:
            break
        screen += chunk
    out = proc.stdout.read() if proc.stdout else b""
    os.close(leader)
    return proc.wait(timeout=60), out.decode(), screen.decode()


@pytest.mark.parametrize("command", ["drift", "verify"])
def test_a_terminal_sees_live_counts_and_a_summary_and_stdout_only_the_json(tmp_path, closed_port, command):
    path = cluster(tmp_path / "cluster.yaml", closed_port, ["a", "b", "c"])
    status, out, screen = run_with_terminal(
        [sys.executable, "-m", "gpu_provision.cli", command, "inventory.py", "--cluster", str(path), "--json"])
    assert status == 2
    doc = json.loads(out)
    assert "remaining" not in out and "done" not in out
    assert screen.startswith("\r0 done, 0 failed, 3 remaining\033[K")
    assert "\r0 done, 1 failed, 2 remaining\033[K" in screen
    assert "\r0 done, 2 failed, 1 remaining\033[K" in screen
    last = screen.replace("\r\n", "\n").rstrip("\n").split("\r")[-1]
    assert last.startswith("3 nodes: 0 done, 3 failed (") and last.endswith(" s)\033[K")
    nodes = doc["nodes"] if command == "drift" else doc
    assert len(nodes) == 3


def test_a_log_gets_only_the_summary_line(tmp_path, closed_port):
    path = cluster(tmp_path / "cluster.yaml", closed_port, ["a", "b"])
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", "inventory.py", "--cluster", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1].startswith("2 nodes: 0 done, 2 failed (")
    assert "remaining" not in proc.stderr and "\r" not in proc.stderr
    assert "nodes: 0 done" not in proc.stdout
