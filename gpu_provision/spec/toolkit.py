"""Which of NVIDIA's two ways of configuring the container runtime a node's toolkit version takes.

From nvidia-container-toolkit 1.18 ``nvidia-ctk runtime configure`` no longer rewrites containerd's ``config.toml``:
it writes the nvidia runtime into a drop-in that ``config.toml`` imports, and the runtime defaults to just-in-time
CDI, with the ``nvidia-cdi-refresh`` units keeping a generated spec in ``/var/run/cdi``. Older releases edit the
whole file and leave the spec where it is generated. The deploy follows the release the cluster file pins, so the
files on a node are the ones its own ``nvidia-ctk`` would write. Every path, key and version here comes from
``gpu_provision/data/packages.json`` (``toolkit.runtime_config`` and ``toolkit.cdi``), which names its sources.
"""

from __future__ import annotations

from typing import Any

from gpu_provision.node.versions import at_least
from gpu_provision.spec.model import Node
from gpu_provision.spec.vendordata import package_data

#: A toolkit release is its first three parts (``1.18.2-1`` is 1.18.2): the packaging revision does not change
#: behaviour.
RELEASE_PARTS = 3


def _toolkit() -> dict[str, Any]:
    return dict(package_data()["toolkit"])


def _facts(key: str) -> dict[str, Any]:
    return dict(_toolkit()[key])


def drop_in(node: Node) -> bool:
    """Whether ``node``'s toolkit configures containerd through a drop-in (1.18 and later)."""
    return at_least(node.toolkit.version, _facts("runtime_config")["drop_in_from"], RELEASE_PARTS)


def containerd_drop_in() -> str:
    """The drop-in the deploy writes: ``nvidia-ctk``'s own path from 1.18.1 on (1.18.0 wrote ``config.d``, which
    its successor corrected), inside the directory the runtime stage's ``imports`` entry loads."""
    return str(_facts("runtime_config")["containerd_drop_in"])


def cri_plugin(config_version: int) -> str:
    """The CRI plugin whose runtimes the drop-in sets: version 2 files (containerd 1.7) name the CRI plugin
    ``io.containerd.grpc.v1.cri``; version 3 files (containerd 2.x) its runtime part ``io.containerd.cri.v1.runtime``."""
    return str(_facts("runtime_config")["cri_plugin"][str(min(max(config_version, 2), 3))])


def runtime_name() -> str:
    """The runtime's name in containerd and Docker (``nvidia``)."""
    return str(_facts("runtime_config")["runtime_name"])


def runtime_binary() -> str:
    """The executable containerd starts for the nvidia runtime (``options.BinaryName``)."""
    return str(_facts("runtime_config")["binary"])


def cdi_refresh(node: Node) -> bool:
    """Whether ``node``'s toolkit ships the ``nvidia-cdi-refresh`` units (1.18 and later)."""
    return at_least(node.toolkit.version, _facts("cdi")["refresh_from"], RELEASE_PARTS)


def cdi_spec(node: Node) -> str:
    """Where ``node``'s CDI spec lives: the refresh unit's ``/var/run/cdi/nvidia.yaml`` from 1.18, else the
    static ``/etc/cdi/nvidia.yaml``. One spec only: two specs naming the same devices conflict in CDI's registry."""
    facts = _facts("cdi")
    return str(facts["refresh_spec"] if cdi_refresh(node) else facts["static_spec"])


def stale_cdi_spec(node: Node) -> str | None:
    """The static spec an older toolkit left, which a 1.18 node no longer wants beside the refreshed one."""
    facts = _facts("cdi")
    return str(facts["static_spec"]) if cdi_refresh(node) else None


def refresh_units(node: Node) -> tuple[str, ...]:
    """The units that regenerate the spec after a driver or toolkit install (none before 1.18)."""
    return tuple(_facts("cdi")["refresh_units"]) if cdi_refresh(node) else ()


def cdi_in_use(node: Node) -> bool:
    """Whether ``node`` keeps a CDI spec the MIG applier must regenerate after a layout change: the toolkit is
    installed (the node carries GPUs) and the file asks for CDI."""
    return node.has_gpus and node.toolkit.cdi
