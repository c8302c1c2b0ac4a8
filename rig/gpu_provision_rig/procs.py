"""Start, find and stop the rig's daemon processes through pid files.

A pid file holds the pid and the process start time (field 22 of ``/proc/PID/stat``), so a pid reused by an
unrelated process after a crash is never signalled.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def _start_time(pid: int) -> str | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # comm (field 2) may contain spaces and parentheses; the fields after the last ')' are fixed.
    fields = stat.rsplit(")", 1)[1].split()
    return fields[19]


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def write_pidfile(pidfile: Path, pid: int) -> None:
    """Record ``pid`` (with its start time) in ``pidfile``."""
    pidfile.parent.mkdir(parents=True, exist_ok=True)
    tmp = pidfile.with_suffix(".tmp")
    tmp.write_text(f"{pid} {_start_time(pid)}\n")
    tmp.replace(pidfile)


def read_pid(pidfile: Path) -> int | None:
    """The live process recorded in ``pidfile``, or None if the file is missing or the process is gone."""
    try:
        pid_text, start = pidfile.read_text().split()
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if _start_time(pid) != start or _is_zombie(pid):
        return None
    return pid


def start_daemon(argv: list[str], pidfile: Path, logfile: Path, env: dict[str, str] | None = None) -> int:
    """Start ``argv`` detached (own session, stdin from /dev/null, output to ``logfile``) and record its pid.

    Does nothing and returns the running pid if ``pidfile`` already names a live process.
    """
    running = read_pid(pidfile)
    if running is not None:
        return running
    logfile.parent.mkdir(parents=True, exist_ok=True)
    with open(logfile, "ab") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, env=env)
    write_pidfile(pidfile, proc.pid)
    return proc.pid


def stop_daemon(pidfile: Path, timeout: float = 15.0, sig: int = signal.SIGTERM) -> bool:
    """Signal the process in ``pidfile``, wait up to ``timeout`` s, then SIGKILL it; remove the pid file.

    Returns True if a live process was found.
    """
    pid = read_pid(pidfile)
    if pid is None:
        pidfile.unlink(missing_ok=True)
        return False
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)
    if not wait_gone(pidfile, timeout):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        wait_gone(pidfile, 5.0)
    pidfile.unlink(missing_ok=True)
    return True


def wait_gone(pidfile: Path, timeout: float) -> bool:
    """Wait until the process in ``pidfile`` has exited; True if it did within ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while read_pid(pidfile) is not None:
        # Our own children must be reaped or they stay zombies and look alive to /proc.
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
