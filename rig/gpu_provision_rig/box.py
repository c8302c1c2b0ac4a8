"""Vagrant boxes for the libvirt provider, built here from Debian's archive (Debian 12 and 13) and cached.

Boxes cannot be downloaded on the rig's machines, so the VM tier builds its own, as a base box maker would:

* **Root filesystem**: ``mmdebstrap --variant=minbase`` of the suite with the rig nodes' packages plus a real
  kernel (``linux-image-amd64``), ``udev`` and ``initramfs-tools`` (the initramfs is built in the chroot, with
  Debian's default ``MODULES=most``, so virtio disks and networks boot).
* **Vagrant's conventions** (Vagrant's "Creating a Base Box" documentation; hashicorp/vagrant ``keys/README.md``):
  a ``vagrant`` user whose password is ``vagrant``, passwordless sudo (``/etc/sudoers.d/vagrant``), and Vagrant's
  insecure public key in its ``authorized_keys``, read from the key Debian's ``vagrant`` package installs. Vagrant
  replaces that key with one of its own on the first ``vagrant up`` (``config.ssh.insert_key``, on by default); the
  VM tier's own runner (:mod:`gpu_provision_rig.vm`) logs in with it and reaches the VM only on loopback.
  The root account stays locked. SSH host keys are made at the first boot (``ssh-keygen -A`` before sshd), so
  every VM from the box has its own; ``/etc/machine-id`` is empty for the same reason (systemd makes one).
  No synced folder is needed: the box has no rsync or NFS client, and the project's Vagrantfile disables
  ``/vagrant``.
* **Disk**: one MBR partition (ext4, made from the root directory by ``mke2fs -d``, no mount needed) booted by
  EXTLINUX from ``/vmlinuz`` and ``/initrd.img``, the symbolic links Debian keeps to the newest kernel
  (``/etc/kernel-img.conf``: ``do_symlinks = yes``), so an installed kernel update is the one the next boot runs.
  Rebuilds of the initramfs in a VM take only the modules its hardware needs (:data:`INITRAMFS_MODULES`).
  Converted to qcow2.
* **Box**: ``metadata.json`` (``provider: libvirt``, ``format: qcow2``, ``virtual_size`` in GB: vagrant-libvirt's
  ``example_box/README.md``), ``box.img`` and a ``Vagrantfile`` with the provider settings that work on machines
  without usable hardware virtualisation (QEMU's TCG, a plain CPU model, no graphics), packed as a tar.

The cache key is a digest of the suite, its archive lines, the package list and :data:`CUSTOMIZE_VERSION`, so a
change to any of them builds a new box beside the old one; a box is built under a temporary name and renamed when
complete. The archive moves on (security updates), so a box built later from the same key may hold newer packages:
the key names the recipe, not the bytes. File times inside the image come from ``SOURCE_DATE_EPOCH`` and the
filesystem's UUID and hash seed from the key.
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import json
import logging
import os
import shutil
import subprocess
import tarfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpu_provision_rig.base import ARCHIVE_LINES
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.requirements import NODE_PACKAGES

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BoxSuite:
    """One Debian release a box is built from."""

    #: The box's short name (``debian12``), also its hostname until Vagrant sets one.
    name: str
    #: Debian's codename, as mmdebstrap takes it.
    codename: str
    #: The archive lines the root filesystem is built from (and keeps in its sources).
    archive: tuple[str, ...]


SUITES: dict[str, BoxSuite] = {
    s.codename: s for s in (
        BoxSuite("debian12", "bookworm", ARCHIVE_LINES),  # the rig nodes' own base: one list of Debian 12's lines
        BoxSuite("debian13", "trixie", (
            "deb http://deb.debian.org/debian trixie main",
            "deb http://deb.debian.org/debian trixie-updates main",
            "deb http://deb.debian.org/debian-security trixie-security main")),
    )
}
DEFAULT_SUITE = "bookworm"
#: What the box holds beyond the rig nodes' packages: a real kernel and what boots it (``zstd``: initramfs-tools'
#: default compressor, a recommendation minbase leaves out).
KERNEL_PACKAGES: tuple[str, ...] = ("linux-image-amd64", "initramfs-tools", "udev", "zstd")
BOX_PACKAGES: tuple[str, ...] = (*NODE_PACKAGES, *KERNEL_PACKAGES)
#: The disk's virtual size: room for driver packages, headers and DKMS builds, and the 10 GiB free on ``/`` that
#: the product's preflight asks of a node (qcow2 and the ext4 inside are sparse: the box stays small).
DISK_GB = 20
#: Where the root partition starts (sector 2048, as fdisk aligns it).
PARTITION_OFFSET = 1024 * 1024
# Bump when _customize or the disk layout changes, so cached boxes are rebuilt.
CUSTOMIZE_VERSION = 3
#: File times in the image (2026-01-01T00:00:00Z).
SOURCE_DATE_EPOCH = 1767225600
#: Where Debian's ``vagrant`` package keeps Vagrant's insecure key pair (hashicorp/vagrant ``keys/``).
VAGRANT_KEYS_GLOB = "/usr/share/rubygems-integration/all/gems/vagrant-*/keys"
#: The boot loader's first-stage code, from Debian's ``extlinux`` package.
MBR_CODE = "/usr/lib/EXTLINUX/mbr.bin"
#: Host packages the box builder runs (``scripts/setup-dev.sh`` installs them with the rig's).
BOX_HOST_PACKAGES: tuple[str, ...] = ("mmdebstrap", "e2fsprogs", "fdisk", "extlinux", "qemu-utils", "vagrant")

EXTLINUX_CONF = """\
# Written by the gpu-provision box builder: Debian keeps /vmlinuz and /initrd.img on the newest kernel.
DEFAULT debian
TIMEOUT 0
LABEL debian
  LINUX /vmlinuz
  INITRD /initrd.img
  APPEND root=/dev/vda1 ro console=tty0 console=ttyS0
"""
NETWORK = """\
# Written by the gpu-provision box builder: DHCP on the VM's network, as Vagrant's providers expect.
[Match]
Name=en* eth*

[Network]
DHCP=yes
"""
SSH_HOST_KEYS = """\
# Written by the gpu-provision box builder: each VM makes its own host keys at its first boot, before Debian's
# own configuration test (the list is emptied first: a drop-in's ExecStartPre= lines add to the unit's).
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
"""
SSHD_CONFIG = "# Written by the gpu-provision box builder (Vagrant's base box advice).\nUseDNS no\n"
SUDOERS = "vagrant ALL=(ALL) NOPASSWD: ALL\n"
#: Later initramfs rebuilds (``update-initramfs -u`` in a VM) take only the modules the VM's own hardware needs
#: (initramfs.conf(5): ``MODULES=dep``): under emulation a ``MODULES=most`` rebuild took about seven minutes, a
#: ``dep`` one under one. The box's first initramfs, built in the chroot, keeps Debian's ``most``.
INITRAMFS_MODULES = "# Written by the gpu-provision box builder.\nMODULES=dep\n"
#: The provider settings boxes carry (the user's Vagrantfile overrides them): QEMU without KVM where the host has
#: none usable, a CPU model every QEMU emulates, a serial console instead of graphics.
BOX_VAGRANTFILE = """\
# Written by the gpu-provision box builder.
Vagrant.configure("2") do |config|
  config.vm.synced_folder ".", "/vagrant", disabled: true
  config.vm.provider :libvirt do |lv|
    lv.driver = ENV.fetch("GP_LIBVIRT_DRIVER", "qemu")
    lv.cpu_mode = "custom"
    lv.cpu_model = "qemu64"
    lv.graphics_type = "none"
    lv.disk_bus = "virtio"
  end
end
"""


def suite(codename: str) -> BoxSuite:
    """The suite named ``codename``; a :class:`RigError` naming those there are otherwise."""
    try:
        return SUITES[codename]
    except KeyError:
        raise RigError(f"no box for Debian {codename!r}: choose {', '.join(SUITES)}") from None


def box_key(box_suite: BoxSuite, packages: tuple[str, ...] = BOX_PACKAGES) -> str:
    """Digest naming the box built from these inputs (package order does not matter)."""
    text = json.dumps({"suite": box_suite.codename, "archive": box_suite.archive, "packages": sorted(set(packages)),
                       "customize": CUSTOMIZE_VERSION, "disk_gb": DISK_GB}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Box:
    """A built box: its directory (``metadata.json``, ``box.img``, ``Vagrantfile``) and the ``.box`` file
    ``vagrant box add`` takes."""

    name: str
    directory: Path

    @property
    def image(self) -> Path:
        """The qcow2 disk image VMs are started from (through a copy-on-write overlay)."""
        return self.directory / "box.img"

    @property
    def box_file(self) -> Path:
        return self.directory.with_suffix(".box")

    @property
    def metadata(self) -> dict[str, object]:
        return dict(json.loads((self.directory / "metadata.json").read_text()))

    @property
    def kernel(self) -> str:
        """The kernel version the box boots (``6.1.0-57-amd64``)."""
        return str(self.metadata["gpu_provision"]["kernel"])  # type: ignore[index]


def box_path(cache_dir: Path, box_suite: BoxSuite) -> Path:
    """Where the box for ``box_suite`` lives (whether built or not)."""
    return cache_dir / "boxes" / f"gpu-provision-{box_suite.name}-{box_key(box_suite)}"


def vagrant_keys() -> Path:
    """The directory of Vagrant's insecure key pair as Debian's ``vagrant`` package installs it."""
    found = sorted(glob.glob(VAGRANT_KEYS_GLOB))
    if not found:
        raise RigError(f"Vagrant's insecure key is not installed ({VAGRANT_KEYS_GLOB}): apt-get install vagrant")
    return Path(found[-1])


def ensure_box(cache_dir: Path, codename: str = DEFAULT_SUITE) -> Box:
    """The cached box for Debian ``codename``, built first if it is not there (about two minutes)."""
    box_suite = suite(codename)
    final = box_path(cache_dir, box_suite)
    box = Box(box_suite.name, final)
    if box.box_file.is_file() and box.image.is_file():
        return box
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / "box.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if box.box_file.is_file() and box.image.is_file():
            return box
        building = final.with_name(final.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        try:
            _build(box_suite, building)
            shutil.rmtree(final, ignore_errors=True)
            building.rename(final)
            _pack(box)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return box


def _run(argv: list[str], what: str, **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(argv, capture_output=True, text=True, **kwargs)  # type: ignore[call-overload]
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-5:])
        raise RigError(f"{what} failed (exit {proc.returncode}): {' '.join(argv[:3])} ...\n{tail}")
    return proc


def _build(box_suite: BoxSuite, out: Path) -> None:
    root = out / "root"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    log.info("building box %s: root filesystem from Debian %s", box_suite.name, box_suite.codename)
    _run(["mmdebstrap", "--variant=minbase", f"--include={','.join(BOX_PACKAGES)}", box_suite.codename, str(root),
          *box_suite.archive], "mmdebstrap", env=env)
    kernel = _customize(root, box_suite)
    log.info("building box %s: disk image", box_suite.name)
    raw = out / "disk.raw"
    _disk(root, raw, box_key(box_suite))
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(out / "box.img")], "qemu-img convert")
    raw.unlink()
    shutil.rmtree(root)
    metadata = {"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_GB,
                "gpu_provision": {"suite": box_suite.codename, "kernel": kernel, "key": box_key(box_suite),
                                  "packages": sorted(BOX_PACKAGES)}}
    (out / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    (out / "Vagrantfile").write_text(BOX_VAGRANTFILE)


def _chroot(root: Path, *argv: str, stdin: str | None = None) -> None:
    _run(["chroot", str(root), *argv], f"chroot {argv[0]}", input=stdin)


def _customize(root: Path, box_suite: BoxSuite) -> str:
    """Vagrant's conventions, first-boot host keys, DHCP, the boot loader's configuration; the kernel version."""
    kernels = sorted(p.name.removeprefix("vmlinuz-") for p in (root / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1 or not (root / "vmlinuz").is_symlink():
        raise RigError(f"box {box_suite.name}: expected one kernel and /vmlinuz, found {kernels}")
    (root / "etc/fstab").write_text("/dev/vda1 / ext4 errors=remount-ro 0 1\n")
    (root / "etc/hostname").write_text(box_suite.name + "\n")
    hosts = (root / "etc/hosts").read_text() if (root / "etc/hosts").exists() else "127.0.0.1\tlocalhost\n"
    (root / "etc/hosts").write_text(hosts + f"127.0.1.1\t{box_suite.name}\n")
    (root / "etc/machine-id").write_text("")
    (root / "etc/systemd/network/80-dhcp.network").write_text(NETWORK)
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/systemd/system/ssh.service.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/systemd/system/ssh.service.d/host-keys.conf").write_text(SSH_HOST_KEYS)
    (root / "etc/ssh/sshd_config.d").mkdir(exist_ok=True)
    (root / "etc/ssh/sshd_config.d/vagrant-box.conf").write_text(SSHD_CONFIG)
    _chroot(root, "systemctl", "enable", "systemd-networkd.service", "ssh.service")
    _chroot(root, "useradd", "--create-home", "--shell", "/bin/bash", "--groups", "sudo", "vagrant")
    _chroot(root, "chpasswd", stdin="vagrant:vagrant\n")
    sudoers = root / "etc/sudoers.d/vagrant"
    sudoers.write_text(SUDOERS)
    sudoers.chmod(0o440)
    ssh_dir = root / "home/vagrant/.ssh"
    ssh_dir.mkdir(mode=0o700)
    (ssh_dir / "authorized_keys").write_text((vagrant_keys() / "vagrant.pub").read_text())
    (ssh_dir / "authorized_keys").chmod(0o600)
    _chroot(root, "chown", "-R", "vagrant:vagrant", "/home/vagrant/.ssh")
    (root / "etc/initramfs-tools/conf.d/gpu-provision-box").write_text(INITRAMFS_MODULES)
    (root / "boot/extlinux").mkdir()
    (root / "boot/extlinux/extlinux.conf").write_text(EXTLINUX_CONF)
    return kernels[0]


def _disk(root: Path, raw: Path, key: str) -> None:
    """A sparse raw disk: an MBR with EXTLINUX's code, one bootable ext4 partition holding ``root``."""
    size = DISK_GB * 1024 ** 3
    with open(raw, "wb") as f:
        f.truncate(size)
    _run(["sfdisk", "--quiet", str(raw)], "sfdisk", input=f"label: dos\nstart={PARTITION_OFFSET // 512}, type=83, "
                                                             "bootable\n")
    part_bytes = size - PARTITION_OFFSET
    fs_uuid = str(uuid.UUID(hashlib.sha256(("fs" + key).encode()).hexdigest()[:32]))
    env = {**os.environ, "E2FSPROGS_FAKE_TIME": str(SOURCE_DATE_EPOCH)}
    _run(["mke2fs", "-q", "-t", "ext4", "-L", "root", "-U", fs_uuid, "-d", str(root),
          "-E", f"offset={PARTITION_OFFSET},hash_seed={fs_uuid}", str(raw), f"{part_bytes // 1024}k"], "mke2fs", env=env)
    # EXTLINUX installs its second stage into the mounted filesystem: an offset loop device (no partition devices
    # appear for a file here), mounted on a private directory, always let go.
    loop = _run(["losetup", "--find", "--show", "--offset", str(PARTITION_OFFSET), "--sizelimit", str(part_bytes),
                 str(raw)], "losetup").stdout.strip()
    mount = raw.with_name("mnt")
    mount.mkdir(exist_ok=True)
    try:
        _run(["mount", loop, str(mount)], "mount")
        try:
            _run(["extlinux", "--install", str(mount / "boot/extlinux")], "extlinux --install")
        finally:
            _run(["umount", str(mount)], "umount")
    finally:
        subprocess.run(["losetup", "--detach", loop], capture_output=True)
        mount.rmdir()
    with open(MBR_CODE, "rb") as f:
        code = f.read()
    with open(raw, "r+b") as f:
        f.write(code[:440])  # the boot code only: the partition table after it stays


def _pack(box: Box) -> None:
    """The ``.box`` file: a plain tar of the box directory's three files, written under a temporary name."""
    partial = box.box_file.with_name(box.box_file.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for name in ("metadata.json", "Vagrantfile", "box.img"):
            tar.add(box.directory / name, arcname=name)
    partial.rename(box.box_file)
