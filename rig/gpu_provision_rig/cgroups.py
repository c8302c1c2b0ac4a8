"""Each rig node in cgroups of its own on the host: isolated from the other nodes, and every process of it findable.

The rig runs ``systemd-nspawn --keep-unit --register=no`` (the host's PID 1 is not systemd), so nspawn makes no
scope unit: it puts the node's systemd in ``payload/`` (and itself in ``supervisor/``) below the cgroup it was
started in. Every node process used to start in the same cgroup, so every node's systemd shared one tree: node A's
``/system.slice/ssh.service`` was node B's too. Each node's systemd read the other nodes' processes in its units'
``cgroup.procs`` as pid 0 and logged "Failed to migrate controller cgroups ...: Input/output error" at every boot,
and a unit starting in one node could find its cgroup removed by another node's systemd at that moment: the likely
cause of the exec failures (status 219/CGROUP) of ``systemd-journal-flush.service``, a short unit every node starts
at once, seen when several nodes booted together and left a node "degraded".

:func:`enter` therefore moves the node process, before it starts nspawn, into ``gpu-provision-rig-<node>`` below
its own cgroup in every hierarchy the host has mounted (cgroup v1 controllers, ``name=systemd``, the unified
one), and records the paths in the node's directory. Everything the node runs, nspawn and the node's systemd
included, stays below them; :func:`processes` lists it, :func:`clear` waits for it to end (bounded), kills what is
left and removes the cgroups, so a stopped node leaves no process behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PREFIX = "gpu-provision-rig-"
#: Files a new cpuset cgroup must be given before a process may join it (cgroup v1 leaves them empty).
CPUSET_FILES = ("cpuset.cpus", "cpuset.mems")
#: Seconds :func:`clear` waits for processes it killed to be gone.
KILL_WAIT_S = 10.0


def hierarchies() -> list[tuple[Path, str]]:
    """``(mount point, key)`` of every cgroup hierarchy mounted on the host; the key is how ``/proc/PID/cgroup``
    names it (``cpu``, ``name=systemd``, ``""`` for the unified one)."""
    controllers = {line.split()[0] for line in Path("/proc/cgroups").read_text().splitlines()[1:] if line.strip()}
    found: list[tuple[Path, str]] = []
    seen: set[str] = set()
    with open("/proc/self/mountinfo") as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            fstype, super_options = fields[sep + 1], fields[sep + 3]
            if fstype == "cgroup2":
                key = ""
            elif fstype == "cgroup":
                key = ",".join(o for o in super_options.split(",") if o in controllers or o.startswith("name="))
            else:
                continue
            if key not in seen and fields[3] == "/":
                seen.add(key)
                found.append((Path(fields[4]), key))
    return found


def own_paths(pid: int | str = "self") -> dict[str, str]:
    """The cgroup of process ``pid`` in each hierarchy, by key (see :func:`hierarchies`)."""
    paths = {}
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, key, path = line.split(":", 2)
        paths[key] = path
    return paths


def record(node_dir: Path) -> Path:
    """The file in a node's directory that lists its cgroups, one absolute path a line."""
    return node_dir / "cgroups"


def enter(node_dir: Path, name: str) -> list[Path]:
    """Move the calling process into cgroups of node ``name`` (made below its own ones) and record them."""
    mine = own_paths()
    made = []
    for mount, key in hierarchies():
        if key not in mine:
            continue
        parent = mount / mine[key].lstrip("/")
        target = parent / f"{PREFIX}{name}"
        target.mkdir(exist_ok=True)
        for cpuset_file in CPUSET_FILES:
            if (target / cpuset_file).exists() and not (target / cpuset_file).read_text().strip():
                (target / cpuset_file).write_text((parent / cpuset_file).read_text())
        (target / "cgroup.procs").write_text(f"{os.getpid()}\n")
        made.append(target)
    tmp = record(node_dir).with_suffix(".tmp")
    tmp.write_text("".join(f"{p}\n" for p in made))
    tmp.replace(record(node_dir))
    return made


def recorded(node_dir: Path) -> list[Path]:
    """The node's cgroups as :func:`enter` recorded them (none if it never ran or they were removed)."""
    try:
        return [Path(line) for line in record(node_dir).read_text().splitlines() if line]
    except OSError:
        return []


def processes(node_dir: Path) -> set[int]:
    """Every process in the node's cgroups or below them, as host pids."""
    pids: set[int] = set()
    for top in recorded(node_dir):
        for dirpath, _dirs, files in os.walk(top):
            if "cgroup.procs" in files:
                with contextlib.suppress(OSError):
                    pids.update(int(p) for p in Path(dirpath, "cgroup.procs").read_text().split())
    return pids


def clear(node_dir: Path, grace: float) -> set[int]:
    """Wait up to ``grace`` seconds for the node's processes to end, SIGKILL those left (bounded wait again),
    then remove the node's cgroups, deepest first. Returns the pids that had to be killed."""
    deadline = time.monotonic() + grace
    while processes(node_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    killed = processes(node_dir)
    deadline = time.monotonic() + KILL_WAIT_S
    while (left := processes(node_dir)) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
    # A killed process leaves its cgroup at once but stays in the process table until its parent reaps it.
    while any(Path(f"/proc/{pid}").exists() for pid in killed) and time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(-1, os.WNOHANG)  # our own children (the node process) are ours to reap
        time.sleep(0.05)
    for top in recorded(node_dir):
        for dirpath, _dirs, _files in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
            with contextlib.suppress(OSError):
                os.rmdir(dirpath)
    if not any(top.exists() for top in recorded(node_dir)):
        record(node_dir).unlink(missing_ok=True)
    return killed
