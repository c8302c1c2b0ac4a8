"""The batched node-state fact and its per-run cache.

``NodeState`` runs the probe (:mod:`gpu_provision.node.probe`, sent as one command by
:func:`gpu_provision.bundle.probe_command`) once and returns every section the stages asked for. :func:`node_state`
is what operations and drift checks call: it fetches once per host and phase (prepare, then execute) and again only
after one of this project's operations changed the host, so a converged node costs one round trip per phase however
many operations read it.

The first probe of a node sends the probe's modules in the command, and the node keeps a copy
(:mod:`gpu_provision.bundle`); the controller notes that under :func:`record_dir` (one empty file per
user@address:port), so later runs, in this process or another, send the short command instead. Should the node
have lost its copy, the short command says so and the full one follows.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from pyinfra.api import FactBase

from gpu_provision import bundle
from gpu_provision.state import NodeStateData, Request


class NodeState(FactBase):
    """Every piece of node state the stages compare, from one remote command.

    .. code:: python

        {"system": {"os_id": "debian", "kernel": "6.1.0-18-amd64", ...},
         "packages": {"manager": "apt", "packages": {"nvidia-driver": {"version": "580.159.04-1", "held": true}}},
         "files": {"/etc/docker/daemon.json": {"exists": true, "sha256": "...", "content": "{...}"}}, ...}
    """

    def requires_command(self, *args: Any, **kwargs: Any) -> str:
        return "python3"

    def command(self, request_json: str, cached: bool = False,  # type: ignore[override]
                budget: float | None = None) -> str:
        probe = Request.from_json(request_json).to_probe()
        if budget:
            probe["budget"] = budget
        return bundle.probe_command(probe, cached=cached)

    def process(self, output: list[str]) -> dict[str, Any]:  # type: ignore[override]
        return json.loads("\n".join(output))


# Per-host caches live on the host objects themselves: keys such as id(host) could be reused by a later host.
_CACHE_ATTR = "_gpu_provision_state"
_GENERATION_ATTR = "_gpu_provision_state_generation"
_EXECUTING_ATTR = "_gpu_provision_executing"


def executing(host: Any) -> bool:
    """Whether ``host``'s operations are executing rather than being prepared: pyinfra's execution phase, or a
    fleet run executing one host's operations (:meth:`gpu_provision.fleet.Reached.apply`), where pyinfra's own flag
    stays off because the run's state is shared by hosts still declaring theirs."""
    return bool(getattr(host.state, "is_executing", False) or getattr(host, _EXECUTING_ATTR, False))


def mark_executing(host: Any, on: bool) -> None:
    """Set or clear the fleet run's execution mark on ``host`` (see :func:`executing`)."""
    setattr(host, _EXECUTING_ATTR, on)


def invalidate(host: Any) -> None:
    """Mark ``host``'s cached state stale (an operation is about to change it)."""
    setattr(host, _GENERATION_ATTR, getattr(host, _GENERATION_ATTR, 0) + 1)


def node_state(host: Any, request: Request) -> NodeStateData:
    """The host's state for ``request``, fetched at most once per phase unless invalidated.

    A cached answer to a larger request serves a smaller one.
    """
    key = (executing(host), getattr(host, _GENERATION_ATTR, 0))
    cached = getattr(host, _CACHE_ATTR, None)
    if cached and cached[0][:2] == key and Request.from_json(cached[0][2]).covers(request):
        return cached[1]
    if cached and cached[0][:2] == key:
        request = Request.from_json(cached[0][2]).merge(request)
    data = NodeStateData(_probe(host, request))
    setattr(host, _CACHE_ATTR, ((*key, request.to_json()), data))
    return data


def record_dir() -> Path:
    """Where the controller notes which nodes hold this version of the probe's modules
    (``$XDG_CACHE_HOME/gpu-provision/probe-nodes/DIGEST``, ``~/.cache`` without it)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpu-provision" / "probe-nodes" / bundle.probe_digest()


def _record(host: Any) -> Path | None:
    """The note for an SSH host (None for hosts without an address or data, such as ``@local``)."""
    data = getattr(host, "data", None)
    if data is None or not data.get("ssh_hostname") or str(host.name).startswith("@"):
        return None
    address, user, port = data.get("ssh_hostname"), data.get("ssh_user") or "root", data.get("ssh_port") or 22
    return record_dir() / f"{user}@{address}:{port}".replace("/", "_")


#: The share of the probe's timeout it spends reading the node; the rest is for starting Python and the answer's way
#: back, so the probe answers (with its timed-out readings) before the controller gives up on the command.
BUDGET_SHARE = 0.8


def probe_timeout(host: Any) -> int:
    """Seconds the probe command may take on ``host``: pyinfra's ``_timeout`` data where given (the fleet
    commands' ``--command-timeout``, ``--data _timeout=N``), else the node's ``ssh.probe_timeout``.

    A deploy's operations carry the much longer command timeout; the probe passes its own explicitly, so reading
    a node is bounded the same in every stage and in drift.
    """
    from gpu_provision.inventory import node_for
    from gpu_provision.spec.settings import default

    data = getattr(host, "data", None)
    given = data.get("_timeout") if data is not None else None
    if given:
        return math.ceil(float(given))  # pyinfra's _timeout argument is a whole number of seconds
    try:
        return int(node_for(host).ssh.probe_timeout)
    except Exception:  # a host outside the cluster file keeps the default
        return int(default("cluster.ssh.probe_timeout"))


def _probe(host: Any, request: Request) -> Any:
    """The probe's answer, through the short command where the node holds the modules, else the full one; the
    command is bounded by :func:`probe_timeout` and the probe on the node by :data:`BUDGET_SHARE` of it."""
    record = _record(host)
    timeout = probe_timeout(host)
    bounds = {"budget": round(timeout * BUDGET_SHARE, 1), "_timeout": timeout}
    if record is not None and record.exists():
        raw = host.get_fact(NodeState, request.to_json(), True, **bounds)
        if raw != bundle.CACHE_MISS:
            return raw
        record.unlink(missing_ok=True)
    raw = host.get_fact(NodeState, request.to_json(), **bounds)
    if record is not None and isinstance(raw, dict) and raw:
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            record.touch()
        except OSError:  # a controller that cannot note it just sends the full command next time
            pass
    return raw
