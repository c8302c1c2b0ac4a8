"""One MIG applier per node: the lock every changing ``mig-apply`` run takes before it reads the GPUs.

The deploy's run lock only serialises deploys; the applier has other callers (the boot unit
``gpu-provision-mig.service``, ``mig-apply`` by hand, a rollout's deploy). Two at once on one node each plan from the
same state and then create and destroy instances under each other (seen on the rig: "Insufficient Resources", a GPU
left without instances). So an applier takes an exclusive ``flock`` on :data:`LOCK_FILE` first and keeps it until it
ends; the kernel releases it when the process dies however it dies, so a ``kill -9`` leaves no stale lock. A second
applier waits, bounded, then fails naming the holder (pid, command line, since when), which the holder writes into
the lock file once it has the lock. The file lives under ``/run`` (cleared at boot, like the lock it stands for) and
is never removed: removing a locked file would let a third applier lock a new file beside the held one.
Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
from typing import Callable, Iterator

#: Where the lock lives on a node: the project's runtime state directory.
LOCK_FILE = "/run/gpu-provision/mig-apply.lock"
#: Environment variable that names another lock file (tests, or a node with its runtime state elsewhere).
LOCK_ENV = "GPU_PROVISION_MIG_LOCK"
#: Seconds a second applier waits by default: longer than a usual apply with its GPU resets, shorter than the boot
#: unit's ``TimeoutStartSec`` (600), so a boot-time applier behind another one fails with the holder's name first.
WAIT_S = 300.0
POLL_S = 0.1


class LockBusy(Exception):
    """Another applier kept the lock for the whole wait; the message names it."""


def default_path() -> str:
    """The lock file: ``$GPU_PROVISION_MIG_LOCK`` when set, else :data:`LOCK_FILE`."""
    return os.environ.get(LOCK_ENV) or LOCK_FILE


def _command_line() -> str:
    """This process's command line on one line (a message names it; arguments may hold newlines)."""
    try:
        with open("/proc/self/cmdline", "rb") as f:
            words = f.read().decode(errors="replace").split("\0")
    except OSError:
        words = [sys.executable, *sys.argv]
    return " ".join(" ".join(words).split())


def holder(fd: int) -> str:
    """Who holds the lock, as its holder wrote it into the lock file (``unknown`` while it has not yet)."""
    try:
        data = json.loads(os.pread(fd, 65536, 0).decode() or "null")
        return f"pid {data['pid']} ({data['command']}), holding it since {data['since']}"
    except (OSError, ValueError, TypeError, KeyError):
        return "an applier that has not yet written its name"


@contextlib.contextmanager
def held(path: str, timeout: float, say: Callable[[str], None]) -> Iterator[None]:
    """Hold the node's applier lock at ``path`` for the block, waiting at most ``timeout`` seconds for it.

    ``say`` gets one line when the wait begins (naming the holder). Raises :class:`LockBusy` naming the holder when
    the wait runs out, and OSError when the lock file cannot be opened (not root, say).
    """
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        waiting = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise LockBusy(f"another MIG applier holds {path}: {holder(fd)}; waited {timeout:g}s "
                                   "(--lock-timeout)") from None
                if not waiting:
                    say(f"waiting up to {timeout:g}s for {path}, held by {holder(fd)}")
                    waiting = True
                time.sleep(POLL_S)
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"pid": os.getpid(), "command": _command_line(), "since": since}).encode(), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)
    finally:
        os.close(fd)
