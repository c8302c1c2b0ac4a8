"""``validate``, ``plan``, ``mig-plan`` and ``export``: commands that read the cluster file and touch no node."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import yaml

from gpu_provision.commands.args import (
    add_cluster,
    add_command,
    add_limit,
    cluster_file,
    emit,
    gpu_lines,
    say,
)
from gpu_provision.errors import GpuProvisionError, MigLayoutError
from gpu_provision.node.mig.model import Placement
from gpu_provision.spec import catalog, load_cluster, mig, migparted
from gpu_provision.spec.model import Cluster, Node


def register(sub: argparse._SubParsersAction) -> None:
    """Add the spec commands."""
    p = add_command(
        sub, "validate", "check a cluster file (schema and meaning); exit 0 valid, 2 invalid",
        "Check a cluster file against the schema and the rules that span settings, and print every problem as "
        "FILE:LINE:COL: PATH: message. No node is contacted. A file with problems is an input error, so it exits "
        "2 like any other bad input (there are no findings short of an error).",
        ["gpu-provision validate --cluster site/cluster.yaml", "gpu-provision validate site/cluster.yaml --json"],
        errors="the file has problems or cannot be read")
    add_cluster(p, positional=True)
    p.set_defaults(handler=validate)

    p = add_command(
        sub, "plan", "show the desired state per node: versions, MIG placements, device plugin config",
        "Show the desired state the cluster file gives each node, worked out (driver version and kernel modules, "
        "runtime, toolkit, device permissions, MIG placements, device plugin config). This is what the file asks "
        "for, not what a node has: 'gpu-provision drift' compares with the nodes, and "
        "'pyinfra inventory.py deploys/gpu_node.py --dry' lists the changes. Nodes without GPUs show no GPU stack.",
        ["gpu-provision plan --cluster site/cluster.yaml", "gpu-provision plan --cluster site/cluster.yaml "
         "--limit gpu-01 --json"])
    add_cluster(p, positional=True)
    add_limit(p, "--node")
    p.set_defaults(handler=plan)

    p = add_command(
        sub, "mig-plan", "place a MIG layout on a GPU model, or say why it cannot fit",
        "Place a MIG layout on a GPU model as the node applier would, and draw the memory slices; without a "
        "layout, list the model's MIG profiles. The model is a catalog key or product name in any case "
        "(h200, H200, 'NVIDIA H200', a100-80gb).",
        ["gpu-provision mig-plan --gpu h200", "gpu-provision mig-plan --gpu H200 '1g.18gb x2 + 2g.35gb + 3g.71gb'",
         "gpu-provision mig-plan --gpu 'NVIDIA H100 80GB HBM3' '7g.80gb' --json"],
        findings="the layout does not fit",
        errors="an unknown model or profile, a model without MIG, or a layout argument that cannot be read")
    p.add_argument("--gpu", required=True, help="GPU model: catalog key or product name, any case (e.g. h200)")
    p.add_argument("layout", nargs="?", help="e.g. '1g.18gb x2 + 2g.35gb + 3g.71gb'; omit to list profiles")
    p.set_defaults(handler=mig_plan)

    p = add_command(
        sub, "export", "write the nodes' settings in another tool's format",
        "Write the MIG layouts the cluster file gives its nodes as an NVIDIA mig-parted config file, one named "
        "config per node.",
        ["gpu-provision export mig-parted layouts.yaml --cluster site/cluster.yaml",
         "gpu-provision export mig-parted - --cluster site/cluster.yaml --json"])
    p.add_argument("format", choices=["mig-parted"])
    p.add_argument("output", help="file to write, or - for standard output")
    add_cluster(p)
    p.set_defaults(handler=export)


def validate(args: argparse.Namespace) -> int:
    """Validate a cluster file; print one line per problem."""
    from gpu_provision.errors import SpecError

    path = cluster_file(args)
    try:
        cluster = load_cluster(path)
    except SpecError as exc:
        if args.json:
            print(json.dumps({"valid": False, "problems": [asdict(p) for p in exc.problems]}, indent=2))
            return 2
        raise
    emit(args, {"valid": True, "nodes": len(cluster.nodes)}, f"{path}: valid ({len(cluster.nodes)} nodes)")
    return 0


def _gpu_plan(node: Node) -> dict:
    from gpu_provision.k8s.device_plugin_config import device_plugin_config

    driver = node.driver
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    modules = driver.kernel_modules
    if modules == "auto" and model is not None:
        modules = "open" if model.open_modules_supported else "proprietary"
    return {
        "driver": {"version": driver.spell("package"), "kernel_modules": modules,
                   "install_method": driver.install_method},
        "toolkit": node.toolkit.version,
        "mig": {str(gpu): ({"enabled": False} if not layout.enabled else
                           {"layout": mig.format_layout(layout.profiles),
                            "placements": [str(p) for p in node.mig.planned[gpu].placements]})
                for gpu, layout in sorted(node.mig.layouts.items())},
        "vgpu": {str(k): v for k, v in sorted(node.vgpu.items())},
        "device_plugin": device_plugin_config(node),
        "permissions": {"group": node.permissions.group, "mode": node.permissions.mode,
                        "users": list(node.permissions.users)},
    }


def _node_plan(cluster: Cluster, node: Node) -> dict:
    """One node's desired state; the GPU stack (driver, toolkit, MIG, vGPU, device plugin, device permissions)
    only for a node with GPUs, since none of it is installed elsewhere."""
    return {
        "node": node.name,
        "address": node.address,
        "role": node.role,
        "gpus": f"{node.gpus.count} x {node.gpus.model}" if node.has_gpus else "none",
        "container_runtime": node.container_runtime.kind,
        "kubernetes": cluster.kubernetes.version if cluster.kubernetes.enabled else None,
        **(_gpu_plan(node) if node.has_gpus else {}),
    }


def _plan_text(plans: list[dict]) -> str:
    lines = ["desired state from the cluster file (what the nodes should have, not what they have):"]
    for p in plans:
        lines.append(f"{p['node']} ({p['role']}, {p['address']}): {p['gpus']}")
        if "driver" not in p:
            lines.append(f"  runtime {p['container_runtime']}; kubernetes {p['kubernetes'] or 'off'}")
            continue
        d = p["driver"]
        lines.append(f"  driver {d['version']} ({d['kernel_modules']} modules, {d['install_method']}); "
                     f"runtime {p['container_runtime']}; toolkit {p['toolkit']}; kubernetes {p['kubernetes'] or 'off'}")
        perms = p["permissions"]
        lines.append(f"  /dev/nvidia*: mode {perms['mode']} group {perms['group'] or 'root'}"
                     + (f", users {', '.join(perms['users'])}" if perms["users"] else ""))
        migs = {int(gpu): (f"MIG {m['layout']}  ->  {', '.join(m['placements']) or 'no instances'}"
                           if "layout" in m else "MIG disabled") for gpu, m in p["mig"].items()}
        lines.extend(f"  {line}" for line in gpu_lines(migs))
        lines.extend(f"  {line}" for line in gpu_lines({int(gpu): f"vGPU {t}" for gpu, t in p["vgpu"].items()}))
        if p["device_plugin"]:
            lines.append("  device plugin: " + json.dumps(p["device_plugin"], separators=(",", ":")))
    return "\n".join(lines)


def plan(args: argparse.Namespace) -> int:
    """Print the desired state per node."""
    path = cluster_file(args)
    cluster = load_cluster(path)
    nodes = [n for n in cluster.nodes if not args.limit or n.name in args.limit]
    missing = set(args.limit) - {n.name for n in nodes}
    if missing:
        raise GpuProvisionError(f"{path}: no node named {', '.join(sorted(missing))}")
    plans = [_node_plan(cluster, n) for n in nodes]
    emit(args, plans, lambda: _plan_text(plans))
    return 0


def _slots_text(model_key: str, counts: dict[str, int], placements: Sequence[Placement], memory_slices: int) -> str:
    slots = ["."] * memory_slices
    for n, p in enumerate(placements):
        for s in range(p.start, p.start + p.size):
            slots[s] = chr(ord("A") + n)
    lines = [f"{model_key}: {mig.format_layout(counts)} fits"]
    lines.extend(f"  {chr(ord('A') + n)}  {p.profile:<12} start {p.start} size {p.size}"
                 for n, p in enumerate(placements))
    lines.append("  memory slices: " + " ".join(slots))
    return "\n".join(lines)


def mig_plan(args: argparse.Namespace) -> int:
    """Place a layout on a model; exit 1 when it cannot fit, 2 for an unknown model or profile (as ``--help`` says)."""
    model = catalog.model(args.gpu)
    if model is None:
        raise GpuProvisionError(f"unknown GPU model '{args.gpu}' (allowed: {', '.join(catalog.models())})")
    if model.mig is None:
        capable = ", ".join(k for k, m in catalog.models().items() if m.mig)
        raise GpuProvisionError(f"{model.key} does not support MIG (MIG-capable: {capable})")
    table = model.mig
    if not args.layout:
        emit(args, {"model": model.key, "profiles": [
            {"name": p.name, "id": p.id, "max_instances": p.max_instances, "starts": list(p.starts),
             "memory_slices": p.memory_slices} for p in table.profiles]},
            lambda: "\n".join(f"{p.name:<12} id {p.id:>2}  max {p.max_instances}  "
                              f"placements {{{','.join(map(str, p.starts))}}}:{p.memory_slices}"
                              for p in table.profiles))
        return 0
    counts = mig.parse_layout(args.layout)
    unknown = [name for name in counts if table.profile(name) is None]
    if unknown:
        # A profile the model lacks is a mistyped argument, not a layout that does not fit: a usage error.
        raise GpuProvisionError(f"'{unknown[0]}' is not a MIG profile of {model.key} "
                                f"(allowed: {', '.join(p.name for p in table.profiles)})")
    try:
        placements = mig.plan(table, counts)
    except MigLayoutError as exc:
        emit(args, {"fits": False, "reason": str(exc), "profile": exc.profile,
                    "taken": [list(t) for t in exc.taken], "suggestion": exc.suggestion},
             f"{model.key}: {mig.format_layout(counts)} does not fit: {exc}")
        return 1
    emit(args, {"fits": True, "placements": [asdict(p) for p in placements]},
         lambda: _slots_text(model.key, counts, placements, table.memory_slices))
    return 0


def export(args: argparse.Namespace) -> int:
    """Write the nodes' MIG layouts as a mig-parted file (to standard output under ``--json``: as JSON)."""
    cluster = load_cluster(cluster_file(args))
    doc = migparted.export([(n, catalog.model(n.gpus.model) if n.gpus.model else None) for n in cluster.nodes])
    if args.output == "-":
        emit(args, doc, lambda: yaml.safe_dump(doc, sort_keys=False).rstrip("\n"))
        return 0
    text = yaml.safe_dump(doc, sort_keys=False)
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        raise GpuProvisionError(f"{args.output}: cannot write: {exc.strerror}") from None
    message = f"wrote {len(doc['mig-configs'])} MIG configs to {args.output}"
    if args.json:
        emit(args, {"wrote": args.output, "configs": len(doc["mig-configs"])})
        say(message)
    else:
        print(message)
    return 0
