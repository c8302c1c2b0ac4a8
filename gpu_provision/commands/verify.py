"""``verify``: run the verification agent on every GPU node and print the fleet table.

Exit status: 0 every node passed, 1 a check failed on some node, 2 a node not reached or its agent gave no usable
report (or a bad cluster file), as ``drift`` counts them.
"""

from __future__ import annotations

import argparse
from typing import Any

from gpu_provision.commands.args import (
    add_command,
    add_fleet_options,
    add_in_cluster_options,
    emit,
    progress,
    use_cluster,
)
from gpu_provision.errors import GpuProvisionError
from gpu_provision.verify import table
from gpu_provision.verify.report import fleet_status

#: The variable naming this machine's node in the cluster file (as :data:`gpu_provision.inventory.NODE_ENV`).
NODE_ENV = "GPU_PROVISION_NODE"
#: The inventory naming the machine the command runs on, verified without SSH or pyinfra (see :func:`run_local`).
LOCAL = "@local"


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
         "gpu-provision verify --in-cluster --json",
         "gpu-provision verify --cluster site/cluster.yaml --workload --replicas 2 --shm-size 8Gi"],
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
    _add_workload_options(p)
    p.set_defaults(handler=run)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return value


def _size(text: str) -> str:
    from gpu_provision.verify.workload import quantity_bytes

    try:
        quantity_bytes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected seconds above 0, got {text!r}")
    return value


def _add_workload_options(p: argparse.ArgumentParser) -> None:
    """``--workload`` and its settings (defaults from :mod:`gpu_provision.verify.workload`)."""
    from gpu_provision.verify import workload

    p.add_argument("--workload", action="store_true",
                   help="run a GPU workload through Kubernetes instead of the agent: per GPU node a Deployment "
                        "whose pods ask for GPUs as users' pods do (nvidia.com/gpu, or a ResourceClaim under DRA), "
                        "mount /dev/shm as a memory emptyDir and run the CUDA probe; uses kubectl with "
                        "--kubeconfig in --namespace, and deletes what it made (with --manifest: print it)")
    p.add_argument("--replicas", type=_positive, default=workload.DEFAULT_REPLICAS,
                   help="with --workload: pods per node (default: %(default)s)")
    p.add_argument("--gpus", type=_positive, default=None,
                   help="with --workload: whole GPUs each pod asks for (default: all of its node's; a shared GPU "
                        "or a MIG device is asked for once)")
    p.add_argument("--shm-size", type=_size, default=workload.DEFAULT_SHM,
                   help="with --workload: size limit of each pod's memory-backed /dev/shm (default: %(default)s)")
    p.add_argument("--workload-timeout", type=_seconds, default=workload.DEFAULT_TIMEOUT_S, metavar="SECONDS",
                   help="with --workload: how long to wait for every pod's probe (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    """Verify the nodes; print the table or JSON; return 0 when every node passed, 1 on a failed check, 2 when a
    node could not be verified."""
    use_cluster(args)
    if args.workload:
        return run_workload(args)
    if args.in_cluster:
        from gpu_provision.verify import incluster

        if args.manifest:
            import yaml

            text = incluster.manifests_yaml(args.inventory, args.namespace)
            emit(args, list(yaml.safe_load_all(text)), text)
            return 0
        reports = incluster.collect(args.namespace, args.kubeconfig, limit=args.limit)
    elif args.inventory == LOCAL and not args.limit:
        reports = run_local(args)
    else:
        from gpu_provision.startup import fleet_process

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


def run_workload(args: argparse.Namespace) -> int:
    """``verify --workload``: the workload on every Kubernetes GPU node of the cluster file (``--limit``: those
    named); the manifests with ``--manifest``; else the fleet table, exit status as ``verify``'s."""
    from gpu_provision.commands.args import cluster_file
    from gpu_provision.spec import load_cluster
    from gpu_provision.verify import workload

    if args.in_cluster:
        raise GpuProvisionError("--workload and --in-cluster are two different runs: give one")
    cluster = load_cluster(cluster_file(args))
    found = workload.run(cluster, args.namespace, args.kubeconfig, limit=args.limit, replicas=args.replicas,
                         shm=args.shm_size, gpus=args.gpus, timeout_s=args.workload_timeout, show=progress(),
                         manifest_only=args.manifest)
    if args.manifest:
        import yaml

        emit(args, found, yaml.safe_dump_all(found, sort_keys=False))
        return 0
    if not found:
        raise GpuProvisionError("no Kubernetes GPU nodes to run the workload on")
    emit(args, found, lambda: table.format_table(found, table.terminal_width()))
    return fleet_status(found)


def run_local(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``verify @local``: the agent run on this machine as the fleet runner runs it on a node, without the runner.

    The same short command (:func:`gpu_provision.verify.agent.run_command`: the agent kept by digest, installed on
    a miss) runs under ``sh -c`` as pyinfra's local connector runs it, and its output is read into the same report.
    Loading pyinfra, paramiko and gevent for one machine cost more than the agent's own checks, so this path
    imports none of them (nor jsonschema, for a valid cluster file and report). The node is ``GPU_PROVISION_NODE``
    of the cluster file, as for ``pyinfra @local``; ``--expect @local=FILE`` replaces its expectations.
    """
    import json
    import os
    import subprocess

    from gpu_provision.hostcommand import STATUS_MARK, outcome
    from gpu_provision.verify import agent
    from gpu_provision.verify.agentrun import AgentRun
    from gpu_provision.verify.report import report_from_run

    expectations = _local_expectations(dict(args.expect or []))
    if expectations is None:
        return []
    show = progress()
    show(0, 0, 1)
    cache_dir = args.remote_dir or agent.AGENT_CACHE

    def run(command: str, stdin: str | None = None) -> AgentRun:
        ran = AgentRun()
        try:
            done = subprocess.run(["sh", "-c", command], input=stdin, capture_output=True, text=True,
                                  timeout=args.command_timeout)
        except subprocess.TimeoutExpired:
            ran.complete, ran.stderr_lines = True, [f"timed out after {args.command_timeout} s"]
            ran.failure = f"the agent's command timed out after {args.command_timeout} s"
            return ran
        ran.complete, ran.succeeded, ran.stdout = True, done.returncode == 0, done.stdout
        ran.stderr_lines = done.stderr.splitlines()
        if done.returncode:
            # Worded as every failed host command is: the command, its exit status, its last lines.
            ran.failure = outcome(command, False, done.stdout.splitlines(),
                                  [*ran.stderr_lines, f"{STATUS_MARK}{done.returncode}"]).failure
        return ran

    ran = run(agent.run_command(expectations, args.keep_node_files, cache_dir))
    if ran.succeeded and agent.is_miss(ran.stdout):
        script, data = agent.install_command(cache_dir)
        installed = run(script, data)
        ran = run(agent.run_command(expectations, args.keep_node_files, cache_dir)) if installed.succeeded else installed
        if ran.succeeded and agent.is_miss(ran.stdout):
            ran.stdout, ran.succeeded = "", False
            ran.stderr_lines = [f"the agent was installed but {cache_dir} is not root's alone (mode 0700)"]
    report = report_from_run(LOCAL, ran)
    if args.report_dir:
        os.makedirs(args.report_dir, exist_ok=True)
        with open(os.path.join(args.report_dir, f"{LOCAL}.json"), "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    passed = report["status"] == "pass"
    show(int(passed), int(not passed), 1)
    return [report]


def _local_expectations(expect_files: dict[str, str]) -> str | None:
    """This machine's expectations JSON (``--expect @local=FILE``, else its node of the cluster file), or None for
    a node the cluster file gives no GPUs; worded as :func:`gpu_provision.verify.expect.expectations_for_host`."""
    import os

    from gpu_provision.spec import cluster_file_from_env, load_cluster
    from gpu_provision.verify.expect import from_node

    unknown = sorted(set(expect_files) - {LOCAL})
    if unknown:
        raise GpuProvisionError(f"--expect {unknown[0]}=...: no host {unknown[0]!r} in {LOCAL}")
    if LOCAL in expect_files:
        path = os.path.abspath(expect_files[LOCAL])
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise GpuProvisionError(f"{LOCAL}: cannot read expectations {path}: {exc}") from None
    name = os.environ.get(NODE_ENV, "")
    if not name:
        raise GpuProvisionError(f"{LOCAL}: set {NODE_ENV} to the node this host is in the cluster file")
    cluster = load_cluster(cluster_file_from_env())
    try:
        node = cluster.node(name)
    except KeyError:
        raise GpuProvisionError(f"{cluster.source}: no node named '{name}'") from None
    if not node.has_gpus:
        return None
    k8s = cluster.kubernetes
    return from_node(node, k8s.enabled, k8s.dra, k8s.node_feature_discovery).to_json()
