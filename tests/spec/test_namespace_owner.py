"""The verification DaemonSet's namespace has one owner (:mod:`gpu_provision.spec.namespaces`): the verify command's
default comes from it, so a team refused that namespace and the DaemonSet's default cannot drift apart."""

from __future__ import annotations

import argparse

from gpu_provision.commands import verify as verify_command
from gpu_provision.spec import namespaces


def test_verify_in_cluster_namespace_default_is_the_reserved_one() -> None:
    parser = argparse.ArgumentParser()
    verify_command.register(parser.add_subparsers())
    args = parser.parse_args(["verify", "inventory.py", "--in-cluster"])
    assert args.namespace == namespaces.VERIFICATION
    assert namespaces.reserved(args.namespace) == "gpu-provision runs its own pods there"
