"""``drift``: how every node differs from the cluster file, from one probe per node.

    gpu-provision drift [INVENTORY] [--cluster FILE] [--json] [--parallel N] [--connect-timeout S] [--limit NODE]...
    gpu-provision drift --in-cluster [--manifest] [--kubeconfig FILE] [--namespace NS] [--chunk-size N]

``--in-cluster`` reads the answers a DaemonSet's pods published (``--manifest`` prints that DaemonSet) with one
paged list call instead of SSH: :mod:`gpu_provision.drift.incluster`.

Parallelism and connect timeout come from the command line, else from pyinfra's ``config.py`` (as for
``pyinfra --dry``), else the connect timeout from the cluster file's ``ssh.connect_timeout``.

Exit status: 0 every node checked and in sync, 1 drift found, 2 trouble (a node not checked, a part not
compared, or a bad cluster file), as with ``diff``.
"""

from __future__ import annotations

import argparse

from gpu_provision.commands.args import (
    add_command,
    add_fleet_options,
    add_in_cluster_options,
    emit,
    progress,
    use_cluster,
)
from gpu_provision.startup import fleet_process


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``drift`` command."""
    p = add_command(
        sub, "drift", "report how each node differs from the cluster file (exit 0 in sync, 1 drift, 2 error)",
        "Compare every node with the cluster file: package versions and holds, config files (a diff of their "
        "content, secrets hidden), services, MIG layout, device permissions, Kubernetes versions and labels. "
        "One remote command per node; nothing is changed.",
        ["gpu-provision drift --cluster site/cluster.yaml",
         "gpu-provision drift --cluster site/cluster.yaml --limit gpu-01 --limit gpu-02 --json",
         "gpu-provision drift inventory.py --stage driver --stage runtime",
         "gpu-provision drift --in-cluster --manifest | kubectl apply -f -",
         "gpu-provision drift --in-cluster --kubeconfig admin.conf"],
        findings="a node differs from the cluster file", errors="a node not reached or not fully compared, "
        "or a bad cluster file")
    add_fleet_options(p, "seconds the probe may run on a node (default: the node's ssh.probe_timeout)")
    p.add_argument("--stage", action="append", default=None, metavar="STAGE",
                   help="compare only this stage (repeatable; default: every stage)")
    add_in_cluster_options(p, "compare the answers the drift DaemonSet's pods published (one list call through "
                              "kubectl) instead of probing over SSH")
    p.add_argument("--chunk-size", type=int, default=500,
                   help="with --in-cluster: pods per list page (limit/continue; default: %(default)s, as kubectl)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Check the fleet and print the report; returns the exit status."""
    use_cluster(args)
    if args.in_cluster:
        return _in_cluster(args)
    with fleet_process():
        from gpu_provision.drift import check_fleet, load_stages
        from gpu_provision.fleet import load_inventory, settings_from

        settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout, args.limit)
        stages = load_stages(args.stage)
        inventory = load_inventory(args.inventory)
    report = check_fleet(inventory, stages, settings, progress=progress())
    emit(args, report.to_json(), report.render)
    return report.exit_status


def _in_cluster(args: argparse.Namespace) -> int:
    """``--in-cluster``: print the manifests, or collect the published answers and print the same report."""
    from gpu_provision.drift import incluster, load_stages
    from gpu_provision.errors import GpuProvisionError

    if args.chunk_size < 0:
        raise GpuProvisionError("--chunk-size must be 0 (no paging) or more")
    every = load_stages()
    if args.manifest:
        import yaml

        docs = incluster.manifests_for(args.inventory, every, args.namespace, args.limit)
        emit(args, docs, lambda: yaml.safe_dump_all(docs, sort_keys=False).rstrip("\n"))
        return 0
    report = incluster.collect(args.inventory, load_stages(args.stage), every, args.namespace, args.kubeconfig,
                               args.limit, args.chunk_size)
    emit(args, report.to_json(), report.render)
    return report.exit_status


