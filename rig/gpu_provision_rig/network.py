"""The rig's private bridge and the blackhole route that keeps its subnet from ever leaving the host.

While the rig is in use the host has ``blackhole 10.77.0.0/24 metric 4096``: the bridge's own connected route wins
while the bridge is up; if the bridge goes down or disappears, the blackhole still catches everything addressed to
the subnet instead of the default route. ``ip_forward`` is never touched and no NAT is added: nodes reach the
outside only through the apt proxy on the bridge address.
"""

from __future__ import annotations

import subprocess

from gpu_provision_rig.config import BRIDGE_ADDRESS, BRIDGE_NAME, SUBNET
from gpu_provision_rig.errors import RigError

BLACKHOLE_METRIC = 4096


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise RigError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


def bridge_exists() -> bool:
    """Whether the rig bridge is present."""
    return _ip("link", "show", "dev", BRIDGE_NAME, check=False).returncode == 0


def blackhole_present() -> bool:
    """Whether the rig's blackhole route is installed."""
    out = _ip("route", "show", "type", "blackhole", SUBNET).stdout
    return f"metric {BLACKHOLE_METRIC}" in out


def ensure_network() -> None:
    """Create (if missing) the blackhole route first, then the bridge with the host address, and bring it up."""
    if not blackhole_present():
        _ip("route", "add", "blackhole", SUBNET, "metric", str(BLACKHOLE_METRIC))
    if not bridge_exists():
        _ip("link", "add", BRIDGE_NAME, "type", "bridge")
    if f"{BRIDGE_ADDRESS}/" not in _ip("-o", "addr", "show", "dev", BRIDGE_NAME).stdout:
        _ip("addr", "add", f"{BRIDGE_ADDRESS}/24", "dev", BRIDGE_NAME)
    _ip("link", "set", BRIDGE_NAME, "up")


def remove_network() -> None:
    """Delete the bridge, then the blackhole route (in that order, so the subnet is never routed outwards)."""
    if bridge_exists():
        _ip("link", "del", BRIDGE_NAME)
    if blackhole_present():
        _ip("route", "del", "blackhole", SUBNET, "metric", str(BLACKHOLE_METRIC))


def route_get(address: str) -> str:
    """What the host's routing table would do with a packet to ``address`` (``ip route get``; sends nothing).

    A blackholed address makes ``ip route get`` fail with "Invalid argument"; that answer is returned as
    ``blackhole``.
    """
    proc = _ip("route", "get", address, check=False)
    if proc.returncode != 0 and "Invalid argument" in proc.stderr and blackhole_present():
        return f"blackhole {address}"
    return (proc.stdout or proc.stderr).strip()
