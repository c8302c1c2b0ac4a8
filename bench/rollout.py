"""Rollout timing on the rig: wall time of ``gpu-provision rollout`` by batch size, and how long each node is out of
service (cordoned until uncordoned after verification).

    flock /var/lock/gpu-provision-rig-use.lock .venv/bin/python -m bench.rollout [--sizes 1,2,4] [--driver]
                                                                                  [--keep-rig-nodes]

Needs root, like the test rig. Brings up a Kubernetes cluster on the rig (``brl-cp`` and four GPU nodes
``brl-g1``..``brl-g4`` with one simulated H200 each, on 127.0.10.116..120), provisions it (driver 580.126.09, MIG
layout A; stages preflight, driver, permissions, mig, kubernetes), then for each batch size N rolls a MIG layout
change (A to B, then back: class gpu-idle, no reboot) with ``--max-parallel N --max-unavailable N``, and with
``--driver`` the driver change 580.126.09 to 580.159.04 (with its reboot) at the last size. No GPU job runs (the
wait is zero). Prints one Markdown table; the nodes are removed at the end unless ``--keep-rig-nodes``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
STAGES = "preflight,driver,permissions,mig,kubernetes"
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"
A = {"3g.71gb": 2}
B = {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
OLD, NEW = "580.126.09", "580.159.04"


def nodes() -> list[Any]:
    """The bench's rig nodes: a control plane and four one-GPU nodes."""
    from gpu_provision_rig.config import RigNode

    return [RigNode("brl-cp", "127.0.10.116")] + [RigNode(f"brl-g{i}", f"127.0.10.{116 + i}", "H200", 1)
                                                   for i in range(1, 5)]


def cluster_doc(rig: Any, rig_nodes: list[Any], driver: str, layout: dict[str, int]) -> dict[str, Any]:
    """The cluster file: the rig test's (tests/rig/test_rollout.py) with the bench's nodes."""
    sys.path.insert(0, str(REPO / "tests" / "rig"))
    from test_rollout import cluster_doc as rig_doc

    doc: dict[str, Any] = rig_doc(rig, rig_nodes, driver, layout)
    doc["cluster"]["rollout"]["wait_for_jobs"] = {"timeout": 0}
    return doc


def rollout(work: Path, env: dict[str, str], size: int) -> tuple[float, dict[str, Any]]:
    """One ``gpu-provision rollout --json`` with batch size ``size``: its wall time and report."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "rollout", str(REPO / "inventory.py"), "--json",
                           "--poll", "1", "--max-parallel", str(size), "--max-unavailable", str(size),
                           "--report-dir", str(work / "reports")], capture_output=True, text=True, env=env,
                          cwd=work, timeout=3000)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"rollout (size {size}) exited {proc.returncode}:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    return wall, json.loads(proc.stdout)


def row(change: str, size: int, wall: float, doc: dict[str, Any]) -> str:
    """A table row: change, batch size, batches, wall time, per-node unavailable time (mean, max)."""
    rolled = [n for n in doc["nodes"] if n["batch"] is not None and n["batch"] > 0]
    down = [n["unavailable_s"] for n in rolled]
    return (f"| {change} | {size} | {len([b for b in doc['batches'] if b['index'] > 0])} | {len(rolled)} | "
            f"{wall:.1f} | {doc['seconds']:.1f} | {statistics.mean(down):.1f} | {max(down):.1f} |")


def main(argv: list[str] | None = None) -> int:
    """Provision, roll, print the table."""
    from gpu_provision_rig.lifecycle import Rig
    from gpu_provision_rig.mirror import build_mirror

    parser = argparse.ArgumentParser(prog="python -m bench.rollout", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="1,2,4", help="batch sizes (max_parallel = max_unavailable)")
    parser.add_argument("--driver", action="store_true", help="also roll the driver change at the last size")
    parser.add_argument("--keep-rig-nodes", action="store_true", help="leave the nodes running at the end")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    rig, rig_nodes = Rig(), nodes()
    work = Path(tempfile.mkdtemp(prefix="bench-rollout-"))
    cluster = work / "cluster.json"
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "GPU_PROVISION_STAGES": STAGES}
    lines = ["| change | batch size | batches | nodes | wall s | rollout s | unavailable s per node (mean) | "
             "(max) |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    try:
        build_mirror(rig.paths.mirror)
        rig.up(rig_nodes)
        for node in rig_nodes:
            rig.reset_node(node.name)
        for node in rig_nodes[1:]:
            rig.node_exec(node.name, ["sh", "-c", HEADERS])
        cluster.write_text(json.dumps(cluster_doc(rig, rig_nodes, OLD, A)))
        started = time.monotonic()
        prov = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(REPO / "inventory.py"),
                               str(REPO / "deploys" / "gpu_node.py")], capture_output=True, text=True, env=env,
                              cwd=work, timeout=3000)
        if prov.returncode != 0:
            raise SystemExit(f"provisioning failed:\n{prov.stdout[-4000:]}{prov.stderr[-2000:]}")
        print(f"provisioned {len(rig_nodes)} nodes in {time.monotonic() - started:.1f}s", file=sys.stderr)
        layout = A
        for size in sizes:
            layout = B if layout is A else A
            cluster.write_text(json.dumps(cluster_doc(rig, rig_nodes, OLD, layout)))
            wall, doc = rollout(work, env, size)
            lines.append(row("MIG layout " + ("A→B" if layout is B else "B→A"), size, wall, doc))
            print(lines[-1], file=sys.stderr)
        if args.driver:
            cluster.write_text(json.dumps(cluster_doc(rig, rig_nodes, NEW, layout)))
            wall, doc = rollout(work, env, sizes[-1])
            lines.append(row(f"driver {OLD}→{NEW} (reboot)", sizes[-1], wall, doc))
    finally:
        if not args.keep_rig_nodes:
            rig.remove([n.name for n in rig_nodes])
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
