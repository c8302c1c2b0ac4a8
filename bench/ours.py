"""Runs gpu-provision's drift engine (the code behind ``gpu-provision drift``) with the benchmark workload as
its only stage, and prints the JSON report.

    GPU_PROVISION_CLUSTER=cluster.yaml python -m bench.ours inventory.py workload.json [--parallel N]
"""

from __future__ import annotations

import argparse
import json
import sys


def main() -> int:
    """Check the inventory against the workload; exit status as ``gpu-provision drift``."""
    from gevent import monkey

    monkey.patch_all()
    import logging

    from bench.workload import Workload
    from gpu_provision.drift import check_fleet
    from gpu_provision.fleet import FleetSettings, load_inventory

    parser = argparse.ArgumentParser(prog="bench.ours")
    parser.add_argument("inventory")
    parser.add_argument("workload")
    parser.add_argument("--parallel", type=int, default=0)
    args = parser.parse_args()
    for name in ("pyinfra", "paramiko"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    with open(args.workload, encoding="utf-8") as f:
        workload = Workload.from_json(json.load(f))
    report = check_fleet(load_inventory(args.inventory), [workload.stage()], FleetSettings(parallel=args.parallel))
    print(json.dumps(report.to_json()))
    return report.exit_status


if __name__ == "__main__":
    sys.exit(main())
