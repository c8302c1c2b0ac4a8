"""Runs ``gpu-provision verify``'s SSH path (the code behind the command: the agent kept on each node by digest,
one short command per node) over an inventory, every host verified against one expectations file, and prints
one JSON object: per host its report's status and the remote commands it cost.

    GPU_PROVISION_CLUSTER=cluster.yaml python -m bench.verify inventory.py expect.json [--profile FILE]

The object gains ``bench.check_cpu_s``: the CPU seconds of the run alone, without Python's start-up and imports.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from bench.ours import _cpu_seconds


def main() -> int:
    """Verify the inventory's hosts; exit 0 when every host passed, 1 when one failed, 2 when one errored."""
    from gpu_provision.startup import fleet_process

    with fleet_process():  # as gpu-provision verify starts
        from gpu_provision.fleet import FleetSettings, load_inventory, run_fleet
        from gpu_provision.verify.collect import host_report, use_expectations, verify_host

    parser = argparse.ArgumentParser(prog="bench.verify")
    parser.add_argument("inventory")
    parser.add_argument("expect")
    parser.add_argument("--profile", help="write cProfile statistics of the run to this file")
    args = parser.parse_args()
    inventory = load_inventory(args.inventory)
    use_expectations(inventory, {host.name: args.expect for host in inventory}, args.inventory)
    profiler = None
    before = _cpu_seconds()
    if args.profile:
        import cProfile

        profiler = cProfile.Profile(time.process_time)
        profiler.enable()
    run = run_fleet(inventory, verify_host, FleetSettings(command_timeout=None),
                    failed=lambda report: report is not None and report["status"] != "pass")
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    nodes = []
    for result in run.hosts:
        report = host_report(result) or {}
        first = next((f"{c['id']}: {c.get('reason', '')}" for c in report.get("checks", [])
                      if c["status"] == "fail"), report.get("error", ""))
        nodes.append({"name": result.name, "status": report.get("status", "none"), "commands": result.commands,
                      "summary": report.get("summary"), "first_problem": first})
    statuses = {n["status"] for n in nodes}
    status = 0 if statuses == {"pass"} else 2 if statuses - {"pass", "fail"} else 1
    print(json.dumps({"nodes": nodes, "seconds": round(run.seconds, 3), "exit_status": status,
                      "bench": {"check_cpu_s": round(_cpu_seconds() - before, 3)}}))
    return status


if __name__ == "__main__":
    sys.exit(main())
