"""Packages at wanted versions, held or version-locked, with apt (Debian, Ubuntu) or dnf (RHEL, Rocky)."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from pyinfra.api import operation

from gpu_provision.desired import PackageWant, request_for, version_matches
from gpu_provision.node.versions import version_key
from gpu_provision.operations.commands import current_state, fail_command, mark_changed, this_host
from gpu_provision.operations.files import changed_paths
from gpu_provision.spec.settings import default
from gpu_provision.state import NodeStateData

#: Files whose change means the package index must be refreshed before installing.
REPOSITORY_PREFIXES = ("/etc/apt/sources.list", "/etc/apt/preferences", "/etc/apt/keyrings/",
                       "/etc/apt/apt.conf.d/", "/etc/yum.repos.d/", "/etc/dnf/")

APT_GET = ("DEBIAN_FRONTEND=noninteractive apt-get -y -q -o Dpkg::Options::=--force-confold "
           "--allow-downgrades --allow-change-held-packages")
#: Seconds a package operation waits for the package manager's lock unless the node says otherwise.
LOCK_TIMEOUT: int = default("packages.lock_timeout")


RPM_FAMILY = ("rhel", "rocky", "almalinux", "centos")


def family(system: Mapping[str, Any]) -> str | None:
    """``ubuntu``, ``debian`` or ``rhel`` (RHEL and its rebuilds) from the probe's system section; None otherwise."""
    os_id = str(system.get("os_id", ""))
    if os_id in ("ubuntu", "debian"):
        return os_id
    if os_id in RPM_FAMILY or "rhel" in str(system.get("os_like", "")).split():
        return "rhel"
    return None


def names(template: Sequence[str], **values: str) -> list[str]:
    """Package name templates from the package data with ``{branch}``, ``{flavour}``, ``{kernel}`` filled."""
    return [t.format(**values) for t in template]


def apt_spec(want: PackageWant) -> str:
    """``name=version`` as apt-get takes it; a bare upstream version gets ``-*`` to match any Debian revision."""
    if not want.version:
        return want.name
    version = want.version
    if "-" not in version and not version.endswith("*"):
        version += "-*"
    return f"{want.name}={version}"


def dnf_spec(want: PackageWant) -> str:
    """``name-version`` as dnf takes it (a version without release matches any release)."""
    return f"{want.name}-{want.version}" if want.version else want.name


def is_downgrade(wanted: str | None, installed: str | None) -> bool:
    """Whether reaching ``wanted`` from the installed version goes down (a rollback): a lower exact version, or a
    branch glob (``580.*``) below the installed one's branch.

    Versions compare in the one order of :mod:`gpu_provision.node.versions` (dpkg's; rpm's agrees on the versions
    NVIDIA and Kubernetes publish); a glob compares only as many parts as it gives.
    """
    if not wanted or not installed or version_matches(wanted, installed):
        return False
    if wanted.endswith("*"):
        branch = wanted.rstrip("*").rstrip(".-")
        parts = branch.count(".") + 1
        return version_key(branch, parts) < version_key(installed, parts)
    return version_key(wanted) < version_key(installed)


def apt_lock_wait(seconds: int) -> str:
    """apt's option to wait up to ``seconds`` for the dpkg lock (apt 1.9.11 and later; older apt ignores it)."""
    return f"-o DPkg::Lock::Timeout={int(seconds)}"


#: Seconds one ``apt-get update`` may take beyond its lock wait before it is stopped and tried once more.
UPDATE_BOUND = 180


def apt_update(wait: str) -> str:
    """``apt-get update`` bounded in time and tried once more when it fails or is stopped.

    Seen twice on the rig's nodes behind apt-cacher-ng: apt waited for ever on its methods after every one of them
    had finished and gone idle, so a deploy held the node until ``ssh.command_timeout``. A second try, with what the
    first one fetched, went through where it was tried by hand.
    """
    seconds = int(wait.rsplit("=", 1)[-1]) + UPDATE_BOUND if "=" in wait else UPDATE_BOUND
    once = f"timeout -k 10 {seconds} apt-get {wait} update -q"
    return f"{{ {once} || {once}; }}"


def plan(wants: Sequence[PackageWant], state: NodeStateData, repositories_changed: bool,
         lock_timeout: int = LOCK_TIMEOUT, recommends: bool = True) -> list[str]:
    """Commands that install, remove, hold and lock ``wants`` (empty when the node already matches).

    apt commands wait up to ``lock_timeout`` seconds for another holder of the dpkg lock (unattended-upgrades) before
    failing; dnf waits for the holder of its own lock by itself. ``recommends=False`` installs with apt's
    ``--no-install-recommends``.
    """
    manager = state.package_manager
    unmet = [(w, {d.kind for d in w.unmet(state)}) for w in wants]
    install = [w for w, kinds in unmet if w.present and "package" in kinds]
    remove = [w for w, kinds in unmet if not w.present and "package" in kinds]
    # An install moves the package, so its hold is set again with it.
    hold = [w for w, kinds in unmet if w.present and w.held and (w in install or "package-hold" in kinds)]
    if not (install or remove or hold):
        return []
    if manager == "apt":
        return _apt(install, remove, hold, repositories_changed, apt_lock_wait(lock_timeout), recommends)
    if manager == "dnf":
        locked = [w for w in install if state.package(w.name).held]
        down = [w for w in install if is_downgrade(w.version, state.package(w.name).version)]
        return _dnf([w for w in install if w not in down], down, remove, hold, locked, repositories_changed)
    return [fail_command("no supported package manager (apt or dnf) found on this node")]


def _apt(install: list[PackageWant], remove: list[PackageWant], hold: list[PackageWant],
         repositories_changed: bool, wait: str, recommends: bool = True) -> list[str]:
    commands = []
    apt_get = f"{APT_GET} {wait}"
    if remove:
        commands.append(f"{apt_get} remove " + " ".join(shlex.quote(w.name) for w in remove))
    if install:
        specs = " ".join(shlex.quote(apt_spec(w)) for w in install)
        if repositories_changed:
            commands.append(apt_update(wait))
        else:
            # Refresh the index only when apt cannot resolve the wanted versions from what it already has:
            # `apt-get update` on every run would make a converged node report a change.
            commands.append(f"{APT_GET} install -s {specs} >/dev/null 2>&1 || {apt_update(wait)}")
        commands.append(f"{apt_get} install {'' if recommends else '--no-install-recommends '}{specs}")
    if hold:
        commands.append("apt-mark hold " + " ".join(shlex.quote(w.name) for w in hold))
    return commands


def _dnf(install: list[PackageWant], downgrade: list[PackageWant], remove: list[PackageWant],
         hold: list[PackageWant], locked: list[PackageWant], repositories_changed: bool) -> list[str]:
    commands = []
    if remove:
        commands.append("dnf remove -y " + " ".join(shlex.quote(w.name) for w in remove))
    if hold:
        commands.append("rpm -q python3-dnf-plugin-versionlock >/dev/null 2>&1 || "
                        "dnf install -y python3-dnf-plugin-versionlock")
    if locked:
        commands.append("dnf versionlock delete " + " ".join(shlex.quote(w.name) for w in locked))
    refresh = " --refresh" if repositories_changed else ""
    # A rollback is dnf's own downgrade (``dnf downgrade NAME-VERSION``), after the lock on the newer version is
    # gone and before the lock on the older one is set, so a lower version rolls out as a higher one does.
    for verb, wants in (("downgrade", downgrade), ("install", install)):
        if wants:
            specs = " ".join(shlex.quote(dnf_spec(w)) for w in wants)
            commands.append(f"dnf {verb} -y --allowerasing{refresh} {specs}")
            refresh = ""
    if hold:
        commands.append("dnf versionlock add " + " ".join(shlex.quote(w.name) for w in hold))
    return commands


@operation()
def wants(wants: Sequence[PackageWant], lock_timeout: int = LOCK_TIMEOUT, recommends: bool = True):
    """Packages installed at the wanted versions (downgrading if needed), held where wanted, or removed.

    + wants: the packages; ``version`` as the package manager spells it (``580.95.05-1``, ``580.*``), ``held``
      for ``apt-mark hold`` / ``dnf versionlock``, ``present=False`` to remove
    + lock_timeout: seconds to wait for another process holding the package lock (the node's
      ``packages.lock_timeout``); apt fails only after that, instead of at once
    + recommends: False installs without the packages' recommendations (apt's ``--no-install-recommends``)

    The package index is refreshed only when a repository file changed in this run or apt cannot resolve a wanted
    version from the index it has. Held packages are changed only to the wanted version (apt's
    ``--allow-change-held-packages``; dnf unlocks, installs and locks again). Configuration files the admin changed
    are kept (``--force-confold``).

    .. code:: python

        packages.wants(name="Driver packages", wants=[PackageWant("nvidia-driver", "580.95.05-1", held=True)])
    """
    host = this_host()
    wanted = list(wants)
    state = current_state(host, request_for(list(wanted)))
    repositories_changed = any(p.startswith(REPOSITORY_PREFIXES) for p in changed_paths(host))
    commands = plan(wanted, state, repositories_changed, lock_timeout, recommends)
    if not commands:
        host.noop("packages already as wanted: " + ", ".join(w.name for w in wanted))
        return
    mark_changed(host)
    yield from commands
