"""A simulated fleet: up to 1,000 sshd processes on loopback addresses, one Debian root shared by all.

Hosts take 127.0.20.1 .. 127.0.20.200, then 127.0.21.1 .. 200, and so on up to 127.0.24.200 (200 per /24, so the
bad hosts' 127.0.20.250 and .251 stay free); every address is in 127.0.0.0/8 and reaches nothing off the machine.

Each host is a real sshd with its own host key, listening on its own loopback address, so every tool reaches it
over real SSH exactly as it reaches a rig node. The hosts share one root file system (an overlay of the rig's
Debian base image), which is enough because every tool here only reads. There is no systemd in it, so service
checks are left out of the fleet's workload.

Everything runs under a supervisor in private mount and PID namespaces (``unshare --mount --pid --fork``): the
overlay and /proc mounts are invisible to the host and vanish with it, and when the supervisor exits, on
``stop()`` (``unshare --kill-child``), or after ``max_seconds``, the kernel kills every sshd and session in the namespace. The supervisor also dies
with the process that started it (``PR_SET_PDEATHSIG``), so a benchmark killed outright leaves nothing running.
Before starting, :func:`check_limits` refuses a fleet this machine's process, file-descriptor or memory limits
could not hold.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "127.0."
FIRST_OCTET = 20
PER_NETWORK = 200
MAX_HOSTS = 1000
#: What one idle sshd and one connection in flight cost, for :func:`check_limits` (measured: about 2 MiB private
#: memory per idle sshd on Debian 12; a session adds two sshd and one python3).
MIB_PER_HOST = 4
PROCESSES_PER_HOST = 4
FDS_PER_HOST = 8
SSHD_CONFIG = """\
ListenAddress {address}:22
HostKey /etc/ssh/bench/host_{index}
AuthorizedKeysFile /etc/ssh/bench/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
UseDNS no
PidFile none
MaxStartups 200:30:400
MaxSessions 50
StrictModes no
"""


@dataclass(frozen=True)
class FleetHost:
    """One simulated host."""

    name: str
    address: str


def address(index: int) -> str:
    """Host ``index`` (1-based): 127.0.20.1 .. 127.0.20.200, then 127.0.21.1 .."""
    network, host = divmod(index - 1, PER_NETWORK)
    return f"{PREFIX}{FIRST_OCTET + network}.{host + 1}"


def hosts(count: int) -> list[FleetHost]:
    """``fleet-0001`` .. on ``127.0.20.1`` .."""
    if not 1 <= count <= MAX_HOSTS:
        raise ValueError(f"fleet size {count} outside 1..{MAX_HOSTS}")
    return [FleetHost(f"fleet-{i:04d}", address(i)) for i in range(1, count + 1)]


def check_limits(count: int, parallel: int) -> list[str]:
    """Why this machine cannot hold ``count`` sshd hosts with ``parallel`` sessions at once (empty: it can).

    Checked against the process limits (``RLIMIT_NPROC``, ``kernel.pid_max``), the hard open-file limit the
    supervisor and the controller raise their soft limit to, and the memory available now.
    """
    problems = []
    processes = count + PROCESSES_PER_HOST * parallel + 64
    nproc = resource.getrlimit(resource.RLIMIT_NPROC)[1]
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    if nproc != resource.RLIM_INFINITY and processes > nproc:
        problems.append(f"{processes} processes needed, RLIMIT_NPROC is {nproc}")
    if processes > pid_max // 2:
        problems.append(f"{processes} processes needed, kernel.pid_max is {pid_max}")
    fds = FDS_PER_HOST * max(parallel, 1) + count + 256
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and fds > hard:
        problems.append(f"{fds} open files needed, the hard limit (ulimit -Hn) is {hard}")
    available = _available_mib()
    if available is not None and MIB_PER_HOST * (count + parallel) > available:
        problems.append(f"about {MIB_PER_HOST * (count + parallel)} MiB needed, {available} MiB available")
    return problems


def raise_open_files() -> int:
    """Raise this process's soft open-file limit to its hard limit (children inherit it); returns the new limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _available_mib() -> int | None:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return None


def _die_with_parent() -> None:
    # PR_SET_PDEATHSIG (1) with SIGKILL: unshare dies when the benchmark does, and --kill-child takes the
    # namespace with it.
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)


def tree_cpu_seconds(root_pid: int) -> float:
    """CPU seconds (user and system) spent so far by ``root_pid`` and every process under it, the finished ones
    included: each live process's own time plus what its reaped children spent (``/proc/PID/stat`` fields
    14-17). A finished child is counted once, in its parent's; a zombie not yet reaped, in its own entry."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry.name)
        children.setdefault(int(fields[1]), []).append(pid)
        ticks[pid] = sum(int(f) for f in fields[11:15])
    total, queue = 0, [root_pid]
    while queue:
        pid = queue.pop()
        total += ticks.get(pid, 0)
        queue += children.get(pid, [])
    return total / os.sysconf("SC_CLK_TCK")


class LoopbackFleet:
    """The fleet's files under ``workdir`` and its supervisor process."""

    def __init__(self, workdir: Path, base: Path, count: int, max_seconds: int = 1800):
        self.workdir = workdir
        self.base = base
        self.count = count
        self.max_seconds = max_seconds
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def client_key(self) -> Path:
        """Private key every host accepts for root."""
        return self.workdir / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        """known_hosts with every host's key under its address."""
        return self.workdir / "known_hosts"

    def prepare(self, converge: str) -> None:
        """Keys, sshd configs and the converge script, written into the overlay's upper layer."""
        upper = self.workdir / "upper"
        keydir = upper / "etc" / "ssh" / "bench"
        keydir.mkdir(parents=True, exist_ok=True)
        (self.workdir / "work").mkdir(exist_ok=True)
        (self.workdir / "root").mkdir(exist_ok=True)
        if not self.client_key.exists():
            _keygen(self.client_key, "gpu-provision-bench")
        shutil.copy(str(self.client_key) + ".pub", keydir / "authorized_keys")
        entries = []
        for index, host in enumerate(hosts(self.count), start=1):
            key = keydir / f"host_{index}"
            if not key.exists():
                _keygen(key, host.name)
            (keydir / f"sshd_{index}.conf").write_text(SSHD_CONFIG.format(address=host.address, index=index))
            entries.append(f"{host.address} {(key.with_suffix('.pub')).read_text().split(' ')[0]} "
                           f"{key.with_suffix('.pub').read_text().split(' ')[1]}")
        self.known_hosts.write_text("\n".join(entries) + "\n")
        (upper / "etc" / "resolv.conf").write_bytes(Path("/etc/resolv.conf").read_bytes())
        (self.workdir / "converge.sh").write_text(converge)

    def start(self, timeout: float | None = None) -> list[FleetHost]:
        """Start the supervisor (which converges the root, then starts every sshd) and wait for all banners
        (by default 120 s, or 0.3 s per host for larger fleets)."""
        timeout = timeout if timeout is not None else max(120.0, 0.3 * self.count)
        log = open(self.workdir / "supervisor.log", "wb")  # noqa: SIM115 (outlives this call, closed by the child)
        self.proc = subprocess.Popen(
            ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--propagation", "private", sys.executable, "-m", "bench.fleet",
             "supervise", str(self.workdir), str(self.base), str(self.count), str(self.max_seconds)],
            stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[1],
            preexec_fn=_die_with_parent)
        log.close()
        waiting = {h.address for h in hosts(self.count)}
        deadline = time.monotonic() + timeout
        while waiting:
            if self.proc.poll() is not None:
                raise RuntimeError(f"fleet supervisor exited; see {self.workdir / 'supervisor.log'}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"{len(waiting)} fleet sshd did not answer within {timeout:.0f} s")
            waiting = {a for a in waiting if not _banner(a)}
            if waiting:
                time.sleep(0.2)
        return hosts(self.count)

    def cpu_seconds(self) -> float:
        """CPU seconds the fleet (supervisor, every sshd and every session) has spent so far."""
        return tree_cpu_seconds(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        """Stop the supervisor; the kernel ends every process of its namespace with it."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            # unshare ignores SIGTERM while it waits; killing it makes the kernel kill its child (--kill-child),
            # the namespace's PID 1, and with it every process of the namespace.
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def __enter__(self) -> LoopbackFleet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)


def _banner(address: str) -> bool:
    try:
        with socket.create_connection((address, 22), timeout=0.5) as sock:
            sock.settimeout(1.0)
            return sock.recv(8).startswith(b"SSH-")
    except OSError:
        return False


# -- inside the namespaces -------------------------------------------------------------------------------------


def supervise(workdir: Path, base: Path, count: int, max_seconds: int) -> int:
    """PID 1 of the fleet's namespace: mount the root, converge it, run the sshds until told to stop."""
    raise_open_files()
    root = workdir / "root"
    run = ["mount", "-t", "overlay", "overlay", "-o",
           f"lowerdir={base},upperdir={workdir / 'upper'},workdir={workdir / 'work'}", str(root)]
    subprocess.run(run, check=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    subprocess.run(["mount", "--rbind", "/dev", str(root / "dev")], check=True)
    (root / "run" / "sshd").mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8", "HOME": "/root"}
    converge = subprocess.run(["chroot", str(root), "/bin/sh", "-c", (workdir / "converge.sh").read_text()],
                              env=env, capture_output=True, text=True)
    if converge.returncode != 0:
        print(f"converge failed: {converge.stderr}", file=sys.stderr)
        return 1
    children = [subprocess.Popen(["chroot", str(root), "/usr/sbin/sshd", "-D", "-e", "-f",
                                  f"/etc/ssh/bench/sshd_{i}.conf"], env=env, stderr=subprocess.DEVNULL)
                for i in range(1, count + 1)]
    stop = {"now": False}

    def on_term(signum: int, frame: object) -> None:
        stop["now"] = True

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)
    deadline = time.monotonic() + max_seconds
    while not stop["now"] and time.monotonic() < deadline:
        # PID 1 of the namespace inherits every orphaned session process: reap them.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        time.sleep(0.2)
    for child in children:
        if child.poll() is None:
            child.terminate()
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m bench.fleet supervise WORKDIR BASE COUNT MAX_SECONDS`` (run by :class:`LoopbackFleet`)."""
    parser = argparse.ArgumentParser(prog="bench.fleet")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("supervise")
    p.add_argument("workdir", type=Path)
    p.add_argument("base", type=Path)
    p.add_argument("count", type=int)
    p.add_argument("max_seconds", type=int)
    args = parser.parse_args(argv)
    return supervise(args.workdir, args.base, args.count, args.max_seconds)


if __name__ == "__main__":
    sys.exit(main())
