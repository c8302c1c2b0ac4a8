"""Runs gpu-provision's drift engine (the code behind ``gpu-provision drift``) with the benchmark workload as
its only stage, and prints the JSON report.

    GPU_PROVISION_CLUSTER=cluster.yaml python -m bench.ours inventory.py workload.json [--parallel N]
        [--profile FILE]

``--profile FILE`` runs the check under cProfile, timed by this process's CPU clock, and writes its statistics to
FILE (``bench.hotspots`` groups them). The report gains ``bench.check_cpu_s``: the CPU seconds of the check alone,
without Python's start-up and imports, which every run pays once whatever the fleet's size.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time


def main() -> int:
    """Check the inventory against the workload; exit status as ``gpu-provision drift``."""
    from gpu_provision.startup import fleet_process

    with fleet_process():  # as gpu-provision drift starts
        from bench.workload import Workload
        from gpu_provision.drift import check_fleet
        from gpu_provision.fleet import FleetSettings, load_inventory

        parser = argparse.ArgumentParser(prog="bench.ours")
        parser.add_argument("inventory")
        parser.add_argument("workload")
        parser.add_argument("--parallel", type=int, default=0)
        parser.add_argument("--profile", help="write cProfile statistics of the check to this file")
        args = parser.parse_args()
        with open(args.workload, encoding="utf-8") as f:
            workload = Workload.from_json(json.load(f))
        inventory = load_inventory(args.inventory)
    profiler = None
    before = _cpu_seconds()
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    report = check_fleet(inventory, [workload.stage()], FleetSettings(parallel=args.parallel))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    print(json.dumps({**report.to_json(), "bench": {"check_cpu_s": round(_cpu_seconds() - before, 3)}}))
    return report.exit_status


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


if __name__ == "__main__":
    sys.exit(main())
