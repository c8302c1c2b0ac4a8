"""The batched node-state fact and its per-run cache.

``NodeState`` runs the probe (:mod:`gpu_provision.node.probe`, sent as one command by
:func:`gpu_provision.bundle.probe_command`) once and returns every section the stages asked for. :func:`node_state`
is what operations and drift checks call: it fetches once per host and phase (prepare, then execute) and again only
after one of this project's operations changed the host, so a converged node costs one round trip per phase however
many operations read it.
"""

from __future__ import annotations

import json
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

    def command(self, request_json: str) -> str:  # type: ignore[override]
        return bundle.probe_command(Request.from_json(request_json).to_probe())

    def process(self, output: list[str]) -> dict[str, Any]:  # type: ignore[override]
        return json.loads("\n".join(output))


# Per-host caches live on the host objects themselves: keys such as id(host) could be reused by a later host.
_CACHE_ATTR = "_gpu_provision_state"
_GENERATION_ATTR = "_gpu_provision_state_generation"


def invalidate(host: Any) -> None:
    """Mark ``host``'s cached state stale (an operation is about to change it)."""
    setattr(host, _GENERATION_ATTR, getattr(host, _GENERATION_ATTR, 0) + 1)


def node_state(host: Any, request: Request) -> NodeStateData:
    """The host's state for ``request``, fetched at most once per phase unless invalidated.

    A cached answer to a larger request serves a smaller one.
    """
    state = host.state
    key = (bool(getattr(state, "is_executing", False)), getattr(host, _GENERATION_ATTR, 0))
    cached = getattr(host, _CACHE_ATTR, None)
    if cached and cached[0][:2] == key and Request.from_json(cached[0][2]).covers(request):
        return cached[1]
    if cached and cached[0][:2] == key:
        request = Request.from_json(cached[0][2]).merge(request)
    data = NodeStateData(host.get_fact(NodeState, request.to_json()))
    setattr(host, _CACHE_ATTR, ((*key, request.to_json()), data))
    return data
