"""One way to reboot a node and know it came back, for the deploy's driver step and the rollout alike.

Before the reboot a random token is written to :data:`BOOT_MARK` in ``/run`` (a tmpfs, empty after every boot); the
node is back once a new connection finds the token gone, and booted once its ``systemctl is-system-running --wait``
returns. pyinfra's own ``server.reboot`` compares uptimes instead, which a container shares with its host (a test
rig's node): it can never confirm such a reboot and waits out its timeout, then fails the node.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from pyinfra.connectors.util import clear_askpass_cache

from gpu_provision.hostcommand import HostCommand

#: Written to /run before a reboot: its absence shows the node rebooted.
BOOT_MARK = "/run/gpu-provision/boot-mark"
#: How long a node may take to come back and finish booting.
REBOOT_TIMEOUT_S = 900.0


def reboot_and_wait(host: Any, why: str, run: Callable[[str], HostCommand], *, timeout: float = REBOOT_TIMEOUT_S,
                    sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> str | None:
    """Reboot ``host`` (a connected pyinfra host) and wait until it is back and booted; None when it is, else why
    not, naming ``why`` it was rebooted.

    ``run`` runs one shell command on the host with its connector arguments (sudo for a login that is not root).
    The reboot is detached from the session (``sleep 1 && systemctl reboot`` in the background), so the command
    returns before the connection drops. A sudo password's askpass file (pyinfra's, in the old boot's temporary
    directory) is forgotten before the connection goes, as pyinfra's own reboot does, so the disconnect does not try
    to remove it over a dead connection and the next sudo command uploads it again.
    """
    token = os.urandom(8).hex()
    ran = run(f"mkdir -p {BOOT_MARK.rsplit('/', 1)[0]} && echo {token} > {BOOT_MARK} && "
              "( sleep 1 && systemctl reboot ) </dev/null >/dev/null 2>&1 &")
    if not ran.ok:
        return f"cannot reboot ({why}): {ran.failure}"
    sleep(5)
    clear_askpass_cache(host)
    host.disconnect()
    deadline = clock() + timeout
    while clock() < deadline:
        sleep(2)
        try:
            host.connect(show_errors=False)
        except Exception:  # not back yet
            continue
        if not host.connected:
            continue
        ran = run(f"cat {BOOT_MARK} 2>/dev/null || true")
        if ran.ok and token not in ran.stdout:
            run("timeout 300 systemctl is-system-running --wait >/dev/null 2>&1 || true")
            return None
        host.disconnect()
    return f"rebooted ({why}) but not back within {timeout:.0f}s"
