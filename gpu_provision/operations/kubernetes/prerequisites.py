"""kubeadm's prerequisites on every node: swap off, kernel modules loaded, bridge and forwarding sysctls applied.

kubelet refuses to start with swap on, and pod networking needs ``overlay``, ``br_netfilter`` and the sysctls; these
operations converge the running node (the files that keep them at boot are ``files.wants`` in the stage).
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence

from pyinfra.api import operation

from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.operations.files import changed_paths
from gpu_provision.operations.kubernetes.probe import kubernetes_request, kubernetes_section
from gpu_provision.state import NodeStateData, Request

FSTAB = "/etc/fstab"
FSTAB_BACKUP = "/etc/fstab.gpu-provision.bak"


def fstab_swap_lines(text: str) -> list[str]:
    """Active (uncommented) swap entries of an fstab."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            out.append(line)
    return out


# Comments out every fstab line whose third field is "swap"; keeps everything else byte for byte.
_COMMENT_SWAP = r"s/^([^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap([[:space:]].*)?)$/# \1/"


def swap_plan(state: NodeStateData) -> list[str]:
    """Commands that turn swap off now and keep it off at boot (empty when already so)."""
    commands = []
    if state.system.get("swaps"):
        commands.append("swapoff -a")
    fstab = state.file(FSTAB)
    if fstab_swap_lines(fstab.content or ""):
        commands.append(f"cp -a {FSTAB} {FSTAB_BACKUP}")
        commands.append(f"sed -i -E {shlex.quote(_COMMENT_SWAP)} {FSTAB}")
        # systemd turns fstab lines into .swap units at boot and on daemon-reload: drop the stale ones now.
        commands.append("if command -v systemctl >/dev/null; then systemctl daemon-reload; fi")
    return commands


@operation()
def swap_off():
    """Swap off and kept off: ``swapoff -a`` and every fstab swap entry commented out (fstab backed up first).

    kubelet refuses to start with swap on (``failSwapOn``).

    .. code:: python

        prerequisites.swap_off(name="Swap off")
    """
    host = this_host()
    commands = swap_plan(current_state(host, Request(files={FSTAB}, contents={FSTAB})))
    if not commands:
        host.noop("swap already off")
        return
    mark_changed(host)
    yield from commands


def module_present(state: NodeStateData, name: str) -> bool:
    """Whether kernel module ``name`` is loaded or built in.

    Loaded: listed in ``/proc/modules``. Built in: ``/sys/module/NAME`` exists, or, for built-in modules without
    parameters (which have no such entry), what the module provides is there (the probe's ``module_features``).
    """
    if name in state.system.get("modules", []) or state.file(f"/sys/module/{name}").exists:
        return True
    return bool(kubernetes_section(state).get("module_features", {}).get(name))


@operation()
def modules_loaded(modules: Sequence[str]):
    """Kernel modules loaded now (boot-time loading is the ``/etc/modules-load.d`` file).

    + modules: module names, e.g. ``("overlay", "br_netfilter")``

    ``modprobe`` runs only for a module that is neither loaded nor built into the kernel (see
    :func:`module_present`): kernels without loadable-module support have the built-in ones and no modprobe to run.

    .. code:: python

        prerequisites.modules_loaded(name="Kernel modules", modules=("overlay", "br_netfilter"))
    """
    host = this_host()
    state = current_state(host, kubernetes_request(*(f"/sys/module/{m}" for m in modules)))
    missing = [m for m in modules if not module_present(state, m)]
    if not missing:
        host.noop("modules already loaded or built in: " + ", ".join(modules))
        return
    mark_changed(host)
    for module in missing:
        yield f"modprobe {shlex.quote(module)}"


@operation()
def sysctls_applied(path: str, values: Mapping[str, str]):
    """``sysctl --system`` when ``path`` changed in this run or a running value differs from ``values``.

    + path: the sysctl.d file that sets ``values`` (written before by ``files.wants``)
    + values: name -> wanted value

    .. code:: python

        prerequisites.sysctls_applied(name="Apply sysctls", path="/etc/sysctl.d/99-kubernetes.conf",
                                      values={"net.ipv4.ip_forward": "1"})
    """
    host = this_host()
    state = current_state(host, Request(sysctls=set(values)))
    running = state.system.get("sysctls", {})
    wrong = sorted(n for n, v in values.items() if running.get(n) != v)
    if path not in changed_paths(host) and not wrong:
        host.noop("sysctls already applied")
        return
    mark_changed(host)
    # sysctl --system fails when any file sets a key the node may not write (kernel.* inside containers); then
    # only this file's keys decide.
    yield f"sysctl --system >/dev/null 2>&1 || sysctl -p {shlex.quote(path)} >/dev/null"
