"""Processes of this machine found through /proc, for the rig tests that prove nothing of a node is left running."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path


def processes(matches: Callable[[Path, str], bool]) -> list[str]:
    """``"PID: COMMAND LINE"`` of every process (this test process aside) for which ``matches(proc_dir,
    command_line)`` holds; a process that ends while it is read is skipped."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            if matches(proc, cmdline):
                found.append(f"{proc.name}: {cmdline}")
        except OSError:
            continue
    return found
