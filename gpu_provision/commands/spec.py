"""``validate``, ``plan``, ``mig-plan`` and ``export``: commands that read the cluster file and touch no node."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

import yaml

from gpu_provision.errors import GpuProvisionError, MigLayoutError
from gpu_provision.spec import catalog, load_cluster, mig, migparted
from gpu_provision.spec.model import Cluster, Node


def register(sub: argparse._SubParsersAction) -> None:
    """Add the spec commands."""
    p = sub.add_parser("validate", help="check a cluster file (schema and meaning); exit 0 valid, 2 invalid")
    p.add_argument("file")
    p.add_argument("--json", action="store_true", help="print problems as JSON")
    p.set_defaults(handler=validate)

    p = sub.add_parser("plan", help="show what each node will get: versions, MIG placements, device plugin config")
    p.add_argument("file")
    p.add_argument("--json", action="store_true")
    p.add_argument("--node", action="append", help="only this node (repeatable)")
    p.set_defaults(handler=plan)

    p = sub.add_parser("mig-plan", help="place a MIG layout on a GPU model, or say why it cannot fit")
    p.add_argument("--gpu", required=True, help="GPU model key, e.g. H200")
    p.add_argument("layout", nargs="?", help="e.g. '1g.18gb x2 + 2g.35gb + 3g.71gb'; omit to list profiles")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=mig_plan)

    p = sub.add_parser("export", help="write the nodes' settings in another tool's format")
    p.add_argument("format", choices=["mig-parted"])
    p.add_argument("output", help="file to write, or - for standard output")
    p.add_argument("--cluster", default="inventory/cluster.yaml", help="cluster file (default: %(default)s)")
    p.set_defaults(handler=export)


def validate(args: argparse.Namespace) -> int:
    """Validate a cluster file; print one line per problem."""
    from gpu_provision.errors import SpecError

    try:
        cluster = load_cluster(args.file)
    except SpecError as exc:
        if args.json:
            print(json.dumps({"valid": False, "problems": [asdict(p) for p in exc.problems]}, indent=2))
            return 2
        raise
    if args.json:
        print(json.dumps({"valid": True, "nodes": len(cluster.nodes)}))
    else:
        print(f"{args.file}: valid ({len(cluster.nodes)} nodes)")
    return 0


def _node_plan(cluster: Cluster, node: Node) -> dict:
    from gpu_provision.plan import device_plugin_config

    driver = node.driver
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    modules = driver.kernel_modules
    if modules == "auto" and model is not None:
        modules = "open" if model.open_modules_supported else "proprietary"
    return {
        "node": node.name,
        "address": node.address,
        "role": node.role,
        "gpus": f"{node.gpus.count} x {node.gpus.model}" if node.has_gpus else "none",
        "driver": {"version": driver.version or f"{driver.pinned_branch}.*", "kernel_modules": modules,
                   "install_method": driver.install_method},
        "container_runtime": node.container_runtime.kind,
        "toolkit": node.toolkit.version,
        "kubernetes": cluster.kubernetes.version if cluster.kubernetes.enabled else None,
        "mig": {str(gpu): ({"enabled": False} if not layout.enabled else
                           {"layout": mig.format_layout(layout.profiles),
                            "placements": [f"{p.profile}@{p.start}:{p.size}" for p in layout.placements]})
                for gpu, layout in sorted(node.mig.layouts.items())},
        "vgpu": {str(k): v for k, v in sorted(node.vgpu.items())},
        "device_plugin": device_plugin_config(node) if node.has_gpus else None,
        "permissions": {"group": node.permissions.group, "mode": node.permissions.mode,
                        "users": list(node.permissions.users)},
    }


def plan(args: argparse.Namespace) -> int:
    """Print the resolved plan per node."""
    cluster = load_cluster(args.file)
    nodes = [n for n in cluster.nodes if not args.node or n.name in args.node]
    if args.node and len(nodes) != len(set(args.node)):
        missing = set(args.node) - {n.name for n in nodes}
        raise GpuProvisionError(f"{args.file}: no node named {', '.join(sorted(missing))}")
    plans = [_node_plan(cluster, n) for n in nodes]
    if args.json:
        print(json.dumps(plans, indent=2))
        return 0
    for p in plans:
        print(f"{p['node']} ({p['role']}, {p['address']}): {p['gpus']}")
        d = p["driver"]
        print(f"  driver {d['version']} ({d['kernel_modules']} modules, {d['install_method']}); "
              f"runtime {p['container_runtime']}; toolkit {p['toolkit']}; kubernetes {p['kubernetes'] or 'off'}")
        perms = p["permissions"]
        print(f"  /dev/nvidia*: mode {perms['mode']} group {perms['group'] or 'root'}"
              + (f", users {', '.join(perms['users'])}" if perms["users"] else ""))
        for gpu, m in p["mig"].items():
            if "layout" in m:
                print(f"  GPU {gpu}: MIG {m['layout']}  ->  {', '.join(m['placements']) or 'no instances'}")
            else:
                print(f"  GPU {gpu}: MIG disabled")
        for gpu, t in p["vgpu"].items():
            print(f"  GPU {gpu}: vGPU {t}")
        if p["device_plugin"]:
            print("  device plugin: " + json.dumps(p["device_plugin"], separators=(",", ":")))
    return 0


def mig_plan(args: argparse.Namespace) -> int:
    """Place a layout on a model; exit 1 when it cannot fit."""
    model = catalog.model(args.gpu)
    if model is None:
        raise GpuProvisionError(f"unknown GPU model '{args.gpu}' (allowed: {', '.join(catalog.models())})")
    if model.mig is None:
        capable = ", ".join(k for k, m in catalog.models().items() if m.mig)
        raise GpuProvisionError(f"{model.key} does not support MIG (MIG-capable: {capable})")
    if not args.layout:
        for profile in model.mig.profiles:
            starts = ",".join(map(str, profile.starts))
            print(f"{profile.name:<12} id {profile.id:>2}  max {profile.max_instances}  "
                  f"placements {{{starts}}}:{profile.memory_slices}")
        return 0
    counts = mig.parse_layout(args.layout)
    try:
        placements = mig.plan(model.mig, counts)
    except MigLayoutError as exc:
        if args.json:
            print(json.dumps({"fits": False, "reason": str(exc), "profile": exc.profile,
                              "taken": [list(t) for t in exc.taken], "suggestion": exc.suggestion}, indent=2))
        else:
            print(f"{model.key}: {mig.format_layout(counts)} does not fit: {exc}")
        return 1
    if args.json:
        print(json.dumps({"fits": True, "placements": [asdict(p) for p in placements]}, indent=2))
        return 0
    slots = ["."] * model.mig.memory_slices
    for n, p in enumerate(placements):
        for s in range(p.start, p.start + p.size):
            slots[s] = chr(ord("A") + n)
    print(f"{model.key}: {mig.format_layout(counts)} fits")
    for n, p in enumerate(placements):
        print(f"  {chr(ord('A') + n)}  {p.profile:<12} start {p.start} size {p.size}")
    print("  memory slices: " + " ".join(slots))
    return 0


def export(args: argparse.Namespace) -> int:
    """Write the nodes' MIG layouts as a mig-parted file."""
    cluster = load_cluster(args.cluster)
    doc = migparted.export([(n, catalog.model(n.gpus.model) if n.gpus.model else None) for n in cluster.nodes])
    text = yaml.safe_dump(doc, sort_keys=False)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise GpuProvisionError(f"{args.output}: cannot write: {exc.strerror}") from None
        print(f"wrote {len(doc['mig-configs'])} MIG configs to {args.output}")
    return 0
