"""Build the test rig's stand-in .deb packages (``gpu_provision_rig/standins/``) with ``dpkg-deb``.

Layout of a package source: ``standins/<repo>/<package>/`` holding

- ``control``: the Debian control file (``@VERSION@``, ``@UPSTREAM@`` and ``vars.json`` names are substituted);
- ``versions`` (optional): the versions to build, one .deb each (else the control file's own Version);
- ``root/``: files installed as they lie (paths and text contents substituted; the executable bit is kept);
- ``vars.json`` (optional): more ``@NAME@`` substitutions; under ``by_branch``, per driver branch (``"590"``), values
  that replace them for that branch's versions;
- ``build.json`` (optional): ``copy`` (package path or glob -> destination; a destination ending in ``/`` is a
  directory), ``files`` (destination -> literal text), ``scripts`` (maintainer script -> package path) and
  ``debian`` (a Debian archive package -> {path in it -> destination}: files taken from the real package, which
  ``apt-get download`` fetches once into the rig's cache, for stand-ins that wrap real programs);
- ``preinst``/``postinst``/``prerm``/``postrm`` (optional): maintainer scripts.

Files under ``etc/`` become conffiles. Each .deb is rebuilt only when the hash of everything that goes into it
changes, so a second build with unchanged sources reuses the files. A package with files from the Debian archive
(tens of megabytes of programs) is also kept in the rig's cache by that hash, so a build into another directory
links it instead of compressing it again.

A package path starts with the name of an importable package (``gpu_provision_rig/sim/gpusim.py``,
``gpu_provision/data/gpus/*.json``) and is found where that package is installed, so the rig builds the same
packages from a checkout, an editable install or a wheel.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from gpu_provision_rig.errors import RigError

STANDINS_DIR = Path(__file__).resolve().parent / "standins"
# Bump when the way packages are assembled changes, so cached .debs are rebuilt.
BUILD_FORMAT = 1
# Fixed file times: the same sources give the same package contents.
SOURCE_DATE_EPOCH = 1767225600  # 2026-01-01T00:00:00Z
SCRIPT_NAMES = ("preinst", "postinst", "prerm", "postrm")


def debian_archive() -> Path:
    """In the rig's cache: the Debian archive packages fetched for ``build.json`` ``debian`` entries, their
    unpacked trees (``<name>_<version>_<arch>/``), and the stand-ins built from them (``built/<hash>/``)."""
    from gpu_provision_rig.config import RigPaths

    return RigPaths.from_env().cache / "debian-archive"


class DebBuildError(RigError):
    """A stand-in package could not be built; the message names the package and the step."""


@dataclass(frozen=True)
class PackageSource:
    """One stand-in package's source directory and the flat repository it belongs to."""

    repo: str
    name: str
    directory: Path


@dataclass(frozen=True)
class BuiltDeb:
    """A built .deb: its repository, package name, version and file."""

    repo: str
    name: str
    version: str
    path: Path


def find_packages(standins_dir: Path = STANDINS_DIR) -> list[PackageSource]:
    """Every ``standins/<repo>/<package>/`` directory that has a ``control`` file."""
    found = []
    for control in sorted(standins_dir.glob("*/*/control")):
        directory = control.parent
        found.append(PackageSource(directory.parent.name, directory.name, directory))
    return found


def control_field(text: str, field: str) -> str | None:
    match = re.search(rf"^{re.escape(field)}:\s*(.+)$", text, re.M)
    return match.group(1).strip() if match else None


def package_versions(source: PackageSource) -> list[str]:
    """The versions to build: the ``versions`` file, else the Version in ``control``."""
    versions_file = source.directory / "versions"
    if versions_file.exists():
        return versions_file.read_text().split()
    version = control_field((source.directory / "control").read_text(), "Version")
    if not version or "@" in version:
        raise DebBuildError(f"{source.name}: control has no literal Version and there is no versions file")
    return [version]


def upstream_version(version: str) -> str:
    """``1:3.3.9-1`` -> ``3.3.9``: no epoch, no Debian revision."""
    without_epoch = version.split(":", 1)[-1]
    return without_epoch.rsplit("-", 1)[0] if "-" in without_epoch else without_epoch


def substitute(text: str, variables: dict[str, str]) -> str:
    """Replace ``@NAME@`` for known names only (twice, so variables may contain variables)."""
    for _ in range(2):
        text = re.sub(r"@([A-Z_]+)@", lambda m: variables.get(m.group(1), m.group(0)), text)
    return text


def package_files(pattern: str) -> list[Path]:
    """The files a package path or glob (``gpu_provision/data/gpus/*.json``) names, in name order."""
    top = pattern.split("/", 1)[0]
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        raise DebBuildError(f"{pattern!r} does not start with an importable package")
    base = Path(next(iter(spec.submodule_search_locations))).parent
    return sorted(path for path in base.glob(pattern) if path.is_file())


def _load_json(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


def _executable(path: Path) -> bool:
    """Executable in the package: executable in the tree, or a script (installs may drop the mode bits)."""
    if path.stat().st_mode & 0o111:
        return True
    with open(path, "rb") as fh:
        return fh.read(2) == b"#!"


def debian_tree(package: str, archive: Path) -> Path:
    """The unpacked tree of the Debian archive package ``package`` (the host's candidate version), fetched with
    ``apt-get download`` from the host's own sources (those its packages are installed from) and unpacked the
    first time only."""
    archive.mkdir(parents=True, exist_ok=True)
    found = sorted(archive.glob(f"{package}_*.deb"))
    if not found:
        # Lists that are missing or older than the archive (a superseded revision answers 404): update once, retry.
        for update in (False, True):
            if update:
                subprocess.run(["apt-get", "update", "-qq"], capture_output=True, check=False)
            proc = subprocess.run(["apt-get", "download", package], cwd=archive, capture_output=True, text=True,
                                  check=False)
            found = sorted(archive.glob(f"{package}_*.deb"))
            if found:
                break
        if proc.returncode != 0 or not found:
            raise DebBuildError(f"apt-get download {package} failed (exit {proc.returncode}): "
                                f"{(proc.stderr or proc.stdout).strip()[-400:]}")
    tree = archive / found[-1].name.removesuffix(".deb")
    if not tree.is_dir():
        partial = archive / f".{tree.name}.partial"
        shutil.rmtree(partial, ignore_errors=True)
        proc = subprocess.run(["dpkg-deb", "-x", str(found[-1]), str(partial)], capture_output=True, text=True,
                              check=False)
        if proc.returncode != 0:
            raise DebBuildError(f"dpkg-deb -x {found[-1].name} failed: {proc.stderr.strip()}")
        os.replace(partial, tree)
    return tree


def collect(source: PackageSource, version: str,
            archive: Path | None = None) -> tuple[str, dict[str, tuple[bytes, int]], dict[str, bytes]]:
    """The package's control text, its files (destination -> (content, mode)) and maintainer scripts; ``archive``
    holds the Debian packages that ``build.json`` ``debian`` takes files from."""
    variables = {"VERSION": version, "UPSTREAM": upstream_version(version)}
    loaded = dict(_load_json(source.directory / "vars.json"))
    by_branch = loaded.pop("by_branch", {})
    variables.update(loaded)
    variables.update(by_branch.get(upstream_version(version).split(".")[0], {}))
    build = _load_json(source.directory / "build.json")

    def content(raw: bytes) -> bytes:
        try:
            return substitute(raw.decode("utf-8"), variables).encode("utf-8")
        except UnicodeDecodeError:
            return raw

    files: dict[str, tuple[bytes, int]] = {}
    root = source.directory / "root"
    if root.is_dir():
        # Bytecode a test's import left beside a stand-in program is no part of the package.
        for path in sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            dest = substitute(path.relative_to(root).as_posix(), variables)
            files[dest] = (content(path.read_bytes()), 0o755 if _executable(path) else 0o644)
    for pattern, dest in build.get("copy", {}).items():
        matches = package_files(pattern)
        if not matches:
            raise DebBuildError(f"{source.name}: build.json copy {pattern!r} matches nothing")
        dest = substitute(dest, variables)
        for path in matches:
            target = dest + path.name if dest.endswith("/") else dest
            files[target] = (content(path.read_bytes()), 0o755 if _executable(path) else 0o644)
    for dest, text in build.get("files", {}).items():
        files[substitute(dest, variables)] = (substitute(text, variables).encode("utf-8"), 0o644)
    for package, paths in build.get("debian", {}).items():
        if archive is None:
            raise DebBuildError(f"{source.name}: build.json takes files from {package} but no archive was given")
        tree = debian_tree(package, archive)
        for inside, dest in paths.items():
            path = (tree / inside).resolve()
            if not path.is_file() or not path.is_relative_to(tree.resolve()):
                raise DebBuildError(f"{source.name}: {package} has no file {inside}")
            files[substitute(dest, variables)] = (path.read_bytes(), 0o755 if path.stat().st_mode & 0o111 else 0o644)
    scripts: dict[str, bytes] = {}
    for name in SCRIPT_NAMES:
        path = source.directory / name
        if path.exists():
            scripts[name] = content(path.read_bytes())
    for name, package_path in build.get("scripts", {}).items():
        found = package_files(package_path)
        if len(found) != 1:
            raise DebBuildError(f"{source.name}: build.json script {package_path!r} names no single file")
        scripts[name] = content(found[0].read_bytes())
    control = substitute((source.directory / "control").read_text(), variables)
    return control, files, scripts


def content_hash(control: str, files: dict[str, tuple[bytes, int]], scripts: dict[str, bytes]) -> str:
    """Hash of everything that ends up in the package (and of the build format)."""
    digest = hashlib.sha256(f"format {BUILD_FORMAT}\n".encode())
    digest.update(control.encode())
    for dest in sorted(files):
        data, mode = files[dest]
        digest.update(f"\0file {dest} {mode:o} {len(data)}\0".encode())
        digest.update(data)
    for name in sorted(scripts):
        digest.update(f"\0script {name} {len(scripts[name])}\0".encode())
        digest.update(scripts[name])
    return digest.hexdigest()


def deb_filename(name: str, version: str, arch: str) -> str:
    """Debian pool file name: no epoch in the version."""
    return f"{name}_{version.split(':', 1)[-1]}_{arch}.deb"


def _stage(stage: Path, control: str, files: dict[str, tuple[bytes, int]], scripts: dict[str, bytes]) -> None:
    debian = stage / "DEBIAN"
    debian.mkdir(parents=True)
    size_kib = sum((len(data) + 1023) // 1024 for data, _ in files.values())
    control = control.rstrip("\n") + "\n"
    if "Installed-Size:" not in control:
        control = control.replace("\nDescription:", f"\nInstalled-Size: {max(size_kib, 1)}\nDescription:", 1)
    (debian / "control").write_text(control)
    conffiles = sorted("/" + dest for dest in files if dest.startswith("etc/"))
    if conffiles:
        (debian / "conffiles").write_text("\n".join(conffiles) + "\n")
    for name, data in scripts.items():
        script = debian / name
        script.write_bytes(data)
        script.chmod(0o755)
    for dest, (data, mode) in files.items():
        target = stage / dest
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        target.chmod(mode)
    for path in [stage, *stage.rglob("*")]:
        if path.is_dir():
            path.chmod(0o755)
        os.utime(path, (SOURCE_DATE_EPOCH, SOURCE_DATE_EPOCH), follow_symlinks=False)


def build_deb(source: PackageSource, version: str, out_dir: Path) -> BuiltDeb:
    """Build (or reuse) one .deb of ``source`` at ``version`` under ``out_dir/<repo>/``."""
    from_debian = bool(_load_json(source.directory / "build.json").get("debian"))
    archive = debian_archive() if from_debian else None
    control, files, scripts = collect(source, version, archive)
    name = control_field(control, "Package") or source.name
    arch = control_field(control, "Architecture") or "all"
    description = control_field(control, "Description") or ""
    if not description.startswith("Stand-in for the test rig:"):
        raise DebBuildError(f"{name}: Description must start with 'Stand-in for the test rig:'")
    repo_dir = out_dir / source.repo
    repo_dir.mkdir(parents=True, exist_ok=True)
    target = repo_dir / deb_filename(name, version, arch)
    marker = repo_dir / f".{target.name}.sha256"
    wanted = content_hash(control, files, scripts)
    if target.exists() and marker.exists() and marker.read_text().strip() == wanted:
        return BuiltDeb(source.repo, name, version, target)
    shared = archive / "built" / wanted / target.name if archive is not None else None
    if shared is not None and shared.is_file():
        link_or_copy(shared, target)
        marker.write_text(wanted + "\n")
        return BuiltDeb(source.repo, name, version, target)
    with tempfile.TemporaryDirectory(prefix=f"deb-{name}-", dir=repo_dir) as tmp:
        stage = Path(tmp) / "stage"
        _stage(stage, control, files, scripts)
        partial = Path(tmp) / target.name
        env = dict(os.environ, SOURCE_DATE_EPOCH=str(SOURCE_DATE_EPOCH))
        proc = subprocess.run(
            # Fastest gzip for the tens of megabytes of programs from the archive: built once, served locally.
            ["dpkg-deb", "--root-owner-group", "-Zgzip", *(["-z1"] if from_debian else []), "--build", str(stage),
             str(partial)],
            capture_output=True, text=True, env=env, check=False,
        )
        if proc.returncode != 0:
            raise DebBuildError(f"{name} {version}: dpkg-deb failed: {proc.stderr.strip() or proc.stdout.strip()}")
        os.replace(partial, target)
    if shared is not None:
        shared.parent.mkdir(parents=True, exist_ok=True)
        link_or_copy(target, shared)
    marker.write_text(wanted + "\n")
    return BuiltDeb(source.repo, name, version, target)


def link_or_copy(source: Path, target: Path) -> None:
    """``target`` becomes ``source``'s content, in one rename: a hard link where the file system allows, else a
    copy (the built packages, the shared cache and the served mirror may lie on different file systems)."""
    partial = target.with_name(f".{target.name}.partial")
    partial.unlink(missing_ok=True)
    try:
        os.link(source, partial)
    except OSError:
        shutil.copy2(source, partial)
    os.replace(partial, target)


def build_all(out_dir: Path, standins_dir: Path = STANDINS_DIR) -> list[BuiltDeb]:
    """Build every stand-in package in every listed version; remove .debs no longer produced."""
    built = [build_deb(source, version, out_dir) for source in find_packages(standins_dir)
             for version in package_versions(source)]
    keep = {deb.path for deb in built}
    for stale in out_dir.glob("*/*.deb"):
        if stale not in keep:
            stale.unlink()
            (stale.parent / f".{stale.name}.sha256").unlink(missing_ok=True)
    return built


def clean(out_dir: Path) -> None:
    """Remove every built package."""
    shutil.rmtree(out_dir, ignore_errors=True)
