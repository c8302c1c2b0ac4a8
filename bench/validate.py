"""Cluster-file validation against libyaml's parse of the same file, side by side in one run.

    .venv/bin/python -m bench.validate [--nodes 10000] [--repeat 5]

Writes three 10,000-node files (no MIG; a MIG layout written on every node; a MIG layout every node inherits from
its group, the file where validation has the most to do per byte parsed) and, for each, times
``yaml.load(text, Loader=yaml.CSafeLoader)`` and ``gpu_provision.spec.load_cluster`` alternately, ``--repeat``
times each. Prints the median CPU and wall seconds of each and the ratio validate / parse (the goal: at most 2).
CPU time is the figure to read on a shared machine: it does not count the time another process held the core.
Needs no root and opens no connection.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from gpu_provision.spec import load_cluster

LAYOUTS = ('{"3g.71gb": 2}', '{"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}', '{"7g.141gb": 1}', '{"1g.18gb": 7}')
HEADER = ["version: v1", "cluster:", "  name: bench", "  kubernetes: {enabled: false}", "defaults:",
          "  driver: {branch: 580}", "  container_runtime: {kind: containerd}",
          '  permissions: {group: gpu, mode: "0660"}']


def _address(i: int) -> str:
    return f"10.{i // 65536}.{i // 256 % 256}.{i % 256}"


def cluster_text(nodes: int, mig: str) -> str:
    """A cluster file of ``nodes`` 8-GPU H200 nodes; ``mig``: ``none``, ``node`` (a layout on each node's own
    entry, four layouts in turn) or ``group`` (two groups with a layout each, every node in one of them)."""
    lines = list(HEADER)
    if mig == "group":
        lines += ["groups:", "  a:", "    gpus: {model: H200, count: 8}", f"    mig: {{layout: {LAYOUTS[0]}}}",
                  "  b:", "    gpus: {model: H200, count: 8}",
                  f'    mig: {{layout: {LAYOUTS[1]}, gpus: {{"7": {{enabled: false}}}}}}']
    lines.append("nodes:")
    for i in range(nodes):
        lines += [f"  - name: gpu-{i:05d}", f"    address: {_address(i)}"]
        if mig == "group":
            lines.append(f"    group: {'ab'[i % 2]}")
            continue
        lines += ["    gpus: {model: H200, count: 8}", f"    labels: {{zone: rack-{i // 40:03d}}}"]
        if mig == "node":
            lines.append(f"    mig: {{layout: {LAYOUTS[i % len(LAYOUTS)]}}}")
    return "\n".join(lines) + "\n"


def _timed(func: object) -> tuple[float, float]:
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    func()  # type: ignore[operator]
    return time.process_time() - cpu, time.perf_counter() - wall


def measure(path: Path, repeat: int) -> dict[str, float]:
    """Median CPU and wall seconds of libyaml's parse and of validation, taken in turn ``repeat`` times."""
    text = path.read_bytes()
    runs: dict[str, list[tuple[float, float]]] = {"parse": [], "validate": []}
    for _ in range(repeat):
        runs["parse"].append(_timed(lambda: yaml.load(text, Loader=yaml.CSafeLoader)))
        runs["validate"].append(_timed(lambda: load_cluster(path)))
    out = {}
    for name, values in runs.items():
        out[f"{name}_cpu"] = statistics.median(v[0] for v in values)
        out[f"{name}_wall"] = statistics.median(v[1] for v in values)
    return out


def main(argv: list[str] | None = None) -> int:
    """Write the files, measure them, print one table."""
    parser = argparse.ArgumentParser(prog="python -m bench.validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes per file (default 10000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs of each, alternating (default 5)")
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"{args.nodes} nodes, median of {args.repeat} alternating runs, load average "
          f"{load[0]:.2f} {load[1]:.2f} {load[2]:.2f}, {os.cpu_count()} CPUs")
    print(f"{'file':<22} {'KiB':>6} {'parse cpu s':>11} {'validate cpu s':>14} {'x parse':>7} "
          f"{'parse wall s':>12} {'validate wall s':>15} {'x parse':>7}")
    with tempfile.TemporaryDirectory(prefix="bench-validate-") as work:
        for mig, label in (("none", "no MIG"), ("node", "MIG on each node"), ("group", "MIG from a group")):
            path = Path(work) / f"{mig}.yaml"
            path.write_text(cluster_text(args.nodes, mig))
            r = measure(path, args.repeat)
            print(f"{label:<22} {path.stat().st_size // 1024:>6} {r['parse_cpu']:>11.2f} {r['validate_cpu']:>14.2f} "
                  f"{r['validate_cpu'] / r['parse_cpu']:>7.2f} {r['parse_wall']:>12.2f} {r['validate_wall']:>15.2f} "
                  f"{r['validate_wall'] / r['parse_wall']:>7.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
