"""Commands guarded by node state, host failures, and the plumbing every operation of this project shares.

Every operation here reads the node through :func:`current_state` (one batched probe, cached per phase) and calls
:func:`mark_changed` when it yields commands, so the next operation sees the node as it is after the change.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable
from typing import Any

from pyinfra import logger
from pyinfra.api import FunctionCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS, pop_global_arguments
from pyinfra.context import ctx_host

from gpu_provision.facts.state import executing, invalidate, node_state
from gpu_provision.operations import atomic
from gpu_provision.operations.reboot import reboot_and_wait
from gpu_provision.operations.remote import run_on_host
from gpu_provision.spec.settings import default
from gpu_provision.state import NodeStateData, Request

#: Written when a node needs a reboot it may not take by itself (gone after the reboot: /var/run is a tmpfs).
REBOOT_MARKER = "/var/run/gpu-provision/reboot-required"

_BASE_REQUEST_ATTR = "_gpu_provision_base_request"


def this_host() -> Any:
    """The pyinfra host being operated on, as the object itself.

    ``pyinfra.host`` is one proxy shared by every host: per-host caches keyed on its ``id`` would mix hosts.
    """
    return ctx_host.get()


def connector_arguments(state: Any, target: Any, op_hash: str | None) -> dict[str, Any]:
    """The connector arguments (``_sudo``, ``_sudo_password``, ``_sudo_user``, ``_timeout``, ...) a command run
    on ``target`` must carry: those pyinfra gives operation ``op_hash`` there, else ``target``'s own defaults
    (host and group data, ``--sudo`` and the config).

    pyinfra applies them only to the commands an operation yields; a command run from inside a function command,
    a fact's helper or a fleet command gets none unless it is given them, so a login that is not root would run it
    without sudo. Every such command of this project takes its arguments here.
    """
    ops = state.ops.get(target, {})
    if op_hash is not None and op_hash in ops:
        global_arguments = dict(ops[op_hash].global_arguments)
    else:
        global_arguments = dict(pop_global_arguments(state, target, {})[0])
    return {key: global_arguments[key] for key in CONNECTOR_ARGUMENT_KEYS if key in global_arguments}


def use_request(target: Any, request: Request) -> None:
    """Make every operation on ``target`` read at least ``request``.

    The pipeline registers the node's whole request once, so the first operation of a phase fetches everything the
    later ones need and a converged node costs one probe per phase.
    """
    setattr(target, _BASE_REQUEST_ATTR, request)


def current_state(target: Any, request: Request) -> NodeStateData:
    """``target``'s state for ``request`` merged with the request registered by :func:`use_request`."""
    base = getattr(target, _BASE_REQUEST_ATTR, None)
    return node_state(target, base.merge(request) if base else request)


def mark_changed(target: Any) -> None:
    """Record that an operation yielded commands for ``target``.

    Only during execution: at prepare time nothing has run yet, so invalidating would re-probe an unchanged node.
    """
    if executing(target):
        invalidate(target)


def deploy_timeout(target: Any) -> int:
    """Seconds each remote command of a deploy on ``target`` may run: pyinfra's ``_timeout`` data where given
    (``--data _timeout=N``, ``group_data/``), else the node's ``ssh.command_timeout`` from the cluster file.

    Deploys pass it as their ``_timeout`` global argument, which pyinfra gives every operation inside and every
    command those run, so a command that hangs on a node fails that node instead of holding the run forever.
    """
    from gpu_provision.inventory import node_for

    given = target.data.get("_timeout")
    if given:
        return int(given)
    try:
        return int(node_for(target).ssh.command_timeout)
    except Exception:  # a host outside the cluster file (pyinfra @local without GPU_PROVISION_NODE) keeps the default
        return int(default("cluster.ssh.command_timeout"))


def fail_command(reason: str) -> str:
    """A shell command that fails the host (only that host) with ``reason`` on stderr."""
    return f"echo {shlex.quote('gpu-provision: ' + reason)} >&2; exit 1"


@operation()
def fail(reason: str):
    """Fail this host (and only this host) with ``reason``.

    + reason: one line saying what is wrong and what to do about it

    Raising ``OperationError`` would stop every host; a failing command stops only this one.

    .. code:: python

        commands.fail(name="Check OS", reason="Fedora 40 is not supported")
    """
    yield fail_command(reason)


@operation()
def guarded(command: str | Callable[[NodeStateData], str], needed: Callable[[NodeStateData], str | None],
            request: Request, noop: str):
    """Run ``command`` only while ``needed(state)`` gives a reason to.

    + command: shell command that brings the node to the wanted state, or a function of the node's state that
      returns it (for commands naming what the node has, such as the device files to fix)
    + needed: takes the node's state, returns why the command must run, or None when the node is already there
    + request: what the probe must read for ``needed``
    + noop: what to log when the command is not needed ("CDI spec already current")

    ``needed`` is evaluated again at execution, against the node as earlier operations left it.

    .. code:: python

        commands.guarded(
            name="Generate the CDI spec",
            command="nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml",
            needed=lambda s: None if s.file("/etc/cdi/nvidia.yaml").exists else "missing",
            request=Request(files={"/etc/cdi/nvidia.yaml"}),
            noop="CDI spec already present",
        )
    """
    target = this_host()
    state = current_state(target, request)
    if needed(state) is None:
        target.noop(noop)
        return
    mark_changed(target)
    yield command(state) if callable(command) else command


def _reboot_now(state: Any, host: Any, reason: str) -> bool:
    """Reboot ``host`` for ``reason`` and wait until it is back and booted (:mod:`gpu_provision.operations.reboot`);
    a node that does not come back fails with the reason."""
    failed = reboot_and_wait(host, reason, lambda command: run_on_host(host, command))
    if failed:
        host.log_styled(failed, fg="red", log_func=logger.error)
        return False
    host.log_styled(f"rebooted ({reason}) and back", log_func=logger.info)
    return True


@operation()
def reboot_when(needed: Callable[[NodeStateData], str | None], request: Request, allowed: bool,
                marker: str = REBOOT_MARKER):
    """Reboot the node (and wait for it) when ``needed`` says so and rebooting is allowed, else flag it.

    + needed: takes the node's state, returns why a reboot is needed, or None
    + request: what ``needed`` reads (``marker`` is added)
    + allowed: the node's ``driver.reboot == "allowed"``
    + marker: file that records a pending reboot when rebooting is not allowed (``/var/run`` is empty after boot)

    Without permission the host gets a warning and the marker file holds the reason (written atomically, so the
    reason is whole or absent); the marker is written once,
    so a node that waits for its reboot shows no change on later runs.

    .. code:: python

        commands.reboot_when(name="Reboot for the driver", needed=driver_reboot_reason, request=req, allowed=False)
    """
    target = this_host()
    state = current_state(target, request.merge(Request(files={marker}, contents={marker})))
    reason = needed(state)
    if reason is None:
        target.noop("no reboot needed")
        return
    if allowed:
        mark_changed(target)
        yield FunctionCommand(_reboot_now, (reason,), {})
        return
    target.log_styled(f"reboot required: {reason} (driver.reboot is not 'allowed')", fg="yellow",
                      log_func=logger.warning)
    line = f"{reason}\n"
    if state.file(marker).content == line:
        target.noop(f"reboot already flagged in {marker}")
        return
    mark_changed(target)
    yield f"mkdir -p {shlex.quote(posixpath.dirname(marker))}"
    yield atomic.write(marker, line)
