"""``mig-assert``: read this machine's GPUs and show the MIG plan a node's layout would need, changing nothing.

Runs the probe's ``mig`` section locally (no SSH) and compares it with the node's layouts from a cluster file, like
``nvidia-mig-parted assert``: exit status 0 when every GPU has its layout, 1 when a change would be made (the plan is
printed, with the exact commands), 2 on an error. The cluster file is ``--cluster FILE`` (``--node-file`` is the older
spelling), else ``GPU_PROVISION_CLUSTER``, else ``./cluster.yaml``.

Also runnable without the rest of the command line's dependencies (pyinfra): ``python3 -m gpu_provision.commands.mig
--cluster FILE --node NAME`` (needs only PyYAML to read a valid cluster file; jsonschema words the problems of one that is not).
"""

from __future__ import annotations

import argparse
import json
import sys

from gpu_provision.commands.args import add_cluster, add_command, cluster_file
from gpu_provision.errors import GpuProvisionError
from gpu_provision.mig import install as agent_mig
from gpu_provision.mig.plan import layout_drift, mig_actions
from gpu_provision.node.mig import layout
from gpu_provision.node.mig.holders import running_holders
from gpu_provision.node.mig.model import GpuLayout, fmt_placements
from gpu_provision.node.probe import mig as mig_probe
from gpu_provision.spec import load_cluster


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mig-assert``."""
    p = add_command(
        sub, "mig-assert", "show the MIG plan for this machine's GPUs without applying it",
        "Read this machine's GPUs (nvidia-smi, locally, no SSH) and compare them with the MIG layouts the cluster "
        "file gives the node NAME, like 'nvidia-mig-parted assert': per GPU the expected and found layout, and the "
        "plan with the exact commands a deploy would run. Nothing is changed.",
        ["gpu-provision mig-assert --cluster site/cluster.yaml --node gpu-01",
         "python3 -m gpu_provision.commands.mig --cluster cluster.yaml --node gpu-01 --json"],
        findings="a GPU does not have its layout (the plan is not empty)",
        errors="no such node, no MIG layout, nvidia-smi failed, or a bad cluster file")
    add_cluster(p, "--node-file")
    p.add_argument("--node", required=True, metavar="NAME", help="this machine's node name in the cluster file")
    p.set_defaults(handler=mig_assert)


def expected_text(want: GpuLayout) -> str:
    """How ``mig-assert`` writes a GPU's expected layout (``none`` for MIG on without instances)."""
    return fmt_placements(want.placements) if want.enabled else "MIG disabled"


def mig_assert(args: argparse.Namespace) -> int:
    """Compare this machine's GPUs with the node's layouts; print the plan; exit 1 when it is not empty."""
    path = cluster_file(args)
    cluster = load_cluster(path)
    try:
        node = cluster.node(args.node)
    except KeyError:
        raise GpuProvisionError(f"{path}: no node named {args.node}") from None
    if not node.mig.layouts:
        raise GpuProvisionError(f"{path}: node {args.node} has no MIG layout")
    snapshot = mig_probe.collect({"vgpu": False})
    if snapshot.get("smi_rc") != 0:
        raise GpuProvisionError(f"nvidia-smi failed: {snapshot.get('error')}")
    units = running_holders()
    desired = node.mig.planned
    plugin = agent_mig.plugin_for(cluster)
    actions = mig_actions(desired, snapshot, active_units=units, allow_drain=node.mig.allow_drain, plugin=plugin)
    gpus = {g["index"]: g for g in snapshot["gpus"]}
    if args.json:
        print(json.dumps({
            "node": node.name,
            "gpus": {str(i): {"expected": expected_text(want), "found": layout.describe_gpu(gpus.get(i))}
                     for i, want in sorted(desired.items())},
            "drift": [str(d) for d in layout_drift(desired, snapshot)],
            "plan": [{"step": str(a), "commands": layout.commands(a)} for a in actions],
            "applier": agent_mig.apply_command(node, "apply", plugin),
        }, indent=2))
        return 1 if actions else 0
    print(f"{node.name}: {len(snapshot['gpus'])} GPU(s) here, {len(desired)} with a layout in {path}")
    for index, want in sorted(desired.items()):
        print(f"  GPU {index}: expected {expected_text(want)}")
        print(f"  GPU {index}: found    {layout.describe_gpu(gpus.get(index))}")
    if not actions:
        print("every GPU has its layout: nothing to do")
        return 0
    print("plan (not applied):")
    for n, action in enumerate(actions, 1):
        print(f"  {n:>2}. {action}")
        for argv in layout.commands(action):
            print("        $ " + " ".join(argv))
    return 1


def main(argv: list[str] | None = None) -> int:
    """``mig-assert`` on its own: ``python3 -m gpu_provision.commands.mig --cluster FILE --node NAME``; an error
    is one line, or the JSON error object under ``--json``, as from ``gpu-provision``."""
    parser = argparse.ArgumentParser(prog="python3 -m gpu_provision.commands.mig")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mig-assert", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.handler(args))
    except GpuProvisionError as exc:
        if args.json:
            print(json.dumps({"error": {"message": str(exc), "kind": "error"}}))
        else:
            print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
