"""Cluster membership: the first control plane initialised by ``kubeadm init``, every other node joined once.

Join tokens and certificate keys exist only at execution time: they are made on the control plane inside a Python
callback, reach the joining node on the command's stdin into a private file under ``/run`` (tmpfs) that is removed
after ``kubeadm join``, and are never printed, logged or kept on the controller. Every remote command of a join runs
from :func:`do_join`, so how those commands reach the nodes (and with which privileges) is decided in that one place:
pyinfra runs a function command's own ``run_shell_command`` calls with no connector arguments at all, so
:func:`connector_arguments` hands each of them the ones pyinfra gives the operation on that host (``_sudo``,
``_sudo_password``, ``_timeout``, ...), and a login user other than root joins through sudo like every other command.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from pyinfra.api import FunctionCommand, operation

from gpu_provision.k8s.kubeadm import advertise_address, join_configuration
from gpu_provision.operations.commands import connector_arguments, current_state, mark_changed, this_host
from gpu_provision.operations.kubernetes.probe import (
    ADMIN_CONF,
    KUBELET_CONF,
    kubernetes_request,
    kubernetes_section,
)
from gpu_provision.operations.remote import run_on_host
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.state import Request

JOIN_DIR = "/run/gpu-provision"
JOIN_FILE = f"{JOIN_DIR}/kubeadm-join.yaml"
TOKEN_TTL = "15m"

_JOIN = re.compile(r"kubeadm join (?P<endpoint>\S+) --token (?P<token>[a-z0-9]{6}\.[a-z0-9]{16})"
                   r" --discovery-token-ca-cert-hash (?P<hash>sha256:[0-9a-f]{64})")
_CERT_KEY = re.compile(r"^[0-9a-f]{64}$")


@operation()
def init(config_path: str, first_control_plane: str):
    """The first control plane initialised by ``kubeadm init`` (once: guarded by ``/etc/kubernetes/admin.conf``).

    + config_path: the InitConfiguration/ClusterConfiguration file on the node
    + first_control_plane: inventory name of the node that initialises the cluster; every other host does nothing
      (every host calls the same operations, so pyinfra orders this before :func:`join` on all of them)

    The bootstrap token kubeadm makes is not printed (``--skip-token-print``): nodes join with tokens made on
    demand by :func:`join`.

    .. code:: python

        membership.init(name="kubeadm init", config_path="/etc/gpu-provision/kubernetes/kubeadm-init.yaml",
                        first_control_plane="cp-01")
    """
    host = this_host()
    if host.name != first_control_plane:
        host.noop(f"{first_control_plane} initialises the cluster")
        return
    state = current_state(host, Request(files={ADMIN_CONF}))
    if state.file(ADMIN_CONF).exists:
        host.noop("control plane already initialised")
        return
    mark_changed(host)
    yield (f"kubeadm init --config {shlex.quote(config_path)} --skip-token-print "
           f"> /var/log/gpu-provision-kubeadm-init.log 2>&1 || {{ tail -n 20 /var/log/gpu-provision-kubeadm-init.log >&2; exit 1; }}")


def parse_join_command(text: str) -> tuple[str, str, str]:
    """``(endpoint, token, ca_cert_hash)`` from ``kubeadm token create --print-join-command`` output."""
    match = _JOIN.search(text)
    if not match:
        raise ValueError("kubeadm printed no join command")
    return match["endpoint"], match["token"], match["hash"]


def parse_certificate_key(lines: Sequence[str]) -> str:
    """The certificate key from ``kubeadm init phase upload-certs --upload-certs`` output (its last line)."""
    for line in reversed([str(x).strip() for x in lines]):
        if _CERT_KEY.match(line):
            return line
    raise ValueError("kubeadm printed no certificate key")


def join_script() -> str:
    """The node-side command of a join: config from stdin into a private tmpfs file, join, remove the file."""
    return (f"umask 077 && mkdir -p {JOIN_DIR} && cat > {JOIN_FILE} && "
            f"{{ kubeadm join --config {JOIN_FILE} > /var/log/gpu-provision-kubeadm-join.log 2>&1; rc=$?; "
            f"rm -f {JOIN_FILE}; [ $rc = 0 ] || tail -n 20 /var/log/gpu-provision-kubeadm-join.log >&2; exit $rc; }}")


def do_join(state: Any, host: Any, cluster: Cluster, node: Node, control_plane: str, address: str | None) -> bool:
    """Execution-time join (a ``FunctionCommand``): token (and certificate key) from ``control_plane``, join.

    Returns False, failing only this host, when the control plane cannot make a token or the join fails.
    """
    source = state.inventory.get_host(control_plane, None)
    if source is None:
        host.log_styled(f"join: control plane {control_plane} is not in this run's inventory", fg="red")
        return False
    if source not in getattr(state, "activated_hosts", {source}):
        # pyinfra connects only the hosts of --limit; the control plane makes the join token, so it must be one.
        host.log_styled(f"join: control plane {control_plane} is not part of this run: add --limit {control_plane} "
                        "(it makes the join token)", fg="red")
        return False
    on_source = connector_arguments(state, source, host.executing_op_hash)
    made = run_on_host(source, f"kubeadm token create --ttl {TOKEN_TTL} --print-join-command", on_source)
    if not made.ok:
        host.log_styled(f"join: on {control_plane}: {made.failure}", fg="red")
        return False
    endpoint, token, ca_hash = parse_join_command(made.stdout)
    secrets = [token]
    certificate_key = None
    if node.role == "control-plane":
        uploaded = run_on_host(source, "kubeadm init phase upload-certs --upload-certs", on_source)
        if not uploaded.ok:
            host.log_styled(f"join: on {control_plane}: {uploaded.failure}", fg="red")
            return False
        certificate_key = parse_certificate_key(uploaded.stdout_lines)
        secrets.append(certificate_key)
    config = join_configuration(cluster, node, endpoint, token, ca_hash, certificate_key, address)
    joined = run_on_host(host, join_script(), connector_arguments(state, host, host.executing_op_hash),
                         stdin=json.dumps(config, indent=2) + "\n", secrets=secrets)
    if not joined.ok:
        host.log_styled(f"kubeadm join: {joined.failure}", fg="red")
        return False
    return True


@operation()
def join(cluster: Cluster, node: Node, control_plane: str):
    """The node joined to the cluster (once: guarded by ``/etc/kubernetes/kubelet.conf``).

    + cluster, node: the typed cluster file and this node
    + control_plane: inventory name of the initialised control plane that makes the token (it joins nothing)

    A worker joins with a bootstrap token (``kubeadm token create --ttl 15m``); a further control plane also with a
    certificate key (``kubeadm init phase upload-certs --upload-certs``). Both are made on ``control_plane`` when the
    operation executes and passed as described in this module's docstring.

    .. code:: python

        membership.join(name="kubeadm join", cluster=cluster, node=node, control_plane="cp-01")
    """
    host = this_host()
    if host.name == control_plane:
        host.noop("the first control plane is initialised, not joined")
        return
    state = current_state(host, kubernetes_request(KUBELET_CONF))
    if state.file(KUBELET_CONF).exists:
        host.noop("node already joined")
        return
    address = None
    if node.role == "control-plane":
        address = advertise_address(node, (kubernetes_section(state).get("addresses") or [None])[0])
    mark_changed(host)
    yield FunctionCommand(do_join, (cluster, node, control_plane, address), {})
