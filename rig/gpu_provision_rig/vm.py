"""VMs of the VM tier: QEMU started from a box (:mod:`gpu_provision_rig.box`), reached only through loopback.

Each VM runs on a copy-on-write overlay of the box's image, so a fresh VM costs a boot, not a copy. Its network
is QEMU's user-mode stack with ``restrict=on``: the guest cannot open a connection to the host or anywhere else.
What it can reach is forwarded explicitly, and nothing else:

* the controller reaches the guest's sshd through a host forward on the VM's own loopback address
  (``127.0.12.N:22``, :data:`LOOPBACK_PREFIX`), as the nspawn rig's nodes are reached on ``127.0.10.N``;
* the guest reaches the rig's apt proxy and package mirror at the addresses the rig's cluster files name
  (``10.77.0.1:3142`` and ``:8080``): the user-mode network uses the rig's subnet (gateway ``10.77.0.2``, DHCP
  from ``10.77.0.230``), and each guest connection to those two ports is relayed by ``socat`` to the same address
  on the host, where the rig's services listen on its bridge. The rig must be up for packages to install.

QEMU emulates the CPU (TCG) unless :data:`ACCEL_ENV` says ``kvm``: on the rig's machines ``/dev/kvm`` is a
paravirtual flavour that cannot boot stock kernels (RIG-NOTES), so boots take tens of seconds and compiling in a
guest is slow. A VM is stopped with an ACPI power-off through QEMU's monitor, and killed only if it does not stop.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from gpu_provision_rig.box import OVMF_CODE, OVMF_VARS, Box
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, MIRROR_PORT
from gpu_provision_rig.errors import RigError

#: VMs are reached on ``127.0.12.N`` port 22 (the nspawn rig's nodes have ``127.0.10.N``).
LOOPBACK_PREFIX = "127.0.12."
#: ``tcg`` (default) or ``kvm``: how QEMU runs the guest's CPU.
ACCEL_ENV = "GPU_PROVISION_VM_ACCEL"
#: The guest-side network: the rig's subnet, so the rig's cluster files' proxy and mirror addresses hold.
GUEST_NET = "10.77.0.0/24"
GUEST_GATEWAY = "10.77.0.2"
GUEST_DHCP_START = "10.77.0.230"
#: The host's ports the guest may reach, on the rig's bridge address.
FORWARDED_PORTS = (APT_PROXY_PORT, MIRROR_PORT)
BOOT_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 90.0
#: Host packages the VM tier runs (``scripts/setup-dev.sh`` installs them with the rig's).
VM_HOST_PACKAGES: tuple[str, ...] = ("qemu-system-x86", "qemu-utils", "socat")


@dataclass(frozen=True)
class VmSpec:
    """One VM: its name, the loopback address it is reached on, its size."""

    name: str
    ssh_address: str
    memory_mb: int = 1536
    #: Two vCPUs: QEMU runs each on a host thread of its own (multi-threaded TCG).
    cpus: int = 2

    def __post_init__(self) -> None:
        index = self.ssh_address.removeprefix(LOOPBACK_PREFIX)
        if index == self.ssh_address or not index.isdigit() or not 1 <= int(index) <= 254:
            raise RigError(f"VM {self.name}: address {self.ssh_address!r} is not {LOOPBACK_PREFIX}N, 1 <= N <= 254")


def qemu_argv(spec: VmSpec, disk: Path, run_dir: Path, accel: str = "tcg", uefi_vars: Path | None = None) -> list[str]:
    """The QEMU command line for ``spec`` on ``disk`` (its overlay), with its monitor, serial log and pid file
    in ``run_dir``; with ``uefi_vars`` (the VM's copy of the variable store) UEFI firmware with Secure Boot, which
    needs a q35 machine with SMM and the flash's secure mode (Debian's ``ovmf``, README.Debian)."""
    relays = ",".join(f"guestfwd=tcp:{BRIDGE_ADDRESS}:{port}-cmd:socat - TCP:{BRIDGE_ADDRESS}:{port}"
                      for port in FORWARDED_PORTS)
    netdev = (f"user,id=net0,restrict=on,net={GUEST_NET},host={GUEST_GATEWAY},dhcpstart={GUEST_DHCP_START},"
              f"hostname={spec.name},hostfwd=tcp:{spec.ssh_address}:22-:22,{relays}")
    cpu = "host" if accel == "kvm" else "qemu64"
    firmware: list[str] = []
    if uefi_vars is not None:
        firmware = ["-machine", "q35,smm=on", "-global", "driver=cfi.pflash01,property=secure,value=on",
                    "-drive", f"if=pflash,format=raw,unit=0,readonly=on,file={OVMF_CODE}",
                    "-drive", f"if=pflash,format=raw,unit=1,file={uefi_vars}"]
    return ["qemu-system-x86_64", "-name", spec.name, *firmware, "-accel", accel, "-cpu", cpu,
            "-m", str(spec.memory_mb),
            "-smp", str(spec.cpus), "-nographic", "-serial", f"file:{run_dir / 'serial.log'}",
            "-monitor", f"unix:{run_dir / 'monitor.sock'},server,nowait", "-pidfile", str(run_dir / "qemu.pid"),
            "-drive", f"file={disk},if=virtio,format=qcow2", "-netdev", netdev,
            "-device", "virtio-net-pci,netdev=net0"]


class Vm:
    """One running (or startable) VM of the tier, its files under ``run_dir``."""

    def __init__(self, spec: VmSpec, box: Box, run_dir: Path) -> None:
        self.spec, self.box, self.run_dir = spec, box, run_dir
        self.disk = run_dir / "disk.qcow2"
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def serial_log(self) -> Path:
        return self.run_dir / "serial.log"

    def start(self, fresh: bool = True) -> None:
        """Start QEMU (on a new overlay of the box's image when ``fresh``); returns once QEMU runs."""
        if self.running():
            raise RigError(f"VM {self.spec.name} is already running")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        if fresh or not self.disk.exists():
            self.disk.unlink(missing_ok=True)
            proc = subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(self.box.image), "-F",
                                   "qcow2", str(self.disk)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise RigError(f"VM {self.spec.name}: qemu-img create failed: {proc.stderr.strip()}")
        uefi_vars = None
        if self.box.secure_boot:
            # The VM's own variable store (what mokutil writes lives there), fresh with a fresh disk.
            uefi_vars = self.run_dir / "OVMF_VARS.fd"
            if fresh or not uefi_vars.exists():
                shutil.copyfile(OVMF_VARS, uefi_vars)
        accel = os.environ.get(ACCEL_ENV, "tcg")
        if accel not in ("tcg", "kvm"):
            raise RigError(f"{ACCEL_ENV}={accel!r}: use tcg or kvm")
        argv = qemu_argv(self.spec, self.disk, self.run_dir, accel, uefi_vars)
        with open(self.run_dir / "qemu.log", "ab") as out:
            self.process = subprocess.Popen(argv, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
        time.sleep(0.5)
        if self.process.poll() is not None:
            tail = (self.run_dir / "qemu.log").read_text(errors="replace").strip().splitlines()[-3:]
            raise RigError(f"VM {self.spec.name}: QEMU exited at once: {' '.join(tail)}")

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def wait_ssh(self, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Seconds until the guest's sshd sends its banner on the VM's loopback address."""
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if not self.running():
                raise RigError(f"VM {self.spec.name} stopped while booting; serial log: {self.serial_log}")
            try:
                with socket.create_connection((self.spec.ssh_address, 22), timeout=3) as conn:
                    conn.settimeout(5)
                    if conn.recv(64).startswith(b"SSH-"):
                        return time.monotonic() - started
            except OSError:
                pass
            time.sleep(2)
        raise RigError(f"VM {self.spec.name}: no sshd on {self.spec.ssh_address}:22 after {timeout:.0f}s; "
                       f"serial log: {self.serial_log}")

    def _monitor(self, command: str) -> None:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(5)
            sock.connect(str(self.run_dir / "monitor.sock"))
            sock.sendall(command.encode() + b"\n")
            time.sleep(0.2)

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """ACPI power-off, then SIGKILL to QEMU's process group if the guest has not stopped in ``timeout``."""
        if self.process is None:
            return
        if self.process.poll() is None:
            try:
                self._monitor("system_powerdown")
                self.process.wait(timeout)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(30)
        self.process = None
