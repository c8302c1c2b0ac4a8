"""Whether a registered GPU process still lives, as /proc tells (stand-in, not NVIDIA software).

A record keeps the pid and its start time, so a pid the kernel has reused for another process is not mistaken for
the one that registered.
"""

from __future__ import annotations

import contextlib


def proc_start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def alive(record: dict) -> bool:
    """True while the registered process still runs (pid and start time match, so reuse is caught)."""
    started = proc_start_time(int(record["pid"]))
    if started is None:
        return False
    state = ""
    with contextlib.suppress(OSError), open(f"/proc/{record['pid']}/stat", encoding="utf-8") as fh:
        data = fh.read()
        state = data[data.rfind(")") + 2 :].split()[0]
    return started == record.get("start_time", started) and state != "Z"
