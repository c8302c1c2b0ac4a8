"""The signed mirror used the way nodes use it: apt in a Debian 12 chroot verifies and installs the stand-ins."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from simnode import FIXTURES, H200_HOST

from gpu_provision_rig.mirror import REPOS, SUITES, MirrorInfo, build_mirror, release_dir, served

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mounts need root"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="needs mmdebstrap for the Debian 12 root"),
]

# Only the mirror's file: sources; no network source, no proxy.
APT = ["apt-get", "-q", "-o", "Dir::Etc::sourcelist=/etc/apt/sources.list.d/rig.list",
       "-o", "Dir::Etc::sourceparts=/nonexistent", "-o", "Acquire::http::Proxy=false"]


@pytest.fixture(scope="module")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> MirrorInfo:
    return build_mirror(tmp_path_factory.mktemp("mirror"))


def sources(keyring: str) -> str:
    """One source line per repository: flat, or Docker's suite and component."""
    return "".join(f"deb [signed-by={keyring}] file:/mirror/{rel}/ {' '.join(SUITES.get(rel, ('/',)))}\n"
                   for rel in REPOS.values())


class Chroot:
    """A throwaway Debian 12 root: the rig's base image under an overlay, the mirror bound at /mirror."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}
        proc = subprocess.run(["chroot", str(self.root), *argv], capture_output=True, text=True, env=env, timeout=120)
        if check:
            assert proc.returncode == 0, (argv, proc.stdout[-3000:], proc.stderr[-3000:])
        return proc

    def write(self, path: str, text: str) -> None:
        target = self.root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)


@pytest.fixture
def chroot(mirror: MirrorInfo, tmp_path: Path) -> Iterator[Chroot]:
    from gpu_provision_rig.base import ensure_base
    from gpu_provision_rig.config import RigPaths

    base = ensure_base(RigPaths.from_env().cache)
    up, work, root = tmp_path / "up", tmp_path / "work", tmp_path / "root"
    for d in (up, work, root):
        d.mkdir()
    mounts: list[Path] = []
    try:
        subprocess.run(["mount", "-t", "overlay", "overlay", "-o", f"lowerdir={base},upperdir={up},workdir={work}",
                        str(root)], check=True)
        mounts.append(root)
        (root / "mirror").mkdir()
        subprocess.run(["mount", "--bind", str(mirror.root), str(root / "mirror")], check=True)
        mounts.append(root / "mirror")
        subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
        mounts.append(root / "proc")
        yield Chroot(root)
    finally:
        for m in reversed(mounts):
            subprocess.run(["umount", "-l", str(m)], check=False)


def test_apt_verifies_signed_repos_and_installs_the_stand_ins(chroot: Chroot) -> None:
    chroot.write("/etc/apt/sources.list.d/rig.list", sources("/mirror/keys/gpu-provision-rig.asc"))
    update = chroot.run(*APT, "update")
    assert "NO_PUBKEY" not in update.stdout + update.stderr
    assert "is not signed" not in update.stdout + update.stderr
    chroot.run(*APT, "install", "-y", "--no-install-recommends", "nvidia-open", "nvidia-container-toolkit",
               "datacenter-gpu-manager", "nvidia-fabricmanager")
    versions = chroot.run("dpkg-query", "-W", "-f", "${Package} ${Version}\n", "nvidia-driver",
                          "nvidia-kernel-open-dkms", "nvidia-container-toolkit-base").stdout
    assert sorted(versions.splitlines()) == ["nvidia-container-toolkit-base 1.17.8-1", "nvidia-driver 580.159.04-1",
                                             "nvidia-kernel-open-dkms 580.159.04-1"]

    # The node's hardware and a restrictive module option, then the "module load".
    chroot.write("/etc/gpu-sim/gpus.json", json.dumps({"gpus": H200_HOST}))
    chroot.write("/etc/modprobe.d/nvidia-gpu-provision.conf", "options nvidia NVreg_DeviceFileGID=44 NVreg_DeviceFileMode=0660\n")
    assert chroot.run("nvidia-smi", check=False).returncode == 9, "no module loaded yet"
    chroot.run("/usr/lib/gpu-sim/nvidia-sim-load")
    st = os.stat(chroot.root / "dev" / "nvidia0")
    assert stat.S_ISCHR(st.st_mode) and (os.minor(st.st_rdev), st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 44, 0o660)
    assert chroot.run("nvidia-smi", "mig", "-lgipp").stdout == (FIXTURES / "h200" / "nvidia-smi_mig_-lgipp.txt").read_text()
    assert "Open Kernel Module" in (chroot.root / "run/gpu-sim/version").read_text()

    # Switching flavour: cuda-drivers pulls the proprietary module package, which replaces the open one.
    chroot.run(*APT, "install", "-y", "cuda-drivers")
    assert (chroot.root / "usr/src/nvidia-580.159.04/gpu-sim-flavour").read_text() == "proprietary\n"
    assert chroot.run("dpkg-query", "-W", "-f", "${Status}", "nvidia-kernel-open-dkms", check=False).stdout != (
        "install ok installed")

    # Downgrade to the pinned older driver: the running "module" stays old-new until it is reloaded.
    chroot.run(*APT, "install", "-y", "--allow-downgrades", "nvidia-driver=580.126.09-1",
               "nvidia-kernel-dkms=580.126.09-1", "cuda-drivers=580.126.09-1", "nvidia-fabricmanager=580.126.09-1")
    mismatch = chroot.run("nvidia-smi", "-L", check=False)
    assert mismatch.returncode == 18 and "Driver/library version mismatch" in mismatch.stdout
    chroot.run("/usr/lib/gpu-sim/nvidia-sim-load")
    assert chroot.run("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader").stdout == "580.126.09\n"
    assert "x86_64 Kernel Module  580.126.09" in (chroot.root / "run/gpu-sim/version").read_text()


def test_apt_refuses_the_mirror_with_the_wrong_key(chroot: Chroot) -> None:
    chroot.write("/etc/apt/sources.list.d/rig.list", sources("/usr/share/keyrings/debian-archive-keyring.gpg"))
    proc = chroot.run(*APT, "update", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "NO_PUBKEY" in text or "is not signed" in text


def _index(path: Path) -> set[tuple[str, str]]:
    """(package, version) of every paragraph of a Packages file."""
    out = set()
    for para in path.read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in para.splitlines() if ": " in line and not line.startswith(" "))
        if "Package" in fields:
            out.add((fields["Package"], fields["Version"]))
    return out


def test_each_cuda_path_serves_the_driver_branch_its_real_repository_has(mirror: MirrorInfo) -> None:
    """NVIDIA's debian13 repository was seen carrying branches 590 and later, debian12's 545 and later (packages.json
    cuda-repo-branches): Debian 13's path serves the 590 stand-ins, Debian 12's the 580 ones, both everything of no
    driver branch (DCGM)."""
    twelve = _index(mirror.root / "cuda/debian12/x86_64/Packages")
    thirteen = _index(mirror.root / "cuda/debian13/x86_64/Packages")
    assert ("nvidia-driver", "590.48.01-1") in thirteen and ("nvidia-driver-pinning-590", "590-1") in thirteen
    assert not any(v.startswith("580.") or n.startswith("nvidia-driver-pinning-580") for n, v in thirteen)
    assert ("nvidia-driver", "580.159.04-1") in twelve and not any(v.startswith("590.") for _, v in twelve)
    assert ("datacenter-gpu-manager", "1:3.3.9") in twelve & thirteen
    thirteen_dir = mirror.root / "cuda/debian13/x86_64"
    assert "Label: stand-in for NVIDIA CUDA debian13 x86_64" in (thirteen_dir / "Release").read_text()
    assert "BEGIN PGP SIGNED MESSAGE" in (thirteen_dir / "InRelease").read_text()
    assert (thirteen_dir / "gpu-provision-rig.pub").read_text() == mirror.key_path.read_text()


def test_docker_s_repository_is_one_suite_with_one_component(mirror: MirrorInfo) -> None:
    """As download.docker.com/linux/debian: ``dists/bookworm/stable/binary-amd64/Packages`` indexing
    ``dists/bookworm/pool/stable/amd64/``, a signed Release naming the suite and component, the key at ``gpg``."""
    top = mirror.root / "docker/linux/debian"
    index = top / "dists/bookworm/stable/binary-amd64/Packages"
    assert ("docker-ce", "5:28.5.2-1~debian.12~bookworm") in _index(index)
    filenames = [line.split(": ", 1)[1] for line in index.read_text().splitlines() if line.startswith("Filename: ")]
    assert filenames and all(name.startswith("dists/bookworm/pool/stable/amd64/") for name in filenames)
    assert all((top / name).is_file() for name in filenames)
    release = (top / "dists/bookworm/Release").read_text()
    assert all(line in release.splitlines() for line in ("Suite: bookworm", "Codename: bookworm",
                                                         "Components: stable", "Architectures: amd64"))
    assert " stable/binary-amd64/Packages.gz" in release
    assert (top / "gpg").read_text() == mirror.key_path.read_text()


def test_second_mirror_build_reuses_everything(mirror: MirrorInfo) -> None:
    dest = mirror.root.parent
    inrelease = {rel: (release_dir(rel, mirror.root / rel) / "InRelease").read_bytes() for _, rel in served()}
    again = build_mirror(dest)
    assert again == mirror
    assert {rel: (release_dir(rel, again.root / rel) / "InRelease").read_bytes() for _, rel in served()} == inrelease
    assert mirror.key_path.read_text().startswith("-----BEGIN PGP PUBLIC KEY BLOCK-----")
    assert not (mirror.root / "gnupg").exists() and (dest / "gnupg").is_dir(), "the private keyring is not served"


def _wait_for(path: Path) -> int:
    for _ in range(200):
        if path.exists() and path.read_text().strip():
            return int(path.read_text().strip())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_daemons_hold_and_release_the_gpus(chroot: Chroot) -> None:
    chroot.write("/etc/apt/sources.list.d/rig.list", sources("/mirror/keys/gpu-provision-rig.asc"))
    chroot.run(*APT, "update")
    chroot.run(*APT, "install", "-y", "nvidia-open", "datacenter-gpu-manager", "nvidia-fabricmanager")
    chroot.write("/etc/gpu-sim/gpus.json", json.dumps({"gpus": H200_HOST}))
    chroot.run("/usr/lib/gpu-sim/nvidia-sim-load")
    started: list[int] = []
    try:
        chroot.run("nvidia-persistenced")
        started.append(_wait_for(chroot.root / "run/nvidia-persistenced/nvidia-persistenced.pid"))
        assert chroot.run("nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Enabled\n"

        chroot.run("nv-hostengine")
        started.append(_wait_for(chroot.root / "run/nvhostengine.pid"))
        assert "nv-hostengine" in chroot.run("gpu-sim", "state").stdout
        discovery = chroot.run("dcgmi", "discovery", "-l").stdout
        assert discovery.startswith("1 GPU found.") and "GPU-7a01bbbc-8780-9e2b-9ffe-56c5caa0e387" in discovery
        assert "pending enable state" in chroot.run("nvidia-smi", "-mig", "1").stdout, "DCGM holds the GPU"

        chroot.run("nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg")
        started.append(_wait_for(chroot.root / "run/nvidia-fabricmanager/nv-fabricmanager.pid"))
    finally:
        for pid in started:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
    for _ in range(200):
        if chroot.run("nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Disabled\n":
            break
        time.sleep(0.05)
    assert chroot.run("nvidia-smi", "--query-gpu=persistence_mode", "--format=csv,noheader").stdout == "Disabled\n"
    assert "was successfully reset" in chroot.run("nvidia-smi", "-r").stdout
    assert chroot.run("nvidia-smi", "--query-gpu=mig.mode.current", "--format=csv,noheader").stdout == "Enabled\n"

    # Fabric manager must match the loaded driver, as the real one does.
    chroot.run(*APT, "install", "-y", "--allow-downgrades", "nvidia-fabricmanager=580.126.09-1")
    refused = chroot.run("nv-fabricmanager", "-c", "/usr/share/nvidia/nvswitch/fabricmanager.cfg", check=False)
    assert refused.returncode == 1 and "incompatible with the loaded driver version 580.159.04" in refused.stderr
