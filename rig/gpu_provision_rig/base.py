"""The base root filesystem every rig node overlays: Debian 12 (or 13) built with mmdebstrap, cached between runs.

The cache key is a hash of the suite, the archive lines, the package list and the version of the changes made after
the build, so changing any of them builds a new base next to the old one. A base is built under a temporary name
and renamed when complete: a crashed build never leaves a half base that looks finished.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import shutil
import subprocess
from pathlib import Path

from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.requirements import NODE_PACKAGES

log = logging.getLogger(__name__)

#: The Debian releases a node may run, with their archive lines (Debian 12 unless a node names another).
SUITES: dict[str, tuple[str, ...]] = {
    codename: (f"deb http://deb.debian.org/debian {codename} main",
               f"deb http://deb.debian.org/debian {codename}-updates main",
               f"deb http://deb.debian.org/debian-security {codename}-security main")
    for codename in ("bookworm", "trixie")
}
SUITE = "bookworm"
ARCHIVE_LINES: tuple[str, ...] = SUITES[SUITE]
# Bump when _customize changes what it writes, so cached bases are rebuilt.
CUSTOMIZE_VERSION = 2

SSHD_CONFIG = """\
# Written by the gpu-provision rig: one host key made by the rig before boot, root by key only.
HostKey /etc/ssh/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UseDNS no
"""

APT_PROXY_CONFIG = f"""\
// Written by the gpu-provision rig: the apt caching proxy on the rig bridge is the node's only way out.
Acquire::http::Proxy "http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/";
// The rig's own package mirror is on the bridge: reach it directly.
Acquire::http::Proxy::{BRIDGE_ADDRESS} "DIRECT";
Acquire::Retries "3";
// A CI run hung for 25 minutes in apt's http method, polling a connection apt-cacher-ng had already closed
// (CLOSE-WAIT). No pipelining through the proxy (apt.conf(5): Pipeline-Depth, for proxies that mishandle it), and a
// connection that stays silent for 30 s is given up and retried instead of waited on.
Acquire::http::Pipeline-Depth "0";
Acquire::http::Timeout "30";
"""

# Timers that would take the dpkg lock at random moments during a test run.
MASKED_UNITS = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "fstrim.timer")


def _archive(suite: str) -> tuple[str, ...]:
    try:
        return SUITES[suite]
    except KeyError:
        raise RigError(f"no rig base for Debian {suite!r}: choose {', '.join(SUITES)}") from None


def base_key(packages: tuple[str, ...] = NODE_PACKAGES, suite: str = SUITE) -> str:
    """Hash naming the base of ``suite`` built from ``packages`` (order does not matter)."""
    text = json.dumps({"suite": suite, "archive": _archive(suite), "packages": sorted(set(packages)),
                       "customize": CUSTOMIZE_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def base_path(cache_dir: Path, packages: tuple[str, ...] = NODE_PACKAGES, suite: str = SUITE) -> Path:
    """Where the base of ``suite`` for ``packages`` lives (whether built or not)."""
    return cache_dir / f"base-{suite}-{base_key(packages, suite)}"


def ensure_base(cache_dir: Path, packages: tuple[str, ...] = NODE_PACKAGES, suite: str = SUITE) -> Path:
    """Return the cached base of ``suite`` for ``packages``, building it first if it is not there."""
    final = base_path(cache_dir, packages, suite)
    if final.is_dir():
        return final
    cache_dir.mkdir(parents=True, exist_ok=True)
    with open(cache_dir / "base.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if final.is_dir():
            return final
        building = final.with_name(final.name + ".building")
        if building.exists():
            shutil.rmtree(building)
        log.info("building base root filesystem %s (packages: %s)", final.name, " ".join(packages))
        argv = ["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}", suite, str(building),
                *_archive(suite)]
        proc = subprocess.run(argv, capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(building, ignore_errors=True)
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise RigError(f"mmdebstrap failed (exit {proc.returncode}):\n{tail}")
        _customize(building)
        building.rename(final)
    return final


def _systemctl(root: Path, *args: str) -> None:
    proc = subprocess.run(["systemctl", f"--root={root}", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RigError(f"systemctl --root={root} {' '.join(args)}: {proc.stderr.strip()}")


def _customize(root: Path) -> None:
    """Changes every node shares: no host keys (each node gets its own), sshd and apt settings, networkd."""
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/gpu-provision-rig.conf").write_text(SSHD_CONFIG)
    (root / "etc/apt/apt.conf.d/01gpu-provision-rig-proxy").write_text(APT_PROXY_CONFIG)
    (root / "root/.ssh").mkdir(mode=0o700, exist_ok=True)
    _systemctl(root, "enable", "systemd-networkd.service", "ssh.service")
    _systemctl(root, "mask", *MASKED_UNITS)
