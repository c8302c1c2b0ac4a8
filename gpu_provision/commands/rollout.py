"""``rollout plan``: per node, what a rollout would change, what that disrupts, and the batch it goes in.

    gpu-provision rollout plan [INVENTORY] [--cluster FILE] [--limit NODE]... [--max-parallel N]
                               [--max-unavailable N|P%] [--json]

The changes come from one probe per node through the fleet runner (as ``drift``); the batches follow the cluster
file's ``cluster.rollout`` settings unless ``--max-parallel`` or ``--max-unavailable`` override them. Nothing is
changed. Exit status: 0 nothing to roll, 1 changes planned, 2 a node not reached or not fully compared, or a bad
cluster file.
"""

from __future__ import annotations

import argparse

from gpu_provision.commands.args import add_command, add_fleet_options, emit, progress, use_cluster


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rollout`` command."""
    p = add_command(
        sub, "rollout", "plan a rolling change: per node its changes, what they disrupt, and the batches "
        "(exit 0 nothing to roll, 1 changes planned, 2 error)",
        "Compare every node with the cluster file (one remote command per node, nothing is changed), class each "
        "change by what it disrupts (none, runtime-restart, gpu-idle, reboot) and plan the batches a rollout uses: "
        "nodes whose changes disrupt nothing all at once in batch 0, control-plane nodes alone, the others in "
        "batches of at most max_parallel nodes and max_unavailable nodes of a node group.",
        ["gpu-provision rollout plan --cluster site/cluster.yaml",
         "gpu-provision rollout plan inventory.py --max-parallel 2 --max-unavailable 50%",
         "gpu-provision rollout plan --cluster site/cluster.yaml --limit gpu-01,gpu-02 --json"],
        findings="changes are planned", errors="a node not reached or not fully compared, or a bad cluster file")
    p.add_argument("action", choices=["plan"], help="plan: show the changes, their classes and the batches")
    add_fleet_options(p, "seconds the probe may run on a node (default: 120)")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="nodes changed at once (default: the cluster file's rollout.max_parallel)")
    p.add_argument("--max-unavailable", default=None, metavar="N|P%",
                   help="nodes of a node group down at once, a count or a percentage (default: the cluster "
                        "file's rollout.max_unavailable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Plan the rollout and print it; returns the exit status."""
    # Parallel SSH runs in gevent greenlets, which need sockets patched before any connection is made.
    from gevent import monkey

    monkey.patch_all()

    from gpu_provision.commands.drift import _quiet_pyinfra
    from gpu_provision.drift import check_fleet, load_stages
    from gpu_provision.errors import GpuProvisionError
    from gpu_provision.fleet import load_inventory, settings_from
    from gpu_provision.inventory import cluster_for
    from gpu_provision.rollout.batches import parse_max_unavailable
    from gpu_provision.rollout.plan import plan_rollout

    if args.max_parallel is not None and args.max_parallel < 1:
        raise GpuProvisionError(f"--max-parallel: expected at least 1, got {args.max_parallel}")
    unavailable = None if args.max_unavailable is None else parse_max_unavailable(args.max_unavailable)
    use_cluster(args)
    settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout, args.limit)
    inventory = load_inventory(args.inventory)
    hosts = list(inventory)
    if not hosts:
        raise GpuProvisionError(f"{args.inventory}: the inventory has no hosts")
    _quiet_pyinfra()
    report = check_fleet(inventory, load_stages(), settings, progress=progress())
    plan = plan_rollout(report, cluster_for(hosts[0]), args.max_parallel, unavailable)
    emit(args, plan.to_json(), plan.render)
    return plan.exit_status

