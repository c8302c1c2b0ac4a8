"""Benchmark nodes on the test rig: ``bench1`` .. ``bench6`` on 127.0.10.101 .. 106, added to whatever the rig
already runs (other nodes are left alone), brought to the workload, and powered off afterwards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpu_provision_rig.config import RigError, RigNode
from gpu_provision_rig.lifecycle import Rig

FIRST_INDEX = 101
MAX_NODES = 6


def bench_nodes(count: int) -> list[RigNode]:
    """The first ``count`` benchmark nodes."""
    if not 1 <= count <= MAX_NODES:
        raise ValueError(f"rig benchmark uses 1..{MAX_NODES} nodes, not {count}")
    return [RigNode(f"bench{i}", f"127.0.10.{FIRST_INDEX + i - 1}") for i in range(1, count + 1)]


def ensure(count: int, converge: str) -> tuple[list[RigNode], Path, Path]:
    """Bring up ``count`` benchmark nodes and converge them; returns the nodes, client key and known_hosts."""
    rig = Rig()
    nodes = bench_nodes(count)
    rig.up(nodes)

    def converge_one(node: RigNode) -> None:
        done = rig.node_exec(node.name, ["sh", "-c", converge], timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"converging {node.name} failed: {done.stderr.strip()[-500:]}")

    with ThreadPoolExecutor(max_workers=count) as pool:
        list(pool.map(converge_one, nodes))
    return nodes, rig.paths.client_key, rig.paths.known_hosts


def base_root() -> Path:
    """The rig's Debian base image (built by the rig if it is not there yet)."""
    from gpu_provision_rig.base import ensure_base

    return Path(ensure_base(Rig().paths.cache))


def power_off(nodes: list[RigNode]) -> None:
    """Power the benchmark nodes off (the next run boots them fresh); nodes already down are skipped."""
    rig = Rig()
    for node in nodes:
        try:
            rig.kill_node(node.name)
        except RigError:
            continue
