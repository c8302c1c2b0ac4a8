"""Groups and their members."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from pyinfra.api import operation

from gpu_provision.desired import GroupWant, request_for
from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.state import NodeStateData


def plan(wants: Sequence[GroupWant], state: NodeStateData) -> list[str]:
    """Commands that create the groups and add missing members (members are never removed).

    What is unmet is each want's own :meth:`~gpu_provision.desired.GroupWant.unmet`, the answer drift reports.
    """
    commands: list[str] = []
    for want in wants:
        unmet = {d.kind: d for d in want.unmet(state)}
        name = shlex.quote(want.name)
        missing: set[str] = set()
        if "group" in unmet:
            commands.append(f"groupadd {name}")
            missing = set(want.members)
        elif "group-members" in unmet:
            missing = set(want.members) - set(unmet["group-members"].actual)
        for user in sorted(missing):
            quoted = shlex.quote(user)
            commands.append(
                f"id -u {quoted} >/dev/null 2>&1 || "
                f"{{ echo {shlex.quote(f'gpu-provision: user {user} does not exist')} >&2; exit 1; }}; "
                f"usermod -aG {name} {quoted}"
            )
    return commands


@operation()
def wants(wants: Sequence[GroupWant]):
    """Groups present with at least the wanted members.

    + wants: the groups and their members; a member that has no account fails the host with its name

    Members not in the want are left in place: accounts belong to the site, not to this project.

    .. code:: python

        accounts.wants(name="GPU group", wants=[GroupWant("gpu", members=("alice", "bob"))])
    """
    host = this_host()
    wanted = list(wants)
    state = current_state(host, request_for(list(wanted)))
    commands = plan(wanted, state)
    if not commands:
        host.noop("groups already as wanted: " + ", ".join(w.name for w in wanted))
        return
    mark_changed(host)
    yield from commands
