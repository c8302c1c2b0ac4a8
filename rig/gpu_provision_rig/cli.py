"""``gpu-provision-rig``: the local test rig of systemd-nspawn nodes (up, down, status, inventory, reset,
vagrant-cluster), the VM tier's box (box) and what ``vagrant up --provider=libvirt`` needs here (libvirt up/down).

Errors are :class:`~gpu_provision_rig.errors.RigError` or the product's, all of the one
:class:`~gpu_provision.errors.GpuProvisionError` family: printed as one line (exit status 2), the traceback only
under ``-v``, as ``gpu-provision`` does.
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import sys
import traceback
from collections.abc import Sequence

from gpu_provision.commands import vagrant
from gpu_provision.errors import GpuProvisionError
from gpu_provision_rig.base import SUITE as BASE_SUITE
from gpu_provision_rig.base import SUITES as BASE_SUITES
from gpu_provision_rig.box import DEFAULT_SUITE, SUITES, ensure_box
from gpu_provision_rig.cluster import nodes_from_cluster
from gpu_provision_rig.config import RigNode, numbered_nodes
from gpu_provision_rig.libvirt import LibvirtRig, rig_cluster
from gpu_provision_rig.lifecycle import Rig

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The rig's argument parser: every subcommand with its options."""
    parser = argparse.ArgumentParser(prog="gpu-provision-rig",
                                     description="Local test rig: Debian 12 nodes in systemd-nspawn on a private bridge.")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and debug output")
    rsub = parser.add_subparsers(dest="rig_command", metavar="SUBCOMMAND", required=True)

    p = rsub.add_parser("up", help="start the rig with the given nodes (idempotent; adds to a running rig)")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--cluster", help="cluster file naming nodes by loopback address 127.0.10.N")
    src.add_argument("--nodes", type=int, default=None, help="N nodes node1..nodeN (default 2 without --cluster)")
    p.add_argument("--gpu-model", help="with --nodes: simulated GPU model of every node, e.g. H200")
    p.add_argument("--gpus", type=int, default=8, help="with --nodes and --gpu-model: GPUs per node (default 8)")
    p.add_argument("--suite", choices=sorted(BASE_SUITES), default=BASE_SUITE,
                   help=f"with --nodes: the nodes' Debian release (default {BASE_SUITE}: Debian 12; trixie: Debian 13)")
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

    p = rsub.add_parser("box", help="build (or find cached) the Vagrant box for the libvirt provider from Debian's "
                                     "archive; prints the .box file and its image")
    p.add_argument("--suite", choices=sorted(SUITES), default=DEFAULT_SUITE,
                   help=f"Debian release (default {DEFAULT_SUITE}: Debian 12; trixie: Debian 13)")
    p.set_defaults(handler=box)

    p = rsub.add_parser("libvirt", help="prepare (up) or undo (down) what `vagrant up --provider=libvirt` needs "
                                         "here: libvirt daemons, an isolated network, loopback forwarders, the box")
    lsub = p.add_subparsers(dest="libvirt_command", metavar="ACTION", required=True)
    lp = lsub.add_parser("up", help="prepare; prints the Vagrantfile's settings as export lines (eval them)")
    lp.add_argument("--nodes", type=int, default=2, help="VMs gpu-node1..gpu-nodeN to forward to (default 2)")
    lp.add_argument("--suite", choices=sorted(SUITES), default=DEFAULT_SUITE,
                    help=f"Debian release of the box (default {DEFAULT_SUITE})")
    lp.set_defaults(handler=libvirt_up)
    lp = lsub.add_parser("down", help="undo `libvirt up` (refused while VMs run: vagrant destroy -f first)")
    lp.set_defaults(handler=libvirt_down)
    lp = lsub.add_parser("cluster", help="cluster file from `vagrant ssh-config` output, with the rig's apt proxy")
    lp.add_argument("ssh_config", help="file with `vagrant ssh-config` output")
    lp.add_argument("-o", "--output", required=True, help="cluster file to write")
    lp.add_argument("--user", default="vagrant", help="login user (default vagrant; root once its key is there)")
    lp.set_defaults(handler=libvirt_cluster)

    vagrant.register(rsub)
    return parser


def _setup_logging(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.DEBUG if getattr(args, "verbose", False) else logging.INFO,
                        format="%(message)s", stream=sys.stderr)


def box(args: argparse.Namespace) -> int:
    """Build the box (or find it in the rig's cache) and say where it is and how Vagrant takes it."""
    _setup_logging(args)
    built = ensure_box(Rig().paths.cache, args.suite)
    print(f"box: {built.box_file}")
    print(f"image: {built.image} (kernel {built.kernel})")
    print(f"add it: vagrant box add --name gpu-provision/{built.name} {built.box_file}")
    return 0


def libvirt_up(args: argparse.Namespace) -> int:
    """Prepare libvirt for the project's Vagrantfile and print its settings as ``export`` lines."""
    _setup_logging(args)
    env = LibvirtRig(Rig().paths).up(args.nodes, args.suite)
    for key, value in env.items():
        print(f"export {key}={shlex.quote(value)}")
    return 0


def libvirt_down(args: argparse.Namespace) -> int:
    """Undo :func:`libvirt_up`."""
    _setup_logging(args)
    LibvirtRig(Rig().paths).down()
    return 0


def libvirt_cluster(args: argparse.Namespace) -> int:
    """Write the cluster file for the VMs of ``vagrant ssh-config``."""
    with open(args.ssh_config) as source:
        text = rig_cluster(source.read(), args.user)
    with open(args.output, "w") as out:
        out.write(text)
    return 0


def _nodes(args: argparse.Namespace) -> list[RigNode]:
    if args.cluster:
        return nodes_from_cluster(args.cluster)
    return numbered_nodes(args.nodes or 2, args.gpu_model, args.gpus, args.suite)


def up(args: argparse.Namespace) -> int:
    """Bring the rig up and print its inventory."""
    _setup_logging(args)
    rig = Rig()
    statuses = rig.up(_nodes(args), wait=not args.no_wait)
    _print_inventory(statuses, as_json=False)
    print(f"ssh key: {rig.paths.client_key}  known_hosts: {rig.paths.known_hosts}")
    return 0


def down(args: argparse.Namespace) -> int:
    """Take the rig down."""
    _setup_logging(args)
    Rig().down()
    return 0


def status(args: argparse.Namespace) -> int:
    """Print the rig's services and nodes; exit 1 if any known node is not running."""
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
    _setup_logging(args)
    Rig().reset_node(args.node)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Run the rig's command line; returns the exit status."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except GpuProvisionError as exc:
        if args.verbose:
            traceback.print_exc()
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0

