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
    p.add_argument("--parallel", type=int,
                   help="hosts verified at once (default: the config file's, else pyinfra's: 20 per CPU core)")
    p.add_argument("--config", default="config.py",
                   help="pyinfra config file whose PARALLEL and CONNECT_TIMEOUT apply (default: %(default)s, if present)")
    p.add_argument("--connect-timeout", type=float, default=None,
                   help="seconds to wait for a node's SSH connection and login (default: the config file's, "
                        "else the largest ssh.connect_timeout in the cluster file)")
    p.add_argument("--command-timeout", type=float, default=None,
                   help="seconds each remote command (upload, agent run) may take (default: no limit)")
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
        from gpu_provision.fleet import settings_from
        from gpu_provision.verify import collect

        settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout,
                                 args.limit or (), default_command_timeout=None)
        _quiet_pyinfra()
        reports = collect.run(args.inventory, settings, expect_files=dict(args.expect or []),
                              report_dir=args.report_dir, remote_dir=args.remote_dir)
    if not reports:
        raise GpuProvisionError("no GPU nodes to verify (the cluster file gives the selected hosts no GPUs)")
    if args.json:
        json.dump(reports, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(table.format_table(reports))
    return 0 if fleet_ok(reports) else 1


def _quiet_pyinfra() -> None:
    # pyinfra logs every operation on every host; the table (or JSON) says what matters, warnings still show.
    import logging

    logging.getLogger("pyinfra").setLevel(logging.WARNING)
