"""The test rig's signed package mirror: flat apt repositories laid out like the real upstreams.

``build_mirror(dest)`` builds every stand-in package (:mod:`gpu_provision_rig.debs`) and writes, under
``dest/www`` (the directory to serve at http://10.77.0.1:8080/):

- ``cuda/debian12/x86_64/``: NVIDIA's CUDA repository for Debian 12 (driver, kernel modules, fabric manager, DCGM),
  and for Debian 13 at ``cuda/debian13/x86_64/`` (:data:`ALSO_SERVED_AT`), each with the driver branches its real
  repository has (:data:`SERVED_BRANCHES`);
- ``libnvidia-container/stable/deb/amd64/``: NVIDIA's container toolkit repository;
- ``kubernetes/core:/stable:/v1.36/deb/``: the pkgs.k8s.io layout (packages from ``standins/kubernetes/`` if any);
- ``docker/linux/debian/``: Docker's repository for Debian 12 (docker-ce, docker-ce-cli, containerd.io), laid out as
  Docker's is (:data:`SUITES`): ``deb [signed-by=KEY] URL bookworm stable``.

The others are flat repositories (``deb [signed-by=KEY] URL/ /``) with ``Packages``, ``Packages.gz``, ``Release``,
``InRelease`` and ``Release.gpg``, signed with one key generated on the first build (no passphrase; the keyring
stays in ``dest/gnupg``, outside the served tree, and is reused). The public key is served at ``keys/`` and at
the places the upstream instructions fetch it from. A repository whose packages and key are unchanged is not
re-indexed or re-signed, so a second build with unchanged sources only hashes files.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from gpu_provision_rig import debs
from gpu_provision_rig.errors import RigError

MIRROR_HOST_PACKAGES: tuple[str, ...] = (
    "apt-utils",  # apt-ftparchive: Packages and Release files
    "gnupg",  # gpg: the signing key, InRelease and Release.gpg
    "dpkg",  # dpkg-deb: builds the stand-in packages
)
"""Debian packages the mirror build needs on the host (``.ci/run`` installs them)."""

REPOS: dict[str, str] = {
    "cuda": "cuda/debian12/x86_64",
    "libnvidia-container": "libnvidia-container/stable/deb/amd64",
    "kubernetes": "kubernetes/core:/stable:/v1.36/deb",
    "docker": "docker/linux/debian",
}
"""Repository name (the ``standins/<name>/`` directory) -> path under the served root."""

ALSO_SERVED_AT: dict[str, tuple[str, ...]] = {
    # NVIDIA's debian13 repository carries the driver under Debian 12's package names (public Debian 13 install
    # notes take nvidia-driver-pinning-<branch>, cuda-drivers, nvidia-open and nvidia-kernel-open-dkms from
    # .../cuda/repos/debian13/x86_64/), from another first branch: SERVED_BRANCHES.
    "cuda": ("cuda/debian13/x86_64",),
}
"""Further paths a repository's packages are served at, each indexed and signed on its own."""

SERVED_BRANCHES: dict[str, tuple[str, ...]] = {
    # gpu_provision/data/packages.json, cuda_repository.branches: debian12/x86_64 carried branches 545 to 615 and
    # debian13/x86_64 590 to 615 (their Packages indexes, read by a public project on 2026-09-23). Each path serves
    # stand-ins of one branch its real repository has.
    "cuda/debian12/x86_64": ("580",),
    "cuda/debian13/x86_64": ("590",),
}
"""The driver branches whose stand-ins a CUDA path serves; packages of no driver branch are served at every path."""

SUITES: dict[str, tuple[str, str]] = {
    # docs.docker.com/engine/install/debian/: 'deb [arch=... signed-by=/etc/apt/keyrings/docker.asc]
    # https://download.docker.com/linux/debian <codename> stable'; the index at dists/<codename>/stable/binary-<arch>/
    # and the packages under dists/<codename>/pool/stable/<arch>/, as Docker's repository keeps them.
    "docker/linux/debian": ("bookworm", "stable"),
}
"""Paths served as one suite with one component (path -> (suite, component)); every other path is flat."""

RELEASE_FIELDS: dict[str, dict[str, str]] = {
    "cuda/debian12/x86_64": {"Origin": "gpu-provision test rig", "Label": "stand-in for NVIDIA CUDA debian12 x86_64"},
    "cuda/debian13/x86_64": {"Origin": "gpu-provision test rig", "Label": "stand-in for NVIDIA CUDA debian13 x86_64"},
    "libnvidia-container/stable/deb/amd64": {"Origin": "gpu-provision test rig",
                                             "Label": "stand-in for NVIDIA libnvidia-container"},
    "kubernetes/core:/stable:/v1.36/deb": {"Origin": "gpu-provision test rig",
                                           "Label": "stand-in for pkgs.k8s.io core stable v1.36"},
    "docker/linux/debian": {"Origin": "gpu-provision test rig", "Label": "stand-in for Docker CE debian"},
}
"""The Release fields of each served path."""


def driver_branch(deb: debs.BuiltDeb) -> str | None:
    """The driver branch a stand-in belongs to: its pinning package's (by name), else its version's first part
    (``580.159.04-1``); None for a package of no driver branch (DCGM, the toolkit, Kubernetes)."""
    named = re.match(r"nvidia-driver-pinning-(\d{3})(\.|$)", deb.name)
    if named:
        return named.group(1)
    versioned = re.match(r"(\d{3})\.\d+", debs.upstream_version(deb.version))
    return versioned.group(1) if versioned else None


def serves(rel: str, deb: debs.BuiltDeb) -> bool:
    """Whether the path ``rel`` serves ``deb`` (:data:`SERVED_BRANCHES`)."""
    branches = SERVED_BRANCHES.get(rel)
    branch = driver_branch(deb)
    return branches is None or branch is None or branch in branches


def served() -> list[tuple[str, str]]:
    """Every (repository name, path) the mirror serves: each repository's own path, then its other paths."""
    return [*REPOS.items(), *((name, rel) for name, rels in ALSO_SERVED_AT.items() for rel in rels)]


# Where the upstream install instructions fetch the repository key, relative to the served root.
KEY_COPIES: tuple[str, ...] = (
    "keys/gpu-provision-rig.asc",
    "cuda/debian12/x86_64/gpu-provision-rig.pub",
    "cuda/debian13/x86_64/gpu-provision-rig.pub",
    "libnvidia-container/gpgkey",
    "kubernetes/core:/stable:/v1.36/deb/Release.key",
    "docker/linux/debian/gpg",
)
KEY_UID = "gpu-provision test rig mirror <rig-mirror@gpu-provision.invalid>"
# Bump when the index layout or Release fields change, so repositories are re-indexed.
INDEX_FORMAT = 2


class MirrorError(RigError):
    """The mirror could not be built; the message names the failing step."""


@dataclass(frozen=True)
class MirrorInfo:
    """A built mirror: what to serve, its public key and the repositories in it."""

    root: Path
    key_path: Path
    fingerprint: str
    repos: dict[str, str] = field(default_factory=dict)


def _run(argv: list[str], *, env: dict[str, str] | None = None, cwd: Path | None = None,
         stdout_path: Path | None = None) -> str:
    try:
        if stdout_path is not None:
            with open(stdout_path, "wb") as out:
                proc = subprocess.run(argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.PIPE, check=False)
            text = ""
        else:
            proc = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
            text = proc.stdout.decode()
    except FileNotFoundError as exc:
        raise MirrorError(f"{argv[0]} not found: install {' '.join(MIRROR_HOST_PACKAGES)}") from exc
    if proc.returncode != 0:
        raise MirrorError(f"{' '.join(argv[:3])}... failed: {proc.stderr.decode().strip()}")
    return text


def _gpg_env(home: Path) -> dict[str, str]:
    return dict(os.environ, GNUPGHOME=str(home), LC_ALL="C")


GPG_BATCH = ["gpg", "--batch", "--no-tty", "--pinentry-mode", "loopback", "--passphrase", ""]


def ensure_key(home: Path) -> str:
    """Fingerprint of the mirror's signing key, generating it (ed25519, no passphrase) the first time."""
    home.mkdir(parents=True, exist_ok=True)
    home.chmod(0o700)
    env = _gpg_env(home)

    def secret_fingerprint() -> str | None:
        listing = _run(["gpg", "--batch", "--with-colons", "--list-secret-keys"], env=env)
        for line in listing.splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        return None

    fingerprint = secret_fingerprint()
    if fingerprint is None:
        _run([*GPG_BATCH, "--quick-generate-key", KEY_UID, "ed25519", "sign", "never"], env=env)
        fingerprint = secret_fingerprint()
    if fingerprint is None:
        raise MirrorError(f"no signing key in {home} after generating one")
    return fingerprint


def _stop_agent(home: Path) -> None:
    """gpg starts an agent per home; stop it so no process outlives the build."""
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=_gpg_env(home), capture_output=True, check=False)


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _sync_debs(repo_dir: Path, wanted: list[debs.BuiltDeb]) -> None:
    """Make the repository hold exactly ``wanted`` (hard links where possible)."""
    repo_dir.mkdir(parents=True, exist_ok=True)
    names = {deb.path.name for deb in wanted}
    for existing in repo_dir.glob("*.deb"):
        if existing.name not in names:
            existing.unlink()
    for deb in wanted:
        target = repo_dir / deb.path.name
        if target.exists() and _file_hash(target) == _file_hash(deb.path):
            continue
        debs.link_or_copy(deb.path, target)


def _packages(repo_dir: Path, pool: str, out_dir: Path) -> None:
    """Write ``Packages`` and ``Packages.gz`` into ``out_dir`` for the .debs under ``repo_dir/pool``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _run(["apt-ftparchive", "packages", pool], cwd=repo_dir, stdout_path=out_dir / "Packages")
    with open(out_dir / "Packages", "rb") as src, gzip.GzipFile(out_dir / "Packages.gz", "wb", mtime=0) as dst:
        shutil.copyfileobj(src, dst)


def _release(release_dir: Path, fields: dict[str, str], home: Path, fingerprint: str) -> None:
    """Write Release over the indexes under ``release_dir``, then sign it: InRelease and Release.gpg."""
    options = []
    for key, value in fields.items():
        options += ["-o", f"APT::FTPArchive::Release::{key}={value}"]
    release = _run(["apt-ftparchive", *options, "release", "."], cwd=release_dir)
    (release_dir / "Release").write_text(release)
    env = _gpg_env(home)
    _run([*GPG_BATCH, "--yes", "--local-user", fingerprint, "--clearsign", "--output", "InRelease", "Release"],
         env=env, cwd=release_dir)
    _run([*GPG_BATCH, "--yes", "--local-user", fingerprint, "--armor", "--detach-sign", "--output", "Release.gpg",
          "Release"], env=env, cwd=release_dir)


def release_dir(rel: str, repo_dir: Path) -> Path:
    """Where the path's Release files lie: the repository itself when flat, else ``dists/<suite>/``."""
    return repo_dir / "dists" / SUITES[rel][0] if rel in SUITES else repo_dir


def index_dir(rel: str, repo_dir: Path) -> Path:
    """Where the path's ``Packages`` lies: the repository itself when flat, else
    ``dists/<suite>/<component>/binary-amd64/``."""
    if rel not in SUITES:
        return repo_dir
    suite, component = SUITES[rel]
    return repo_dir / "dists" / suite / component / "binary-amd64"


def pool_dir(rel: str, repo_dir: Path) -> Path:
    """Where the path's .debs lie: the repository itself when flat, else ``dists/<suite>/pool/<component>/amd64/``."""
    if rel not in SUITES:
        return repo_dir
    suite, component = SUITES[rel]
    return repo_dir / "dists" / suite / "pool" / component / "amd64"


def _index(rel: str, repo_dir: Path, home: Path, fingerprint: str) -> None:
    """Write the indexes with apt-ftparchive and sign the Release: flat, or one suite with one component."""
    top = release_dir(rel, repo_dir)
    for stale in ("Packages", "Packages.gz", "Release", "InRelease", "Release.gpg"):
        (top / stale).unlink(missing_ok=True)
    fields = {**RELEASE_FIELDS.get(rel, {}), "Suite": "stable", "Architectures": "amd64 all"}
    _packages(repo_dir, pool_dir(rel, repo_dir).relative_to(repo_dir).as_posix(), index_dir(rel, repo_dir))
    if rel in SUITES:
        suite, component = SUITES[rel]
        fields.update(Suite=suite, Codename=suite, Components=component, Architectures="amd64")
    _release(top, fields, home, fingerprint)


def _publish_key(root: Path, home: Path, fingerprint: str) -> Path:
    armored = _run(["gpg", "--batch", "--armor", "--export", fingerprint], env=_gpg_env(home))
    if "BEGIN PGP PUBLIC KEY BLOCK" not in armored:
        raise MirrorError("exporting the mirror's public key gave no key")
    for rel in KEY_COPIES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != armored:
            path.write_text(armored)
    binary = root / "keys" / "gpu-provision-rig.gpg"
    binary_key = subprocess.run(["gpg", "--batch", "--export", fingerprint], env=_gpg_env(home),
                                capture_output=True, check=True).stdout
    if not binary.exists() or binary.read_bytes() != binary_key:
        binary.write_bytes(binary_key)
    return root / KEY_COPIES[0]


def build_mirror(dest: Path) -> MirrorInfo:
    """Build (or bring up to date) the signed mirror under ``dest``; serve ``MirrorInfo.root``."""
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    root = dest / "www"
    home = dest / "gnupg"
    with open(dest / ".build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = debs.build_all(dest / "debs")
        unknown = sorted({deb.repo for deb in built} - set(REPOS))
        if unknown:
            raise MirrorError(f"stand-in packages for unknown repositories: {', '.join(unknown)}")
        fingerprint = ensure_key(home)
        try:
            key_path = _publish_key(root, home, fingerprint)
            for name, rel in served():
                repo_dir = root / rel
                wanted = [deb for deb in built if deb.repo == name and serves(rel, deb)]
                _sync_debs(pool_dir(rel, repo_dir), wanted)
                digest = hashlib.sha256(f"{INDEX_FORMAT} {fingerprint} {RELEASE_FIELDS.get(rel)}".encode())
                for deb in sorted(wanted, key=lambda d: d.path.name):
                    digest.update(f"{deb.path.name} {_file_hash(deb.path)}\n".encode())
                marker = dest / f".index-{rel.replace('/', '_')}.sha256"
                signed = (index_dir(rel, repo_dir) / "Packages").exists() and all(
                    (release_dir(rel, repo_dir) / f).exists() for f in ("Release", "InRelease", "Release.gpg"))
                if signed and marker.exists() and marker.read_text().strip() == digest.hexdigest():
                    continue
                _index(rel, repo_dir, home, fingerprint)
                marker.write_text(digest.hexdigest() + "\n")
        finally:
            _stop_agent(home)
    return MirrorInfo(root=root, key_path=key_path, fingerprint=fingerprint, repos=dict(REPOS))
