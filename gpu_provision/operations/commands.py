"""Commands guarded by node state, host failures, and the plumbing every operation of this project shares.

Every operation here reads the node through :func:`current_state` (one batched probe, cached per phase) and calls
:func:`mark_changed` when it yields commands, so the next operation sees the node as it is after the change.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from pyinfra.api import operation
from pyinfra.context import ctx_host

from gpu_provision.facts.state import invalidate, node_state
from gpu_provision.state import NodeStateData, Request

_BASE_REQUEST: dict[int, Request] = {}


def this_host() -> Any:
    """The pyinfra host being operated on, as the object itself.

    ``pyinfra.host`` is one proxy shared by every host: per-host caches keyed on its ``id`` would mix hosts.
    """
    return ctx_host.get()


def use_request(target: Any, request: Request) -> None:
    """Make every operation on ``target`` read at least ``request``.

    The pipeline registers the node's whole request once, so the first operation of a phase fetches everything the
    later ones need and a converged node costs one probe per phase.
    """
    _BASE_REQUEST[id(target)] = request


def current_state(target: Any, request: Request) -> NodeStateData:
    """``target``'s state for ``request`` merged with the request registered by :func:`use_request`."""
    base = _BASE_REQUEST.get(id(target))
    return node_state(target, base.merge(request) if base else request)


def mark_changed(target: Any) -> None:
    """Record that an operation yielded commands for ``target``.

    Only during execution: at prepare time nothing has run yet, so invalidating would re-probe an unchanged node.
    """
    if getattr(target.state, "is_executing", False):
        invalidate(target)


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
def guarded(command: str, needed: Callable[[NodeStateData], str | None], request: Request, noop: str):
    """Run ``command`` only while ``needed(state)`` gives a reason to.

    + command: shell command that brings the node to the wanted state
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
    reason = needed(current_state(target, request))
    if reason is None:
        target.noop(noop)
        return
    mark_changed(target)
    yield command
