"""systemd units enabled and running, reloaded when a unit file changed, restarted when their config changed."""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Sequence

from pyinfra.api import operation

from gpu_provision.desired import UnitWant, request_for
from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.operations.files import changed_paths
from gpu_provision.state import NodeStateData

# A package's postinst start plus restarts for its configuration can exceed systemd's start rate limit (Docker:
# 3 starts a minute), which then refuses the restart this run asks for; reset-failed flushes that counter.
_RESET = "systemctl reset-failed"

UNIT_DIRS = ("/etc/systemd/system/", "/lib/systemd/system/", "/usr/lib/systemd/system/", "/run/systemd/system/")


def _active(state: NodeStateData, name: str) -> bool:
    unit = state.unit(name)
    return unit is not None and unit.active == "active"


def plan(wants: Sequence[UnitWant], state: NodeStateData, changed: set[str]) -> list[str]:
    """Commands for ``wants`` given the node's units and the paths that changed in this run.

    What is unmet is each want's own :meth:`~gpu_provision.desired.UnitWant.unmet`, the answer drift reports; a
    missing unit is enabled and started as wanted (its package may be installed by an earlier operation of this
    run). A restart after a configuration change is no unmet want but an event of this run, so it is decided here.
    """
    commands: list[str] = []
    if any(path.startswith(UNIT_DIRS) for path in changed):
        commands.append("systemctl daemon-reload")
    for want in wants:
        unmet = {d.kind for d in want.unmet(state)}
        name = shlex.quote(want.name)
        missing = "service" in unmet
        if "service-enabled" in unmet or (missing and want.enabled):
            commands.append(f"systemctl {'enable' if want.enabled else 'disable'} {name}")
        if "service-active" in unmet or (missing and want.running):
            commands.append(f"{_RESET} {name} 2>/dev/null; systemctl start {name}" if want.running
                            else f"systemctl stop {name}")
        elif want.running is not False and _active(state, want.name) \
                and changed.intersection(want.restart_on):
            commands.append(f"{_RESET} {name} 2>/dev/null; systemctl restart {name}")
    return commands


@operation()
def wants(wants: Sequence[UnitWant], changed_files: Iterable[str] = ()):
    """systemd units enabled/disabled and started/stopped as wanted; restarted only after their config changed.

    + wants: the units; ``restart_on`` names the files whose change in this run restarts a running unit
    + changed_files: further paths to treat as changed (besides those this run's file operations recorded)

    ``systemctl daemon-reload`` runs once when a unit file or drop-in changed in this run. A unit that is started
    here is not restarted again.

    .. code:: python

        services.wants(name="Docker running", wants=[UnitWant("docker", restart_on=("/etc/docker/daemon.json",))])
    """
    host = this_host()
    wanted = list(wants)
    state = current_state(host, request_for(list(wanted)))
    commands = plan(wanted, state, changed_paths(host) | set(changed_files))
    if not commands:
        host.noop("services already as wanted: " + ", ".join(w.name for w in wanted))
        return
    mark_changed(host)
    yield from commands
