"""Each kind of want as testinfra assertions: a function per kind returning the problems it found (none: conforms).

They take testinfra's ``host`` and read the node only through its modules (``host.package``, ``host.file``,
``host.service``, ``host.group``) and read-only commands (``apt-mark showhold``). What counts as satisfied is the
project's own rule wherever one exists (:func:`gpu_provision.desired.version_matches`, :func:`deep_merge` for JSON
files, :func:`gpu_provision.stages.toolkit.runtime_missing` for the nvidia runtime), so the suite, the deploy and
``gpu-provision drift`` agree.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from gpu_provision.desired import (
    FileWant,
    GroupWant,
    PackageWant,
    UnitWant,
    Want,
    deep_merge,
    sha256,
    version_matches,
)
from gpu_provision.spec import Node
from gpu_provision.stages import runtime, toolkit
from gpu_provision.state import NodeStateData

#: dnf's version lock list, where a held rpm package is named (``NAME-VERSION``).
VERSIONLOCK = "/etc/dnf/plugins/versionlock.list"


def held_packages(host: Any, manager: str | None) -> set[str] | str:
    """Names of the packages the package manager holds (apt) or, for dnf, the version lock list's text."""
    if manager == "dnf":
        lock = host.file(VERSIONLOCK)
        return lock.content_string if lock.exists else ""
    return set(host.check_output("apt-mark showhold").split())


def package_problems(host: Any, want: PackageWant, held: set[str] | str) -> list[str]:
    """Installed (at the wanted version) and held, or absent, as ``want`` says."""
    package = host.package(want.name)
    if not want.present:
        return [f"package {want.name}: expected absent, found {package.version}"] if package.is_installed else []
    if not package.is_installed:
        return [f"package {want.name}: expected {want.version or 'installed'}, found absent"]
    if not version_matches(want.version, package.version):
        return [f"package {want.name}: expected {want.version}, found {package.version}"]
    is_held = want.name in held if isinstance(held, set) else f"{want.name}-" in held
    if want.held and not is_held:
        return [f"package {want.name}: expected held, found not held"]
    return []


def file_problems(host: Any, want: FileWant) -> list[str]:
    """Present as a regular file with the wanted content (or, for a JSON merge, the wanted keys), owner, group and
    mode."""
    found = host.file(want.path)
    if not found.exists:
        return [f"file {want.path}: expected present, found absent"]
    if not found.is_file:
        return [f"file {want.path}: expected a regular file, found another kind"]
    out = []
    if want.merge == "json":
        try:
            data = json.loads(found.content_string)
        except ValueError as exc:
            data = f"not JSON ({exc})"
        if not isinstance(data, dict) or deep_merge(data, want.keys) != data:
            out.append(f"file {want.path}: expected to contain {json.dumps(want.keys, sort_keys=True)}, "
                       f"found other content")
    elif want.content is not None and found.sha256sum != sha256(want.content):
        out.append(f"file {want.path}: expected sha256 {sha256(want.content)[:12]}, found {found.sha256sum[:12]}")
    for what, expected, actual in (("mode", int(want.mode, 8), found.mode), ("owner", want.owner, found.user),
                                   ("group", want.group, found.group)):
        if expected != actual:
            shown = (f"{expected:04o}", f"{actual:04o}") if what == "mode" else (expected, actual)
            out.append(f"file {want.path}: expected {what} {shown[0]}, found {shown[1]}")
    return out


def unit_problems(host: Any, want: UnitWant) -> list[str]:
    """Installed, and enabled and active where ``want`` asks for it."""
    service = host.service(want.name)
    try:
        exists = service.exists
    except NotImplementedError:  # testinfra's generic service: no init system it can read (no systemd running)
        return [f"service {want.name}: expected installed, found no service manager testinfra can read "
                "(systemd is not running on this host)"]
    if not exists:
        return [f"service {want.name}: expected installed, found missing"]
    out = []
    if want.enabled is not None and service.is_enabled != want.enabled:
        out.append(f"service {want.name}: expected {'enabled' if want.enabled else 'disabled'}, "
                   f"found {'enabled' if service.is_enabled else 'disabled'}")
    if want.running is not None and service.is_running != want.running:
        out.append(f"service {want.name}: expected {'active' if want.running else 'inactive'}, "
                   f"found {'active' if service.is_running else 'inactive'}")
    return out


def group_problems(host: Any, want: GroupWant) -> list[str]:
    """The group exists and has at least the wanted members."""
    group = host.group(want.name)
    if not group.exists:
        return [f"group {want.name}: expected present, found absent"]
    missing = sorted(set(want.members) - set(group.members))
    return [f"group {want.name}: expected members {', '.join(missing)}, found {', '.join(group.members) or 'none'}"
            ] if missing else []


def want_problems(host: Any, wants: Sequence[Want], manager: str | None) -> list[str]:
    """Every problem with ``wants`` on ``host``, in the wants' order."""
    held = held_packages(host, manager) if any(isinstance(w, PackageWant) and w.held for w in wants) else set()
    out: list[str] = []
    for want in wants:
        if isinstance(want, PackageWant):
            out += package_problems(host, want, held)
        elif isinstance(want, FileWant):
            out += file_problems(host, want)
        elif isinstance(want, UnitWant):
            out += unit_problems(host, want)
        elif isinstance(want, GroupWant):
            out += group_problems(host, want)
    return out


def device_problems(host: Any, devices: dict[str, tuple[int, int]]) -> list[str]:
    """Each device file owned by root with the wanted group id and mode."""
    out = []
    for path, (gid, mode) in sorted(devices.items()):
        found = host.file(path)
        if not found.exists:
            out.append(f"device {path}: expected present, found absent")
            continue
        actual = (found.uid, found.gid, found.mode)
        if actual != (0, gid, mode):
            out.append(f"device {path}: expected uid 0 gid {gid} mode {mode:04o}, "
                       f"found uid {actual[0]} gid {actual[1]} mode {actual[2]:04o}")
    return out


def nvidia_runtime_problems(host: Any, node: Node, kinds: tuple[str, ...]) -> list[str]:
    """The nvidia runtime registered (and the default where the file says so) with each of ``kinds``."""
    files: dict[str, dict[str, Any]] = {}
    for path in (runtime.DAEMON_JSON, runtime.CONTAINERD_CONFIG, toolkit.NVIDIA_DROPIN):
        found = host.file(path)
        files[path] = {"exists": True, "content": found.content_string} if found.exists else {"exists": False}
    reason = toolkit.runtime_missing(node, NodeStateData({"files": files}), kinds)
    return [f"container runtime {'+'.join(kinds)}: {reason}"] if reason else []
