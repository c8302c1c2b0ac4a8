"""Host kernel limits the rig's nodes count against: raised before nodes start, never lowered.

Every node's systemd, logind, dbus and getty hold inotify instances, all charged to root on the host (the nodes do
not map users): 8 per Debian 12 node, counted with ``find /proc/*/fd -lname 'anon_inode:inotify'`` on a running rig.
Debian's default ``fs.inotify.max_user_instances`` is 128, so about the 16th node's systemd cannot start its manager
and the node stops while booting (a full test run held 119 instances at a time; a run with a demo rig left running
beside it lost every node boot from some point on, most likely to this limit). Container tools raise the same limit for the same reason (podman's machine sets it
to 524288, containers/podman#19849).
"""

from __future__ import annotations

import logging
from pathlib import Path

log = logging.getLogger(__name__)

INOTIFY_INSTANCES = Path("/proc/sys/fs/inotify/max_user_instances")
#: Enough for over a hundred nodes at 8 each.
MIN_INOTIFY_INSTANCES = 1024


def ensure_inotify_instances(path: Path = INOTIFY_INSTANCES, minimum: int = MIN_INOTIFY_INSTANCES) -> int | None:
    """Raise the per-user inotify instance limit to ``minimum`` when it is lower; the limit in force, or None when
    it cannot be read. A limit that cannot be raised (not root, a read-only /proc) is logged and left as it is:
    the nodes may still fit under it."""
    try:
        current = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if current >= minimum:
        return current
    try:
        path.write_text(f"{minimum}\n")
    except OSError as exc:
        log.warning("cannot raise %s from %d to %d (%s): nodes beyond about %d may fail to boot", path, current,
                    minimum, exc, current // 8)
        return current
    log.info("raised %s from %d to %d", path, current, minimum)
    return minimum
