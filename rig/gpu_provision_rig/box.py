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

**Secure Boot boxes** (``ensure_box(..., secure_boot=True)``) boot through UEFI with Secure Boot on,
the way Debian's installer sets a machine up: Debian's ``shim-signed`` (shim, signed by Microsoft's UEFI CA), which
loads Debian's signed GRUB (``grub-efi-amd64-signed``), which loads Debian's signed kernel through shim's
verification. The disk is GPT with an EFI system partition holding those three (shim as the removable-media path
``EFI/BOOT/BOOTX64.EFI``, with shim's MOK Manager ``mmx64.efi`` beside it), a ``grub.cfg`` where the signed GRUB
looks for it (its built-in prefix ``/EFI/debian``), the kernel and its initramfs; the root filesystem is the second
partition. VMs of such a box start with a copy of Debian's ``ovmf`` variable store that has Microsoft's keys
enrolled and Secure Boot on (``OVMF_VARS_4M.ms.fd``; the package's ``README.Debian``), so the guest's kernel sees
the firmware's real variables: ``SecureBoot``, ``db``, and shim's ``MokListRT``. The box also holds ``mokutil`` and
``openssl`` (what a Secure Boot host uses to make and enroll module signing keys). It is the VM tier's own: its
firmware settings are QEMU's (:mod:`gpu_provision_rig.vm`), so it is not packed as a ``.box`` for ``vagrant up``.

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
#: Host packages the box builder runs (``scripts/setup-dev.sh`` installs them with the rig's): ``dosfstools``,
#: ``mtools`` and ``ovmf`` for Secure Boot boxes (the EFI system partition; the firmware and its variable store).
BOX_HOST_PACKAGES: tuple[str, ...] = ("mmdebstrap", "e2fsprogs", "fdisk", "extlinux", "qemu-utils", "vagrant",
                                      "dosfstools", "mtools", "ovmf")
#: What a Secure Boot box holds beyond a box's packages.
SECURE_BOOT_PACKAGES: tuple[str, ...] = ("mokutil", "openssl")
#: The signed boot chain on the EFI system partition: (Debian package, file in it, path on the partition).
EFI_BINARIES: tuple[tuple[str, str, str], ...] = (
    ("shim-signed", "usr/lib/shim/shimx64.efi.signed", "EFI/BOOT/BOOTX64.EFI"),
    ("shim-helpers-amd64-signed", "usr/lib/shim/mmx64.efi.signed", "EFI/BOOT/mmx64.efi"),
    ("grub-efi-amd64-signed", "usr/lib/grub/x86_64-efi-signed/grubx64.efi.signed", "EFI/BOOT/grubx64.efi"),
)
#: The signed GRUB's built-in prefix: it reads ``grub.cfg`` from there on the partition it was loaded from.
GRUB_PREFIX = "EFI/debian"
#: The EFI system partition's size; the root partition follows it.
ESP_MB = 256
#: The firmware a Secure Boot box's VMs run (Debian's ``ovmf``, README.Debian): code read-only, the variable store
#: copied per VM, with Microsoft's keys in KEK and db and Secure Boot on.
OVMF_CODE = "/usr/share/OVMF/OVMF_CODE_4M.ms.fd"
OVMF_VARS = "/usr/share/OVMF/OVMF_VARS_4M.ms.fd"
EFI_GRUB_CFG = """# Written by the gpu-provision box builder: the kernel and initramfs on this partition, the root file system by UUID.
set timeout=0
linux /vmlinuz root=UUID={root} ro console=tty0 console=ttyS0
initrd /initrd.img
boot
"""

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


def box_key(box_suite: BoxSuite, packages: tuple[str, ...] = BOX_PACKAGES, secure_boot: bool = False) -> str:
    """Digest naming the box built from these inputs (package order does not matter)."""
    recipe: dict[str, object] = {"suite": box_suite.codename, "archive": box_suite.archive,
                                 "packages": sorted(set(packages)), "customize": CUSTOMIZE_VERSION, "disk_gb": DISK_GB}
    if secure_boot:
        recipe.update(packages=sorted({*packages, *SECURE_BOOT_PACKAGES}), efi=EFI_BINARIES, esp_mb=ESP_MB,
                      grub=EFI_GRUB_CFG)
    text = json.dumps(recipe, sort_keys=True)
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

    @property
    def secure_boot(self) -> bool:
        """Whether the box boots through UEFI with Secure Boot on (its VMs then need :data:`OVMF_CODE`)."""
        return self.metadata["gpu_provision"].get("firmware") == "uefi-secure-boot"  # type: ignore[attr-defined]


def box_path(cache_dir: Path, box_suite: BoxSuite, secure_boot: bool = False) -> Path:
    """Where the box for ``box_suite`` lives (whether built or not)."""
    kind = "-sb" if secure_boot else ""
    return cache_dir / "boxes" / f"gpu-provision-{box_suite.name}{kind}-{box_key(box_suite, secure_boot=secure_boot)}"


def vagrant_keys() -> Path:
    """The directory of Vagrant's insecure key pair as Debian's ``vagrant`` package installs it."""
    found = sorted(glob.glob(VAGRANT_KEYS_GLOB))
    if not found:
        raise RigError(f"Vagrant's insecure key is not installed ({VAGRANT_KEYS_GLOB}): apt-get install vagrant")
    return Path(found[-1])


def ensure_box(cache_dir: Path, codename: str = DEFAULT_SUITE, secure_boot: bool = False) -> Box:
    """The cached box for Debian ``codename`` (booting with Secure Boot when ``secure_boot``), built first if it is
    not there (about two minutes)."""
    box_suite = suite(codename)
    final = box_path(cache_dir, box_suite, secure_boot)
    box = Box(box_suite.name + ("-sb" if secure_boot else ""), final)
    if box.image.is_file() and (secure_boot or box.box_file.is_file()):
        return box
    final.parent.mkdir(parents=True, exist_ok=True)
    with open(final.parent / "box.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if box.image.is_file() and (secure_boot or box.box_file.is_file()):
            return box
        building = final.with_name(final.name + ".building")
        shutil.rmtree(building, ignore_errors=True)
        building.mkdir()
        try:
            _build(box_suite, building, secure_boot)
            shutil.rmtree(final, ignore_errors=True)
            building.rename(final)
            if not secure_boot:
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


def _build(box_suite: BoxSuite, out: Path, secure_boot: bool = False) -> None:
    root = out / "root"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(SOURCE_DATE_EPOCH)}
    packages = tuple(sorted({*BOX_PACKAGES, *SECURE_BOOT_PACKAGES})) if secure_boot else BOX_PACKAGES
    key = box_key(box_suite, secure_boot=secure_boot)
    log.info("building box %s: root filesystem from Debian %s", box_suite.name, box_suite.codename)
    hooks = []
    if secure_boot:
        # The signed boot chain's packages are downloaded while the build's package lists are still there, then
        # moved out of the root (mmdebstrap empties its /tmp) and unpacked by _efi_files (never installed: see there).
        names = " ".join(sorted({package for package, _, _ in EFI_BINARIES}))
        hooks = [f'--customize-hook=mkdir -p "$1/tmp/efi" && chroot "$1" sh -c "cd /tmp/efi && '
                 f'apt-get download -q {names}" && mv "$1/tmp/efi" "{out / "efi-debs"}"']
    _run(["mmdebstrap", "--variant=minbase", f"--include={','.join(packages)}", *hooks, box_suite.codename,
          str(root), *box_suite.archive], "mmdebstrap", env=env)
    kernel = _customize(root, box_suite)
    log.info("building box %s: disk image", box_suite.name)
    raw = out / "disk.raw"
    if secure_boot:
        _efi_disk(root, raw, key, out / "efi-debs")
    else:
        _disk(root, raw, key)
    _run(["qemu-img", "convert", "-O", "qcow2", str(raw), str(out / "box.img")], "qemu-img convert")
    raw.unlink()
    shutil.rmtree(root)
    metadata = {"provider": "libvirt", "format": "qcow2", "virtual_size": DISK_GB,
                "gpu_provision": {"suite": box_suite.codename, "kernel": kernel, "key": key,
                                  "packages": sorted(packages),
                                  "firmware": "uefi-secure-boot" if secure_boot else "bios"}}
    (out / "metadata.json").write_text(json.dumps(metadata, indent=2, sort_keys=True) + "\n")
    if not secure_boot:  # a Secure Boot box is the VM tier's own (its firmware settings are QEMU's, in vm.py)
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


def _efi_files(debs: Path) -> dict[str, bytes]:
    """The signed boot chain (:data:`EFI_BINARIES`) by path on the EFI system partition, from the packages the
    root filesystem's own archive serves (downloaded into ``debs`` during the build, unpacked here, never
    installed: their scripts would install a boot loader into the build machine's firmware)."""
    work = debs / "unpacked"
    work.mkdir()
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(work)], "dpkg-deb -x")
    files = {}
    for package, inside, target in EFI_BINARIES:
        source = work / inside
        if not source.is_file():
            raise RigError(f"{package} has no {inside}")
        files[target] = source.read_bytes()
    shutil.rmtree(debs)
    return files


def _efi_disk(root: Path, raw: Path, key: str, debs: Path) -> None:
    """A sparse raw GPT disk: the EFI system partition (FAT32: shim, MOK Manager, GRUB, its ``grub.cfg``, the
    kernel and initramfs) and the ext4 root partition, found by UUID."""
    size = DISK_GB * 1024 ** 3
    esp_offset, esp_bytes = PARTITION_OFFSET, ESP_MB * 1024 ** 2
    root_offset = esp_offset + esp_bytes
    with open(raw, "wb") as f:
        f.truncate(size)
    _run(["sfdisk", "--quiet", str(raw)], "sfdisk",
         input=f"label: gpt\nstart={esp_offset // 512}, size={esp_bytes // 512}, type=U, name=EFI\n"
               f"start={root_offset // 512}, type=L, name=root\n")
    fs_uuid = str(uuid.UUID(hashlib.sha256(("fs" + key).encode()).hexdigest()[:32]))
    (root / "etc/fstab").write_text(f"UUID={fs_uuid} / ext4 errors=remount-ro 0 1\n")
    files = _efi_files(debs)
    files[f"{GRUB_PREFIX}/grub.cfg"] = EFI_GRUB_CFG.format(root=fs_uuid).encode()
    for link in ("vmlinuz", "initrd.img"):  # Debian's links to the newest kernel, relative to the root
        files[link] = (root / os.readlink(root / link).lstrip("/")).read_bytes()
    env = {**os.environ, "E2FSPROGS_FAKE_TIME": str(SOURCE_DATE_EPOCH)}
    part_bytes = (size - root_offset - 1024 ** 2) // 1024 ** 2 * 1024 ** 2  # the backup GPT's room at the end
    _run(["mke2fs", "-q", "-t", "ext4", "-L", "root", "-U", fs_uuid, "-d", str(root),
          "-E", f"offset={root_offset},hash_seed={fs_uuid}", str(raw), f"{part_bytes // 1024}k"], "mke2fs", env=env)
    esp = raw.with_name("esp.img")
    volume_id = hashlib.sha256(("esp" + key).encode()).hexdigest()[:8]
    _run(["mkfs.fat", "-F", "32", "-n", "EFI", "-i", volume_id, "-C", str(esp), str(esp_bytes // 1024)], "mkfs.fat")
    # Filled with mtools, not mounted: the build machine's kernel may have no FAT driver (the rig's has none).
    staging = raw.with_name("esp")
    for path, data in files.items():
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        (staging / path).write_bytes(data)
    env = {**os.environ, "MTOOLS_SKIP_CHECK": "1"}
    _run(["mcopy", "-s", "-m", "-i", str(esp), *sorted(str(p) for p in staging.iterdir()), "::/"], "mcopy", env=env)
    shutil.rmtree(staging)
    with open(esp, "rb") as source, open(raw, "r+b") as target:
        target.seek(esp_offset)
        shutil.copyfileobj(source, target, 1024 ** 2)
    esp.unlink()


def _pack(box: Box) -> None:
    """The ``.box`` file: a plain tar of the box directory's three files, written under a temporary name."""
    partial = box.box_file.with_name(box.box_file.name + ".partial")
    with tarfile.open(partial, "w") as tar:
        for name in ("metadata.json", "Vagrantfile", "box.img"):
            tar.add(box.directory / name, arcname=name)
    partial.rename(box.box_file)
