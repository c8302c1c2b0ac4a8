"""``rig``: the local test rig of systemd-nspawn nodes (up, down, status, inventory, reset, vagrant-cluster)."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from gpu_provision.rig.config import RigNode, numbered_nodes


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rig`` command and its subcommands."""
    rig = sub.add_parser("rig", help="local test rig: Debian 12 nodes in systemd-nspawn on a private bridge")
    rsub = rig.add_subparsers(dest="rig_command", metavar="SUBCOMMAND", required=True)

    p = rsub.add_parser("up", help="start the rig with the given nodes (idempotent; adds to a running rig)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--cluster", help="cluster file naming nodes by loopback address 127.0.10.N")
    src.add_argument("--nodes", type=int, default=None, help="N nodes node1..nodeN (default 2 without --cluster)")
    p.add_argument("--gpu-model", help="with --nodes: simulated GPU model of every node, e.g. H200")
    p.add_argument("--gpus", type=int, default=8, help="with --nodes and --gpu-model: GPUs per node (default 8)")
    p.add_argument("--no-wait", action="store_true", help="do not wait for sshd on the nodes")
    p.set_defaults(handler=up)

    p = rsub.add_parser("down", help="stop every rig process, unmount, delete the bridge and route (idempotent)")
    p.set_defaults(handler=down)

    p = rsub.add_parser("status", help="services and nodes of the rig")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=status)

    p = rsub.add_parser("inventory", help="name, loopback address, bridge address and state of every node")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=inventory)

    p = rsub.add_parser("reset", help="make a node fresh: drop its changes and boot it again")
    p.add_argument("node")
    p.set_defaults(handler=reset)

    p = rsub.add_parser("vagrant-cluster", help="write a cluster file from `vagrant ssh-config` output")
    p.add_argument("ssh_config", help="file with `vagrant ssh-config` output, or - for standard input")
    p.add_argument("-o", "--output", default="-", help="cluster file to write (default: standard output)")
    p.add_argument("--name", default="vagrant", help="cluster name (default: %(default)s)")
    p.add_argument("--gpu-model", help="GPU model the nodes have (passed through PCI)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs per node")
    p.add_argument("--no-kubernetes", action="store_true",
                   help="turn Kubernetes off (default: the first machine is the control plane)")
    p.set_defaults(handler=vagrant_cluster)


def _setup_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
                        format="%(message)s", stream=sys.stderr)


def _nodes(args: argparse.Namespace) -> list[RigNode]:
    if args.cluster:
        from gpu_provision.rig.cluster import nodes_from_cluster

        return nodes_from_cluster(args.cluster)
    return numbered_nodes(args.nodes or 2, args.gpu_model, args.gpus)


def up(args: argparse.Namespace) -> int:
    """Bring the rig up and print its inventory."""
    from gpu_provision.rig.lifecycle import Rig

    _setup_logging(args)
    rig = Rig()
    statuses = rig.up(_nodes(args), wait=not args.no_wait)
    _print_inventory(statuses, as_json=False)
    print(f"ssh key: {rig.paths.client_key}  known_hosts: {rig.paths.known_hosts}")
    return 0


def down(args: argparse.Namespace) -> int:
    """Take the rig down."""
    from gpu_provision.rig.lifecycle import Rig

    _setup_logging(args)
    Rig().down()
    return 0


def status(args: argparse.Namespace) -> int:
    """Print the rig's services and nodes; exit 1 if any known node is not running."""
    from gpu_provision.rig.lifecycle import Rig

    rig = Rig()
    services, nodes = rig.services(), rig.status()
    if args.json:
        print(json.dumps({"services": services, "nodes": [n.to_json() for n in nodes]}, indent=2))
    else:
        for key, value in services.items():
            print(f"{key}: {value}")
        _print_inventory(nodes, as_json=False)
    return 0 if all(n.state == "running" for n in nodes) else 1


def inventory(args: argparse.Namespace) -> int:
    """Print one line (or JSON object) per node."""
    from gpu_provision.rig.lifecycle import Rig

    _print_inventory(Rig().status(), as_json=args.json)
    return 0


def _print_inventory(nodes: list, as_json: bool) -> None:
    if as_json:
        print(json.dumps([n.to_json() for n in nodes], indent=2))
        return
    for n in nodes:
        gpus = f"{n.gpu_count}x {n.gpu_model}" if n.gpu_model else "no GPUs"
        print(f"{n.name:<12} {n.ssh_address:<14} {n.bridge_address:<12} {n.state:<8} {gpus}")


def reset(args: argparse.Namespace) -> int:
    """Reset one node to fresh."""
    from gpu_provision.rig.lifecycle import Rig

    _setup_logging(args)
    Rig().reset_node(args.node)
    return 0


def vagrant_cluster(args: argparse.Namespace) -> int:
    """Convert `vagrant ssh-config` output to a cluster file."""
    from gpu_provision.rig.vagrant import cluster_yaml, parse_ssh_config

    text = sys.stdin.read() if args.ssh_config == "-" else Path(args.ssh_config).read_text()
    out = cluster_yaml(parse_ssh_config(text), name=args.name, gpu_model=args.gpu_model, gpus=args.gpus,
                       kubernetes=not args.no_kubernetes)
    if args.output == "-":
        sys.stdout.write(out)
    else:
        Path(args.output).write_text(out)
    return 0
