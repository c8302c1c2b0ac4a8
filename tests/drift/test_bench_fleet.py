"""The benchmark's loopback fleet and profile parts: 1,000 hosts on distinct loopback addresses clear of the bad
hosts' addresses, limits checked before starting, CPU of a process tree with its finished children, and the
profile's grouping (built-ins charged to their callers)."""

from __future__ import annotations

import cProfile
import ipaddress
import json
import os
import pstats
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench import hotspots  # noqa: E402
from bench.fleet import MAX_HOSTS, check_limits, hosts, tree_cpu_seconds  # noqa: E402
from bench.run import REFUSING_ADDRESS, STALLED_ADDRESS, parse_args  # noqa: E402


def test_a_thousand_hosts_get_distinct_loopback_addresses_clear_of_the_bad_hosts():
    fleet = hosts(MAX_HOSTS)
    addresses = [h.address for h in fleet]
    assert MAX_HOSTS == 1000 and len(set(addresses)) == 1000 and len({h.name for h in fleet}) == 1000
    assert all(ipaddress.ip_address(a) in ipaddress.ip_network("127.0.0.0/8") for a in addresses)
    assert STALLED_ADDRESS not in addresses and REFUSING_ADDRESS not in addresses
    assert addresses[:2] == ["127.0.20.1", "127.0.20.2"] and addresses[199:201] == ["127.0.20.200", "127.0.21.1"]
    assert [h.address for h in hosts(100)] == addresses[:100]
    with pytest.raises(ValueError, match="outside 1..1000"):
        hosts(MAX_HOSTS + 1)


def test_limits_are_checked_before_a_fleet_starts():
    assert check_limits(10, parallel=40) == []
    problems = check_limits(10_000_000, parallel=40)
    assert problems and any("MiB" in p or "processes" in p or "open files" in p for p in problems)


def test_sizes_up_to_a_thousand_and_a_profile_within_them_are_accepted():
    args = parse_args(["--rig-sizes", "", "--fleet-sizes", "10,100,300,1000", "--tools", "ours", "--profile", "100"])
    assert args.rig_sizes == [] and args.fleet_sizes == [10, 100, 300, 1000] and args.profile == 100
    with pytest.raises(SystemExit):
        parse_args(["--fleet-sizes", "1001"])
    with pytest.raises(SystemExit):
        parse_args(["--fleet-sizes", "10", "--profile", "20"])


def test_cpu_of_a_process_tree_counts_children_that_already_finished():
    before = tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t<0.3: pass"],
                   check=True)
    assert tree_cpu_seconds(os.getpid()) - before >= 0.25


def busy(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        json.loads('{"a": [1, 2, 3]}')


def test_profile_groups_own_time_by_file_and_charges_built_ins_to_their_callers(tmp_path: Path):
    profiler = cProfile.Profile(time.process_time)
    profiler.enable()
    busy(0.2)
    profiler.disable()
    stats = pstats.Stats(profiler)
    totals = hotspots.grouped(stats)
    assert set(totals) == {name for name, _ in hotspots.GROUPS} | {hotspots.OTHER}
    assert totals["JSON parsing"] > 0.02
    assert sum(totals.values()) == pytest.approx(sum(row[2] for row in stats.stats.values()), rel=0.01)  # type: ignore[attr-defined]
    assert hotspots.group_of("/x/site-packages/paramiko/kex_curve25519.py") == "SSH handshake, key exchange, auth"
    assert hotspots.group_of("/x/site-packages/paramiko/packet.py") == "SSH packets: command payload and output"
    assert hotspots.group_of("/work/gpu_provision/drift/collect.py") == "gpu-provision (ours)"
    path = tmp_path / "p.pstats"
    profiler.dump_stats(str(path))
    rows = hotspots.summary(path, hosts=10)
    assert sum(float(r["share"]) for r in rows) == pytest.approx(1.0, abs=0.01)


def test_the_ssh_floor_reports_a_host_it_cannot_reach_as_not_run(tmp_path: Path):
    """``bench.floor`` (the fleet runner running ``true`` on every host) over one host on a closed loopback port:
    the host is listed as not run, no command counted, exit status 1."""
    import socket

    with socket.socket() as s:  # a port nothing listens on once this socket is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    key = tmp_path / "id"
    key.write_text("not a key\n")
    (tmp_path / "known_hosts").write_text("")
    cluster = {"version": "v1",
               "cluster": {"name": "floor", "kubernetes": {"enabled": False},
                           "ssh": {"user": "root", "key": str(key), "known_hosts": str(tmp_path / "known_hosts"),
                                   "port": port, "connect_timeout": 2}},
               "nodes": [{"name": "closed", "address": "127.0.0.1"}]}
    (tmp_path / "cluster.yaml").write_text(json.dumps(cluster))
    root = Path(__file__).resolve().parents[2]
    run = subprocess.run([sys.executable, "-m", "bench.floor", "inventory.py"], cwd=root, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "GPU_PROVISION_CLUSTER": str(tmp_path / "cluster.yaml")})
    assert run.returncode == 1, run.stderr[-2000:]
    assert json.loads(run.stdout)["nodes"] == [{"name": "closed", "commands": 0, "ok": False}]
