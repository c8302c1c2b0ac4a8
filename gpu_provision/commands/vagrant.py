"""``vagrant-cluster``: a cluster file for the VMs of the repository's Vagrantfile, from ``vagrant ssh-config``.

A product command, not a test-rig one: users deploy to their own Vagrant machines (real GPUs passed through) with
only ``gpu-provision`` installed. The rig's command line offers the same subcommand through :func:`register`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

from gpu_provision.commands.args import add_command, emit
from gpu_provision.vagrant import cluster_yaml, parse_ssh_config


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``vagrant-cluster`` command."""
    p = add_command(
        sub, "vagrant-cluster", "write a cluster file from `vagrant ssh-config` output",
        "Write a cluster file for the machines of a Vagrantfile from `vagrant ssh-config` output: one node per "
        "machine with its address, port, user and key; the first is the Kubernetes control plane unless "
        "--no-kubernetes. With --json the cluster file is written as JSON, which YAML readers take as it is.",
        ["vagrant ssh-config | gpu-provision vagrant-cluster - -o vagrant.yaml --gpu-model h200 --gpus 1",
         "gpu-provision vagrant-cluster ssh-config.txt --no-kubernetes --json"],
        errors="unreadable or unusable ssh-config output")
    p.add_argument("ssh_config", help="file with `vagrant ssh-config` output, or - for standard input")
    p.add_argument("-o", "--output", default="-", help="cluster file to write (default: standard output)")
    p.add_argument("--name", default="vagrant", help="cluster name (default: %(default)s)")
    p.add_argument("--gpu-model", help="GPU model the nodes have (passed through PCI)")
    p.add_argument("--gpus", type=int, default=0, help="GPUs per node")
    p.add_argument("--no-kubernetes", action="store_true",
                   help="turn Kubernetes off (default: the first machine is the control plane)")
    p.set_defaults(handler=vagrant_cluster)


def vagrant_cluster(args: argparse.Namespace) -> int:
    """Convert `vagrant ssh-config` output to a cluster file."""
    text = sys.stdin.read() if args.ssh_config == "-" else Path(args.ssh_config).read_text()
    out = cluster_yaml(parse_ssh_config(text), name=args.name, gpu_model=args.gpu_model, gpus=args.gpus,
                       kubernetes=not args.no_kubernetes)
    if args.json:
        out = json.dumps(yaml.safe_load(out), indent=2) + "\n"
    if args.output == "-":
        sys.stdout.write(out)
    else:
        Path(args.output).write_text(out)
        emit(args, {"wrote": args.output})
    return 0
