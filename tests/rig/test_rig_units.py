"""Rig pieces that need no root: addressing, simulated hardware, cluster file conversion, forwarder, pid files."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_provision_rig import hardware
from gpu_provision_rig.base import base_key, base_path
from gpu_provision_rig.cluster import nodes_from_cluster
from gpu_provision_rig.config import RigError, RigNode, RigPaths, check_distinct, numbered_nodes
from gpu_provision_rig.forward import Forwarder
from gpu_provision_rig.procs import read_pid, start_daemon, stop_daemon
from gpu_provision_rig.sshkeys import known_hosts_line

REPO = Path(__file__).resolve().parents[2]


def test_addresses_follow_the_loopback_index():
    node = RigNode("n7", "127.0.10.7")
    assert (node.index, node.bridge_address) == (7, "10.77.0.17")
    assert RigNode("last", "127.0.10.200").bridge_address == "10.77.0.210"


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.10.0", "127.0.10.201", "10.77.0.5", "127.0.10.x"])
def test_only_rig_loopback_addresses_are_accepted(address):
    with pytest.raises(RigError, match="is not 127.0.10.N"):
        RigNode("n", address)


def test_bad_names_and_gpu_counts_are_refused():
    with pytest.raises(RigError, match="lower-case"):
        RigNode("Node_1", "127.0.10.1")
    with pytest.raises(RigError, match="need a GPU model"):
        RigNode("n", "127.0.10.1", gpu_count=2)


def test_duplicates_are_refused():
    with pytest.raises(RigError, match="share the ssh address 127.0.10.1"):
        check_distinct([RigNode("a", "127.0.10.1"), RigNode("b", "127.0.10.1")])
    with pytest.raises(RigError, match="share the name a"):
        check_distinct([RigNode("a", "127.0.10.1"), RigNode("a", "127.0.10.2")])


def test_numbered_nodes_and_json_round_trip():
    nodes = numbered_nodes(3, "L40S", 4)
    assert [(n.name, n.ssh_address, n.gpu_model, n.gpu_count) for n in nodes] == [
        (f"node{i}", f"127.0.10.{i}", "L40S", 4) for i in (1, 2, 3)]
    assert [RigNode.from_json(json.loads(json.dumps(n.to_json()))) for n in nodes] == nodes
    trixie = numbered_nodes(1, suite="trixie")
    assert trixie[0].suite == "trixie" and RigNode.from_json(trixie[0].to_json()) == trixie[0]
    # A state file written before nodes had a release holds Debian 12 nodes.
    old = {k: v for k, v in nodes[0].to_json().items() if k != "suite"}
    assert RigNode.from_json(old).suite == "bookworm"


def test_paths_from_environment(monkeypatch):
    monkeypatch.setenv("GPU_PROVISION_RIG_DIR", "/tmp/rigstate")
    monkeypatch.setenv("GPU_PROVISION_RIG_CACHE", "/tmp/rigcache")
    paths = RigPaths.from_env()
    assert (paths.client_key, paths.known_hosts) == (Path("/tmp/rigstate/id_ed25519"),
                                                     Path("/tmp/rigstate/known_hosts"))
    monkeypatch.delenv("GPU_PROVISION_RIG_DIR")
    monkeypatch.delenv("GPU_PROVISION_RIG_CACHE")
    assert RigPaths.from_env() == RigPaths(Path("/var/tmp/gpu-provision-rig"), Path("/var/cache/gpu-provision/rig"))


def test_base_key_depends_on_the_package_set_and_the_release_only():
    assert base_key(("a", "b")) == base_key(("b", "a", "a"))
    assert base_key(("a", "b")) != base_key(("a", "b", "c"))
    assert base_key(("a", "b"), "trixie") != base_key(("a", "b"), "bookworm") == base_key(("a", "b"))
    assert base_path(Path("/c"), ("a",), "trixie").name.startswith("base-trixie-")
    with pytest.raises(RigError, match="no rig base for Debian 'sid': choose bookworm, trixie"):
        base_key(("a",), "sid")


def test_pci_ids_from_the_model_data():
    assert hardware.pci_ids("H200") == ("0x10de", "0x2335")
    assert hardware.pci_ids("T4") == ("0x10de", "0x1eb8")
    with pytest.raises(RigError, match="unknown GPU model 'H999'; known: .*H200"):
        hardware.pci_ids("H999")


def test_gpu_description_is_deterministic_per_node_and_index():
    node = RigNode("gpu-a", "127.0.10.3", "H200", 3)
    gpus = hardware.gpu_description(node)["gpus"]
    assert gpus == hardware.gpu_description(node)["gpus"]
    assert [g["pci_bus_id"] for g in gpus] == ["00000000:00:06.0", "00000000:00:07.0", "00000000:00:08.0"]
    assert len({g["uuid"] for g in gpus}) == 3
    assert all(g["uuid"].startswith("GPU-") and len(g["uuid"]) == 40 for g in gpus)
    assert all(len(g["serial"]) == 13 and g["serial"].isdigit() for g in gpus)
    assert hardware.gpu_uuid("gpu-b", 0) != gpus[0]["uuid"]
    assert hardware.gpu_description(RigNode("plain", "127.0.10.4")) == {"gpus": []}


def test_hardware_files_written_into_a_node_root(tmp_path):
    hardware.write_hardware(tmp_path, RigNode("gpu-a", "127.0.10.3", "L40S", 2))
    assert len(json.loads((tmp_path / "etc/gpu-sim/gpus.json").read_text())["gpus"]) == 2
    pci = tmp_path / "etc/gpu-sim/pci-devices"
    gpu = pci / "0000:00:07.0"
    assert [(gpu / f).read_text() for f in ("vendor", "device", "class")] == ["0x10de\n", "0x26b9\n", "0x030200\n"]
    assert "PCI_ID=10DE:26B9" in (gpu / "uevent").read_text()
    nvidia = [d.name for d in pci.iterdir() if (d / "vendor").read_text() == "0x10de\n"]
    assert sorted(nvidia) == ["0000:00:06.0", "0000:00:07.0"]


def test_rig_cluster_file_becomes_rig_nodes():
    nodes = nodes_from_cluster(REPO / "inventory" / "rig.yaml", RigPaths(Path("/var/tmp/gpu-provision-rig"),
                                                                          Path("/var/cache/gpu-provision/rig")))
    assert nodes and all(n.ssh_address.startswith("127.0.10.") for n in nodes)
    mig = {n.name: n for n in nodes}["rig-mig"]
    assert (mig.gpu_model, mig.gpu_count) == ("H200", 2)


def test_known_hosts_line_for_port_22_and_others(tmp_path):
    key = tmp_path / "k"
    key.with_suffix(".pub").write_text("ssh-ed25519 AAAAC3Nza root@n\n")
    assert known_hosts_line("127.0.10.1", key) == "127.0.10.1 ssh-ed25519 AAAAC3Nza\n"
    assert known_hosts_line("127.0.10.1", key, port=2222) == "[127.0.10.1]:2222 ssh-ed25519 AAAAC3Nza\n"


def test_daemon_pid_files(tmp_path):
    pidfile = tmp_path / "sleep.pid"
    pid = start_daemon([sys.executable, "-c", "import time; time.sleep(60)"], pidfile, tmp_path / "sleep.log")
    assert read_pid(pidfile) == pid
    assert start_daemon(["false"], pidfile, tmp_path / "other.log") == pid
    assert stop_daemon(pidfile, timeout=5)
    assert read_pid(pidfile) is None and not pidfile.exists()
    assert not stop_daemon(pidfile)


def test_pid_file_of_a_reused_pid_is_not_trusted(tmp_path):
    pidfile = tmp_path / "x.pid"
    pidfile.write_text(f"{os.getpid()} 1\n")
    assert read_pid(pidfile) is None


def _forward_once(node_alive: bool) -> bytes:
    async def scenario() -> bytes:
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write(b"SSH-2.0-echo\r\n" + await reader.read(100))
            await writer.drain()
            writer.close()

        target = await asyncio.start_server(echo, "127.0.0.1", 0)
        forwarder = Forwarder(target.sockets[0].getsockname()[:2], None)
        forwarder.node_alive = lambda: node_alive  # type: ignore[method-assign]
        front = await asyncio.start_server(forwarder.handle, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection(*front.sockets[0].getsockname()[:2])
        if node_alive:
            writer.write(b"hello")
            writer.write_eof()
        data = await asyncio.wait_for(reader.read(), 5)
        writer.close()
        front.close()
        target.close()
        return data

    return asyncio.run(scenario())


def test_forwarder_pipes_both_ways():
    assert _forward_once(node_alive=True) == b"SSH-2.0-echo\r\nhello"


def test_forwarder_closes_connections_while_the_node_is_down():
    assert _forward_once(node_alive=False) == b""


@pytest.mark.parametrize(("listen", "target", "message"), [
    ("10.77.0.1:22", "10.77.0.11:22", "is not a loopback address"),
    ("127.0.10.1:22", "192.168.1.1:22", "is outside the rig's subnets"),
])
def test_forwarder_refuses_addresses_outside_its_ranges(listen, target, message):
    proc = subprocess.run([sys.executable, "-m", "gpu_provision_rig.forward", listen, target], capture_output=True,
                          text=True, cwd=REPO, timeout=30)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_the_inotify_instance_limit_is_raised_never_lowered(tmp_path: Path) -> None:
    """Every node's systemd holds inotify instances charged to root; Debian's 128 stops about the 16th node."""
    from gpu_provision_rig.limits import ensure_inotify_instances

    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    assert ensure_inotify_instances(limit, minimum=1024) == 1024
    assert limit.read_text() == "1024\n"
    limit.write_text("4096\n")
    assert ensure_inotify_instances(limit, minimum=1024) == 4096
    assert limit.read_text() == "4096\n"  # never lowered
    assert ensure_inotify_instances(tmp_path / "absent") is None
