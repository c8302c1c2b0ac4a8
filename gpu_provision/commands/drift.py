"""``drift``: how every node differs from the cluster file, from one probe per node.

    gpu-provision drift inventory.py [--json] [--parallel N] [--connect-timeout S] [--limit NODE ...]

Parallelism and connect timeout come from the command line, else from pyinfra's ``config.py`` (as for
``pyinfra --dry``), else the connect timeout from the cluster file's ``ssh.connect_timeout``.

Exit status: 0 every node checked and in sync, 1 drift found, 2 trouble (a node not checked, a part not
compared, or a bad cluster file), as with ``diff``.
"""

from __future__ import annotations

import argparse
import json
import os


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``drift`` command."""
    p = sub.add_parser(
        "drift",
        help="report how each node differs from the cluster file (exit 0 in sync, 1 drift, 2 error)",
        description="Compare every node with the cluster file: package versions and holds, config files, "
                    "services, MIG layout, device permissions, Kubernetes versions and labels. One remote command "
                    "per node. Exit 0 in sync, 1 drift, 2 a node not checked or another error.",
    )
    p.add_argument("inventory", nargs="?", default="inventory.py", help="pyinfra inventory file (default: %(default)s)")
    p.add_argument("--cluster", help="cluster file (sets GPU_PROVISION_CLUSTER for the inventory)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--config", default="config.py",
                   help="pyinfra config file whose PARALLEL and CONNECT_TIMEOUT apply (default: %(default)s, if present)")
    p.add_argument("--parallel", type=int, default=0,
                   help="nodes checked at once (default: the config file's, else pyinfra's: 20 per CPU core)")
    p.add_argument("--connect-timeout", type=float, default=None,
                   help="seconds to wait for a node's SSH connection and login (default: the config file's, "
                        "else the largest ssh.connect_timeout in the cluster file)")
    p.add_argument("--command-timeout", type=float, default=None,
                   help="seconds the probe may run on a node (default: 120)")
    p.add_argument("--limit", nargs="+", default=(), metavar="NODE", help="check only these nodes")
    p.add_argument("--stage", action="append", default=None, metavar="STAGE",
                   help="compare only this stage (repeatable; default: every stage)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Check the fleet and print the report; returns the exit status."""
    # Parallel SSH runs in gevent greenlets, which need sockets patched before any connection is made.
    from gevent import monkey

    monkey.patch_all()

    from gpu_provision.drift import check_fleet, load_stages
    from gpu_provision.errors import GpuProvisionError
    from gpu_provision.fleet import load_inventory, settings_from

    if not os.path.exists(args.inventory):
        raise GpuProvisionError(f"{args.inventory}: no such inventory file")
    if args.cluster:
        os.environ["GPU_PROVISION_CLUSTER"] = args.cluster
    settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout, args.limit)
    stages = load_stages(args.stage)
    _quiet_pyinfra()
    report = check_fleet(load_inventory(args.inventory), stages, settings)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(report.render())
    return report.exit_status


def _quiet_pyinfra() -> None:
    # pyinfra logs every connect and fact, paramiko a traceback per refused login; the report says what matters.
    import logging

    for name in ("pyinfra", "paramiko"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
