"""The floor under any drift check that opens one SSH connection per host: the fleet runner behind
``gpu-provision drift`` (same start-up, connection settings and parallelism) running ``true`` on every host, and
nothing else. What this costs, the controller's and the hosts' CPU included, no check over fresh connections can
go below; the bench shows it beside the drift so a ratio goal can be read against it.

    GPU_PROVISION_CLUSTER=cluster.yaml python -m bench.floor inventory.py

Prints ``{"nodes": [{"name", "commands", "ok"}...]}``; exit status 0 when every host ran it.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    """Run ``true`` once on every host of the inventory."""
    from gpu_provision.startup import fleet_process

    with fleet_process():  # as gpu-provision drift starts
        from gpu_provision.fleet import FleetSettings, Reached, load_inventory, run_fleet

        inventory = load_inventory(sys.argv[1])

    def work(reached: Reached) -> bool:
        ok, _ = reached.host.run_shell_command("true")
        return bool(ok)

    run = run_fleet(inventory, work, FleetSettings())
    nodes = [{"name": r.name, "commands": r.commands, "ok": bool(r.value)} for r in run.hosts]
    print(json.dumps({"nodes": nodes, "seconds": run.seconds}))
    return 0 if all(n["ok"] for n in nodes) else 1


if __name__ == "__main__":
    sys.exit(main())
