"""``verify``: run the verification agent on every GPU node and print the fleet table.

Exit status: 0 every node passed, 1 a check failed on some node, 2 a node not reached or its agent gave no usable
report (or a bad cluster file), as ``drift`` counts them.
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
from gpu_provision.errors import GpuProvisionError
from gpu_provision.startup import fleet_process
from gpu_provision.verify import table
from gpu_provision.verify.report import fleet_status


def _expect_pair(text: str) -> tuple[str, str]:
    host, sep, path = text.partition("=")
    if not sep or not host or not path:
        raise argparse.ArgumentTypeError(f"expected HOST=FILE, got {text!r}")
    return host, path


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``verify`` command."""
    p = add_command(
        sub, "verify", "check every GPU node against the cluster file; print a fleet table",
        "Run the verification agent on every GPU node with that node's expectations (from the cluster file): "
        "driver, GPUs, MIG layout, device permissions, CUDA in a container; print one line per node. Each node "
        "keeps the agent by version in a root-only directory, so it is sent once per version and a run is one "
        "short command per node. Nothing else on the node is changed.",
        ["gpu-provision verify --cluster site/cluster.yaml",
         "gpu-provision verify --cluster site/cluster.yaml --limit gpu-01,gpu-02 --report-dir reports/",
         "gpu-provision verify --in-cluster --json"],
        findings="a check failed on a node", errors="a node not reached or its agent failed, or a bad cluster file")
    add_fleet_options(p, "seconds each remote command (upload, agent run) may take (default: no limit)")
    p.add_argument("--expect", action="append", type=_expect_pair, metavar="HOST=FILE",
                   help="use this expectations file for HOST instead of the cluster file (repeatable)")
    p.add_argument("--report-dir", help="also write one <node>.json report per node here")
    p.add_argument("--remote-dir", help="the root-only directory (mode 0700) where each node keeps the agent by "
                   "version and runs it (default: /var/lib/gpu-provision/agent)")
    p.add_argument("--keep-node-files", action="store_true",
                   help="leave each run's expectations and report on the node (a private run-* directory in the "
                        "agent's directory, named on stderr); by default they are removed when the run ends")
    add_in_cluster_options(p, "collect the reports of the verification DaemonSet through kubectl instead of SSH")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Verify the nodes; print the table or JSON; return 0 when every node passed, 1 on a failed check, 2 when a
    node could not be verified."""
    use_cluster(args)
    if args.in_cluster:
        from gpu_provision.verify import incluster

        if args.manifest:
            import yaml

            text = incluster.manifests_yaml(args.inventory, args.namespace)
            emit(args, list(yaml.safe_load_all(text)), text)
            return 0
        reports = incluster.collect(args.namespace, args.kubeconfig, limit=args.limit)
    else:
        with fleet_process(pyinfra_warnings=True):
            from gpu_provision.fleet import settings_from
            from gpu_provision.verify import collect

        settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout,
                                 args.limit)
        reports = collect.run(args.inventory, settings, expect_files=dict(args.expect or []),
                              report_dir=args.report_dir, remote_dir=args.remote_dir, progress=progress(),
                              keep=args.keep_node_files)
    if not reports:
        raise GpuProvisionError("no GPU nodes to verify (the cluster file gives the selected hosts no GPUs)")
    emit(args, reports, lambda: table.format_table(reports, table.terminal_width()))
    return fleet_status(reports)


