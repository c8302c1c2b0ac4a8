"""``verify``: run the verification agent on every node and print the fleet table (exit 1 when a node fails)."""

from __future__ import annotations

import argparse
import json
import sys

from gpu_provision.errors import GpuProvisionError
from gpu_provision.verify import table
from gpu_provision.verify.report import fleet_ok


def _expect_pair(text: str) -> tuple[str, str]:
    host, sep, path = text.partition("=")
    if not sep or not host or not path:
        raise argparse.ArgumentTypeError(f"expected HOST=FILE, got {text!r}")
    return host, path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verify`` command."""
    p = sub.add_parser("verify", help="check every GPU node against the cluster file; print a fleet table")
    p.add_argument("inventory", nargs="?", default="inventory.py",
                   help="pyinfra inventory (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print the list of reports as JSON instead of the table")
    p.add_argument("--limit", action="append", metavar="HOST", help="only this host (repeatable)")
    p.add_argument("--expect", action="append", type=_expect_pair, metavar="HOST=FILE",
                   help="use this expectations file for HOST instead of the cluster file (repeatable)")
    p.add_argument("--report-dir", help="also write one <node>.json report per node here")
    p.add_argument("--parallel", type=int, help="hosts verified at once (default: pyinfra's)")
    p.add_argument("--remote-dir", help="where the agent is put on each node (default: /var/lib/gpu-provision/verify)")
    p.add_argument("--in-cluster", action="store_true",
                   help="collect the reports of the verification DaemonSet through kubectl instead of SSH")
    p.add_argument("--kubeconfig", help="kubeconfig for --in-cluster (default: kubectl's)")
    p.add_argument("--namespace", default="gpu-provision", help="namespace of the DaemonSet (default: %(default)s)")
    p.add_argument("--manifest", action="store_true",
                   help="with --in-cluster: print the DaemonSet manifests (YAML) for the cluster file and exit")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Verify the nodes; print the table or JSON; return 0 when every node passed, else 1."""
    if args.in_cluster:
        from gpu_provision.verify import incluster

        if args.manifest:
            print(incluster.manifests_yaml(args.inventory, args.namespace))
            return 0
        reports = incluster.collect(args.namespace, args.kubeconfig, limit=args.limit)
    else:
        from gpu_provision.verify import collect

        reports = collect.run(args.inventory, limit=args.limit, expect_files=dict(args.expect or []),
                              report_dir=args.report_dir, parallel=args.parallel, remote_dir=args.remote_dir)
    if not reports:
        raise GpuProvisionError("no GPU nodes to verify (the cluster file gives the selected hosts no GPUs)")
    if args.json:
        json.dump(reports, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table.format_table(reports))
    return 0 if fleet_ok(reports) else 1
