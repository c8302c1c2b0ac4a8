"""What to run about a difference from the cluster file: the deploy's stage that owns it, and where one command on
the node closes it at once, that command. Worded for :mod:`.declared`'s findings; pure text from the check or
difference the archive holds."""

from __future__ import annotations

import re
import shlex
from typing import Any, NamedTuple

#: The deploy the stages belong to (``pyinfra INVENTORY gpu_provision.deploys.gpu_node``).
DEPLOY = "gpu_provision.deploys.gpu_node"


class Collected(NamedTuple):
    """Where the archive came from: the host as collected (an inventory name, or a connector such as ``@local``)
    and the node's name in the cluster file."""

    host: str
    node: str


def deploy(stages: str, where: Collected) -> str:
    """The command that re-runs ``stages`` (comma-separated) of the deploy on the node alone: through the
    inventory, or on the node itself through the connector it was collected with."""
    if where.host.startswith("@"):
        return (f"GPU_PROVISION_NODE={shlex.quote(where.node)} GPU_PROVISION_STAGES={stages} pyinfra "
                f"{where.host} {DEPLOY}")
    return f"GPU_PROVISION_STAGES={stages} pyinfra inventory.py {DEPLOY} --limit {shlex.quote(where.node)}"


def stage(stages: str) -> str:
    """A rule's general fix: re-run the stages that own the concept."""
    return (f"Re-run the deploy's {stages} stage{'s' if ',' in stages else ''} on the node "
            f"(GPU_PROVISION_STAGES={stages} pyinfra INVENTORY {DEPLOY} --limit NODE).")


def module_device_mode(params: str | None) -> str | None:
    """The mode the loaded nvidia module gives the device files it re-creates (``DeviceFileMode`` of
    ``/proc/driver/nvidia/params``, as octal), or None when it does not re-create them (``ModifyDeviceFiles: 0``) or
    the params were not read.

    With ``ModifyDeviceFiles: 1`` (the driver's default) the driver checks /dev/nvidia* whenever a client opens it
    and makes them again with the module's ``NVreg_DeviceFile*`` options: seen on a real H200, /dev/nvidiactl made
    0600 by hand was 0666 again after the next nvidia-smi. A chmod then lasts only until the next client.
    """
    values = dict(line.split(":", 1) for line in (params or "").splitlines() if ":" in line)
    if values.get("ModifyDeviceFiles", "").strip() != "1" or not values.get("DeviceFileMode", "").strip().isdigit():
        return None
    return f"{int(values['DeviceFileMode']):04o}"


def device_file_check(check: dict[str, Any], where: Collected, params: str | None = None) -> tuple[str, str, str]:
    """A failed device-file check as (detail, fix, path): the file, the mode and group seen and wanted, and the
    commands that set them now (the permissions stage keeps them so across module loads); ``params``: the node's
    ``/proc/driver/nvidia/params``, when a loaded module whose options differ would undo a chmod."""
    seen, wanted = check.get("measured") or {}, check.get("expected") or {}
    path = str(wanted.get("path") or seen.get("path") or "")
    group, mode = wanted.get("group"), wanted.get("mode")
    keep = f"then {deploy('permissions', where)} keeps them (permissions.group, permissions.mode)"
    if not seen:
        return (f"{path} does not exist; the cluster file wants mode {mode}, group {group}",
                f"load the driver (modprobe nvidia, or nvidia-modprobe) so the file is made, {keep}", path)
    detail = (f"{path}: mode {seen.get('mode')}, group {seen.get('group')}; the cluster file wants mode {mode}, "
              f"group {group}")
    module = module_device_mode(params)
    if module is not None and module != mode:
        return detail, module_fix(module, where), path
    command = f"chgrp {shlex.quote(str(group))} {shlex.quote(path)} && chmod {mode} {shlex.quote(path)}"
    return detail, f"on the node: {command}; {keep}", path


def _driver(check: dict[str, Any], where: Collected) -> str:
    if check.get("id") == "node.driver.loaded":
        return f"load the driver (modprobe nvidia) or reboot; if it is not installed: {deploy('driver', where)}"
    if isinstance(check.get("measured"), dict):  # the user space and the loaded module differ
        return ("reboot the node (or reload the nvidia modules once no process uses the GPUs) so the loaded module "
                "is the installed driver's")
    return (f"{deploy('driver', where)} installs the driver the file declares (driver.version, driver.branch, "
            "driver.cuda_min); a new kernel module loads at the next reboot (driver.reboot)")


def for_check(concept: str, check: dict[str, Any], where: Collected) -> str:
    """The fix for a failed check of ``concept`` (other than a device file)."""
    if concept == "declared-driver":
        return _driver(check, where)
    if concept == "declared-persistence":
        on = 1 if check.get("expected") else 0
        return (f"on the node: nvidia-smi -i {check.get('gpu')} -pm {on}; then {deploy('driver', where)} keeps "
                "nvidia-persistenced as driver.persistenced says")
    if concept == "declared-mig":
        return f"{deploy('mig', where)} applies mig.layout (the gpu-provision-mig unit applies it again at boot)"
    if concept == "declared-runtime":
        return f"{deploy('runtime,toolkit', where)} configures the runtime and the nvidia runtime, then restarts it"
    return (f"the check's reason names what differs; fix it (a hardware check calls for the GPU's service), then "
            f"gpu-provision verify --limit {shlex.quote(where.node)}")


def module_fix(module: str, where: Collected) -> str:
    """The fix for device files a loaded module makes with another mode (:func:`module_device_mode`)."""
    return (f"the loaded nvidia module makes /dev/nvidia* mode {module} again whenever a client opens the GPU "
            f"(ModifyDeviceFiles: 1), so a chmod does not last: {deploy('permissions', where)} writes its "
            "NVreg_DeviceFile* options, which the module takes when it is next loaded (reboot the node, or reload "
            "the nvidia modules once no process uses the GPUs)")


def for_difference(difference: dict[str, Any], where: Collected, params: str | None = None) -> str:
    """The fix for a drift difference: the exact command where one closes it, and always its stage's deploy;
    ``params`` as for :func:`device_file_check`."""
    kind, item = str(difference.get("kind") or ""), str(difference.get("item") or "")
    again = deploy(str(difference.get("stage") or "STAGE"), where)
    wanted = re.fullmatch(r"gid (\S+) mode (\d+)", str(difference.get("expected") or ""))
    module = module_device_mode(params)
    if kind == "device-file" and wanted and module is not None and module != wanted.group(2):
        return module_fix(module, where)
    if kind == "device-file" and wanted:
        command = f"chown 0:{wanted.group(1)} {shlex.quote(item)} && chmod {wanted.group(2)} {shlex.quote(item)}"
        return f"on the node: {command}; then {again} keeps them"
    if kind == "service-enabled":
        verb = "enable" if difference.get("expected") == "enabled" else "disable"
        return f"on the node: systemctl {verb} {shlex.quote(item)}; or {again}"
    if kind == "service-active":
        verb = "start" if difference.get("expected") == "active" else "stop"
        return f"on the node: systemctl {verb} {shlex.quote(item)}; or {again}"
    return again
