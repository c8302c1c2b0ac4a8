"""One rig node: its overlay root, the files written into it before boot, and the process that keeps it running.

The node process (``python -m gpu_provision_rig.node ...``) runs ``systemd-nspawn -b`` on the node's overlay root
and, each time the node's systemd has started, makes the node able to run Docker and shows it its simulated PCI
devices (see :func:`after_boot`). When the node reboots itself (nspawn exits with 133) it boots it again; on
SIGTERM it powers the node off cleanly and exits.

Device nodes: the rig runs nspawn with ``--keep-unit --register=no`` (required on a host whose PID 1 is not
systemd), so no scope unit is made for the node and ``--property=DeviceAllow=...`` has nothing to apply to; nspawn
then installs no device cgroup policy at all, the node's processes stay in the host's device cgroup, and nspawn keeps
CAP_MKNOD, so ``mknod /dev/nvidia0 c 195 0`` works in a node (opening it gives ENXIO: no driver is behind it).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from gpu_provision_rig import cgroups
from gpu_provision_rig.config import (
    BRIDGE_NAME,
    PASSWORD_SUDO_USER,
    SUDO_PASSWORD,
    SUDO_USER,
    RigNode,
    RigPaths,
)
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.hardware import NODE_PCI_DIR, write_hardware
from gpu_provision_rig.procs import read_pid, write_pidfile

log = logging.getLogger("gpu_provision_rig.node")

REBOOT_EXIT = 133
CGROUP_V1_CONTROLLERS = ("cpuset", "memory", "devices", "blkio", "cpu", "pids", "freezer", "cpuacct",
                         "cpu,cpuacct", "net_cls,net_prio", "perf_event", "hugetlb")
LEADER_WAIT_S = 30.0

NETWORK_UNIT = """\
# Written by the gpu-provision rig: the node's one address, on the rig bridge. No gateway: nothing leaves.
[Match]
Name=host0

[Network]
Address={address}/24
LinkLocalAddressing=no
IPv6AcceptRA=no
"""


@dataclass(frozen=True)
class NodeLayout:
    """Where one node's files live in the rig state directory."""

    dir: Path

    @classmethod
    def of(cls, paths: RigPaths, name: str) -> NodeLayout:
        """Layout of node ``name`` in ``paths``."""
        return cls(paths.node_dir(name))

    @property
    def upper(self) -> Path:
        """Overlay upper dir: everything the node changed; wiping it makes the node fresh."""
        return self.dir / "upper"

    @property
    def work(self) -> Path:
        """Overlay work dir."""
        return self.dir / "work"

    @property
    def root(self) -> Path:
        """Mount point of the node's overlay root."""
        return self.dir / "root"

    @property
    def docker(self) -> Path:
        """Plain host dir bound to the node's /var/lib/docker (overlay2 cannot stack on an overlay root)."""
        return self.dir / "docker"

    @property
    def host_key(self) -> Path:
        """The node's ssh host key, kept across resets."""
        return self.dir / "ssh_host_ed25519_key"

    @property
    def pidfile(self) -> Path:
        """Pid file of the node process (the nspawn supervisor)."""
        return self.dir / "node.pid"

    @property
    def leader_pidfile(self) -> Path:
        """Pid file of the node's PID 1 (its systemd) as the host sees it; present while booted."""
        return self.dir / "leader.pid"

    @property
    def log(self) -> Path:
        """Output of the node process and of nspawn."""
        return self.dir / "node.log"


def is_mounted(path: Path) -> bool:
    """Whether ``path`` is a mount point in the host's mount namespace."""
    target = str(path.resolve())
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == target for line in f)


def mount_overlay(layout: NodeLayout, base: Path) -> None:
    """Mount the node's overlay root (base read-only below, the node's upper dir on top) unless mounted."""
    if is_mounted(layout.root):
        return
    for d in (layout.upper, layout.work, layout.root, layout.docker):
        d.mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={base},upperdir={layout.upper},workdir={layout.work}"
    proc = subprocess.run(["mount", "-t", "overlay", "overlay", "-o", opts, str(layout.root)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RigError(f"mounting the overlay root of {layout.dir.name}: {proc.stderr.strip()}")


def unmount_overlay(layout: NodeLayout) -> None:
    """Unmount the node's overlay root if mounted."""
    while is_mounted(layout.root):
        proc = subprocess.run(["umount", str(layout.root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RigError(f"unmounting {layout.root}: {proc.stderr.strip()}")


def wipe(layout: NodeLayout) -> None:
    """Forget everything the node changed (overlay upper and work dirs, Docker data). The node must be down."""
    for d in (layout.upper, layout.work, layout.docker):
        if d.exists():
            shutil.rmtree(d)

SUDOERS_FILE = "etc/sudoers.d/gpu-provision-rig"
SUDOERS = f"""\
# Written by the gpu-provision rig: {SUDO_USER} becomes root without a password; {PASSWORD_SUDO_USER} (group sudo) with its own.
{SUDO_USER} ALL=(ALL:ALL) NOPASSWD: ALL
"""


def _in_root(root: Path, *argv: str, input: str | None = None) -> None:
    """Run one of the node's own programs chrooted into its (not yet booted) root."""
    proc = subprocess.run(["chroot", str(root), *argv], capture_output=True, text=True, input=input)
    if proc.returncode != 0:
        raise RigError(f"{' '.join(argv[:1])} in {root}: {proc.stderr.strip()}")


def _ids(root: Path, user: str) -> tuple[int, int] | None:
    """``(uid, gid)`` of ``user`` in the node's own ``/etc/passwd``, or None."""
    for line in (root / "etc/passwd").read_text().splitlines():
        fields = line.split(":")
        if fields[0] == user and len(fields) > 3:
            return int(fields[2]), int(fields[3])
    return None


def add_login_users(root: Path, client_pubkey: str) -> None:
    """The node's sudo login users, both logging in with the rig's key (idempotent).

    :data:`SUDO_USER` is in group ``sudo`` and becomes root without a password (a file in ``/etc/sudoers.d``), as
    the default user of a cloud image does; :data:`PASSWORD_SUDO_USER` is in group ``sudo`` and must give
    :data:`SUDO_PASSWORD` (Debian's ``%sudo ALL=(ALL:ALL) ALL``). Made with the node's own ``useradd`` and
    ``chpasswd`` (chrooted), so the accounts are what Debian makes; neither can log in with a password over SSH.
    """
    for user, password in ((SUDO_USER, None), (PASSWORD_SUDO_USER, SUDO_PASSWORD)):
        if _ids(root, user) is None:
            # "*": no password, but not locked either (a locked account may be refused key logins too).
            _in_root(root, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo",
                     "--password", "*", user)
        if password is not None:
            _in_root(root, "chpasswd", input=f"{user}:{password}\n")
        ids = _ids(root, user)
        if ids is None:
            raise RigError(f"useradd made no user {user} in {root}")
        ssh_dir = root / "home" / user / ".ssh"
        ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        keys = ssh_dir / "authorized_keys"
        keys.write_text(client_pubkey + "\n")
        keys.chmod(0o600)
        for path in (ssh_dir, keys):
            os.chown(path, *ids)
    sudoers = root / SUDOERS_FILE
    sudoers.write_text(SUDOERS)
    sudoers.chmod(0o440)


def write_node_files(layout: NodeLayout, node: RigNode, client_pubkey: str) -> None:
    """Write the node's identity, address, keys, sudo login users and simulated hardware into its mounted root
    (before boot)."""
    root = layout.root
    (root / "etc/hostname").write_text(node.name + "\n")
    (root / "etc/hosts").write_text(f"127.0.0.1\tlocalhost\n127.0.1.1\t{node.name}\n")
    (root / "etc/machine-id").write_text(hashlib.sha256(node.name.encode()).hexdigest()[:32] + "\n")
    (root / "etc/resolv.conf").unlink(missing_ok=True)
    (root / "etc/resolv.conf").write_text("# No DNS on the rig: apt reaches the archive through the proxy.\n")
    netdir = root / "etc/systemd/network"
    netdir.mkdir(parents=True, exist_ok=True)
    (netdir / "10-gpu-provision-rig.network").write_text(NETWORK_UNIT.format(address=node.bridge_address))
    for src, mode in ((layout.host_key, 0o600), (layout.host_key.with_suffix(".pub"), 0o644)):
        dest = root / "etc/ssh" / src.name
        shutil.copyfile(src, dest)
        dest.chmod(mode)
    ssh_dir = root / "root/.ssh"
    ssh_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    (ssh_dir / "authorized_keys").write_text(client_pubkey + "\n")
    (ssh_dir / "authorized_keys").chmod(0o600)
    add_login_users(root, client_pubkey)
    write_hardware(root, node)


def nspawn_argv(layout: NodeLayout, name: str) -> list[str]:
    """The systemd-nspawn command line booting the node."""
    return [
        "systemd-nspawn", "--boot", f"--directory={layout.root}", f"--machine={name}",
        "--register=no", "--keep-unit", "--console=passive", "--link-journal=no", "--resolv-conf=off",
        f"--network-bridge={BRIDGE_NAME}",
        # Docker in the node needs to create keyrings and load BPF programs (device cgroup, networking).
        "--system-call-filter=@keyring", "--system-call-filter=bpf",
        f"--bind={layout.docker}:/var/lib/docker",
    ]


def find_leader(nspawn_pid: int) -> int | None:
    """The node's PID 1 as the host sees it, once nspawn has exec'd systemd in it; else None."""
    try:
        children = Path(f"/proc/{nspawn_pid}/task/{nspawn_pid}/children").read_text().split()
    except OSError:
        return None
    for child in children:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "systemd":
                return int(child)
        except OSError:
            continue
    return None


def nsenter(leader: int, *argv: str, namespaces: tuple[str, ...] = ("-m",)) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` in the given namespaces of the node whose PID 1 is ``leader``."""
    return subprocess.run(["nsenter", "-t", str(leader), *namespaces, *argv], capture_output=True, text=True)


AFTER_BOOT_SCRIPT = """\
set -u
rc=0
for c in {controllers}; do
    d=/sys/fs/cgroup/$c
    if [ -d "$d" ] && [ ! -L "$d" ]; then mount -o remount,bind,rw "$d" || rc=1; fi
done
mount --bind -o ro /{pci_dir} /sys/bus/pci/devices || rc=1
exit $rc
"""


def after_boot(leader: int) -> None:
    """Make a freshly started node usable: cgroup controllers writable for Docker, simulated PCI view in place.

    Runs as one shell script in the node's mount namespace, right after its systemd was exec'd and before any unit
    (Docker included) has started.
    """
    script = AFTER_BOOT_SCRIPT.format(controllers=" ".join(CGROUP_V1_CONTROLLERS), pci_dir=NODE_PCI_DIR)
    proc = nsenter(leader, "sh", "-c", script)
    if proc.returncode != 0:
        log.warning("setting up node with PID 1 %d: %s", leader, proc.stderr.strip())


class NodeProcess:
    """Keeps one node booted: runs nspawn, sets the node up after each boot, boots again after a reboot."""

    def __init__(self, layout: NodeLayout, name: str):
        self.layout = layout
        self.name = name
        self.stopping = False
        self.nspawn: subprocess.Popen[bytes] | None = None

    def on_term(self, signum: int, _frame: object) -> None:
        """Power the node off cleanly (nspawn turns SIGTERM into a poweroff request) and stop rebooting it."""
        self.stopping = True
        if self.nspawn is not None and self.nspawn.poll() is None:
            self.nspawn.send_signal(signal.SIGTERM)

    def watch_boot(self, nspawn: subprocess.Popen[bytes]) -> None:
        """Wait for the node's systemd, then set the node up and record its PID 1."""
        deadline = time.monotonic() + LEADER_WAIT_S
        while nspawn.poll() is None and time.monotonic() < deadline:
            leader = find_leader(nspawn.pid)
            if leader is not None:
                after_boot(leader)
                write_pidfile(self.layout.leader_pidfile, leader)
                log.info("node %s booted, PID 1 is %d on the host", self.name, leader)
                return
            time.sleep(0.02)
        log.error("node %s: no systemd seen within %.0f s", self.name, LEADER_WAIT_S)

    def run(self) -> int:
        """Boot the node until it powers off or is stopped; returns nspawn's last exit status."""
        signal.signal(signal.SIGTERM, self.on_term)
        signal.signal(signal.SIGINT, self.on_term)
        rc = 0
        while not self.stopping:
            self.layout.leader_pidfile.unlink(missing_ok=True)
            self.nspawn = subprocess.Popen(nspawn_argv(self.layout, self.name), stdin=subprocess.DEVNULL)
            watcher = threading.Thread(target=self.watch_boot, args=(self.nspawn,), daemon=True)
            watcher.start()
            rc = self.nspawn.wait()
            watcher.join(timeout=1)
            self.layout.leader_pidfile.unlink(missing_ok=True)
            if rc != REBOOT_EXIT:
                break
            log.info("node %s rebooted itself; booting it again", self.name)
        log.info("node %s is down (nspawn exit %d)", self.name, rc)
        return rc


def leader_pid(layout: NodeLayout) -> int | None:
    """The running node's PID 1 as the host sees it, or None."""
    return read_pid(layout.leader_pidfile)


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of the node process."""
    parser = argparse.ArgumentParser(description="Keep one gpu-provision rig node booted.")
    parser.add_argument("--name", required=True)
    parser.add_argument("--dir", required=True, type=Path, help="the node's directory in the rig state")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(message)s", stream=sys.stdout)
    os.chdir("/")
    cgroups.enter(args.dir, args.name)  # before nspawn: the node's processes in cgroups of its own
    NodeProcess(NodeLayout(args.dir), args.name).run()


if __name__ == "__main__":
    main()
