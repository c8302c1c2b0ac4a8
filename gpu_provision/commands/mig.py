"""``mig-assert``: read this machine's GPUs and show the MIG plan a node's layout would need, changing nothing.

Runs the probe's ``mig`` section locally (no SSH) and compares it with the node's layouts from a cluster file, like
``nvidia-mig-parted assert``: exit status 0 when every GPU has its layout, 1 when a change would be made (the plan is
printed, with the exact commands), 2 on a usage error.

Also runnable without the rest of the command line's dependencies (pyinfra): ``python3 -m gpu_provision.commands.mig
--node-file FILE --node NAME`` (needs only PyYAML and jsonschema, to read the cluster file).
"""

from __future__ import annotations

import argparse
import json
import sys

from gpu_provision.errors import GpuProvisionError
from gpu_provision.mig import install as agent_mig
from gpu_provision.mig.plan import desired_layouts, layout_drift, mig_actions
from gpu_provision.node.mig import layout
from gpu_provision.node.mig.holders import running_holders
from gpu_provision.node.mig.model import GpuLayout, fmt_placements
from gpu_provision.node.probe import mig as mig_probe
from gpu_provision.spec import catalog, load_cluster


def register(sub: argparse._SubParsersAction) -> None:
    """Add ``mig-assert``."""
    p = sub.add_parser("mig-assert", help="show the MIG plan for this machine's GPUs without applying it")
    p.add_argument("--node-file", required=True, help="cluster file that describes the node")
    p.add_argument("--node", required=True, help="node name in that file")
    p.add_argument("--json", action="store_true", help="print the comparison and plan as JSON")
    p.set_defaults(handler=mig_assert)


def expected_text(want: GpuLayout) -> str:
    """How ``mig-assert`` writes a GPU's expected layout (``none`` for MIG on without instances)."""
    return fmt_placements(want.placements) if want.enabled else "MIG disabled"


def mig_assert(args: argparse.Namespace) -> int:
    """Compare this machine's GPUs with the node's layouts; print the plan; exit 1 when it is not empty."""
    cluster = load_cluster(args.node_file)
    try:
        node = cluster.node(args.node)
    except KeyError:
        raise GpuProvisionError(f"{args.node_file}: no node named {args.node}") from None
    if not node.mig.layouts:
        raise GpuProvisionError(f"{args.node_file}: node {args.node} has no MIG layout")
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    snapshot = mig_probe.collect({"vgpu": False})
    if snapshot.get("smi_rc") != 0:
        raise GpuProvisionError(f"nvidia-smi failed: {snapshot.get('error')}")
    units = running_holders()
    actions = mig_actions(node.mig.layouts, snapshot, model, active_units=units, allow_drain=node.mig.allow_drain)
    desired = desired_layouts(node.mig.layouts, model)
    gpus = {g["index"]: g for g in snapshot["gpus"]}
    if args.json:
        print(json.dumps({
            "node": node.name,
            "gpus": {str(i): {"expected": expected_text(want), "found": layout.describe_gpu(gpus.get(i))}
                     for i, want in sorted(desired.items())},
            "drift": [str(d) for d in layout_drift(node.mig.layouts, snapshot, model)],
            "plan": [{"step": str(a), "commands": layout.commands(a)} for a in actions],
            "applier": agent_mig.apply_command(node, "apply"),
        }, indent=2))
        return 1 if actions else 0
    print(f"{node.name}: {len(snapshot['gpus'])} GPU(s) here, {len(desired)} with a layout in {args.node_file}")
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
    """``mig-assert`` on its own: ``python3 -m gpu_provision.commands.mig --node-file FILE --node NAME``."""
    parser = argparse.ArgumentParser(prog="python3 -m gpu_provision.commands.mig")
    register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["mig-assert", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.handler(args))
    except GpuProvisionError as exc:
        print(str(exc), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
