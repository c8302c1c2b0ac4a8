"""Node-side MIG layout and vGPU applier of gpu-provision (Python 3.9+, standard library only).

The ``mig-apply`` entry of the node bundle (``/usr/local/lib/gpu-provision/gpu-provision-node.pyz``), next to the
probe's ``mig`` section and the shared decision code it imports. Run by the deploy after a layout change and by
``gpu-provision-mig.service`` at boot (MIG instances, Hopper's MIG mode and SR-IOV virtual functions do not
survive a reboot).

    mig-apply plan  --layout /etc/gpu-provision/mig-layout.yaml          # what would change (read-only)
    mig-apply apply --layout FILE [--config NAME] [--allow-drain] [--reboot-allowed]
    mig-apply vgpu  --vgpu /etc/gpu-provision/vgpu.json [--sysfs /sys]
    mig-apply boot  --layout FILE --vgpu FILE                            # both, as the boot unit runs them

The layout file is NVIDIA mig-parted's ``version: v1`` format written as JSON (valid YAML, readable with the
standard library). Placements are planned here from the driver's own tables (``mig -lgip``/``-lgipp``) with the
same search the controller uses. Exit status: 0 done (or nothing to do), 1 refused or failed (the message says the
state reached; a later run continues from there), 2 usage, 3 rebooting to finish a MIG mode change.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import time

from ..probe import mig as mig_probe
from . import holders, migparted, placement
from . import layout as mig_layout
from . import vgpu as mig_vgpu
from .model import GpuLayout, ProfileTable

PREFIX = "gpu-provision-mig: "
DRAIN_WAIT_S = 30.0
GPU_PODS = ("nvidia-device-plugin", "gpu-feature-discovery", "dcgm-exporter")
KNOWN_TYPES_FILE = mig_probe.VGPU_STATE_FILE


class ApplyError(Exception):
    """A step failed or was refused; the message says which and why."""


def say(text: str) -> None:
    print(PREFIX + text, flush=True)


def run(argv: list, check: bool = True) -> tuple:
    """Run ``argv``; with ``check`` a non-zero exit raises :class:`ApplyError` quoting the command's output."""
    rc, out = mig_probe.run(argv, timeout=300)
    if check and rc != 0:
        raise ApplyError(f"'{' '.join(argv)}' failed (exit {rc}): {(out or '').strip()[-800:]}")
    return rc, out


def desired_for(doc: dict, config, snapshot: dict) -> dict:
    """Per GPU index, the :class:`GpuLayout` the layout file asks for, placed on the driver's own tables."""
    gpus = [(g["index"], [g["pci_device_id"]]) for g in snapshot["gpus"]]
    out = {}
    for index, want in migparted.requested(doc, config, gpus).items():
        placements: tuple = ()
        if want.enabled and want.profiles:
            table = (snapshot.get("tables") or {}).get(str(index))
            planned = placement.plan(ProfileTable.from_dict(table), want.profiles) if table else None
            if planned is None:
                profiles = json.dumps(want.profiles, sort_keys=True)
                raise ApplyError(f"GPU {index}: the layout {profiles} does not fit this GPU's MIG profiles")
            placements = planned
        out[index] = GpuLayout(want.enabled, placements)
    return out


def probe(tables: bool = False, vgpu: bool = False, sysfs: str = "/sys", state_file: str = KNOWN_TYPES_FILE) -> dict:
    snapshot = mig_probe.collect({"tables": tables, "vgpu": vgpu, "sysfs": sysfs, "vgpu_state_file": state_file})
    if snapshot.get("smi_rc") != 0:
        raise ApplyError("nvidia-smi failed: " + str(snapshot.get("error")))
    return snapshot


def state_reached(desired: dict) -> str:
    """Each GPU's MIG state now, for messages after a failure."""
    try:
        snapshot = probe()
    except ApplyError as exc:
        return str(exc)
    gpus = {g["index"]: g for g in snapshot["gpus"]}
    return "; ".join(f"GPU {i}: {mig_layout.describe_gpu(gpus.get(i))}" for i in sorted(desired))


def drain(pids) -> None:
    """SIGTERM the processes holding a GPU, wait (bounded), then SIGKILL the rest."""
    for pid, name in pids:
        say(f"stopping {name} (pid {pid})")
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + DRAIN_WAIT_S
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [(p, n) for p, n in alive if os.path.exists(f"/proc/{p}") and not _zombie(p)]
    for pid, name in alive:
        say(f"killing {name} (pid {pid}): it did not stop within {DRAIN_WAIT_S:.0f}s")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return True
    return data[data.rfind(")") + 2:].split()[:1] == ["Z"]


def stop_gpu_pods(names) -> list:
    """Stop the containers of GPU pods (kubelet starts them again), so they release their GPU handles."""
    if not shutil.which("crictl"):
        return []
    stopped = []
    for name in names:
        rc, out = mig_probe.run(["crictl", "ps", "-q", "--name", name])
        for cid in (out or "").split() if rc == 0 else []:
            if mig_probe.run(["crictl", "stop", cid])[0] == 0:
                stopped.append(cid)
    return stopped


def gpu_mode(index: int) -> tuple:
    gpu = next((g for g in probe()["gpus"] if g["index"] == index), None)
    if gpu is None:
        raise ApplyError(f"GPU {index} disappeared")
    return gpu["mig_current"], gpu["mig_pending"]


def finish_mode(index: int, enable: bool, reboot_allowed: bool) -> None:
    """Make a pending MIG mode change effective: GPU reset, else a reboot when allowed, else an error."""
    current, _ = gpu_mode(index)
    if current == enable:
        return
    say(f"GPU {index}: MIG mode change pending; resetting the GPU")
    rc, out = run(["nvidia-smi", "-r", "-i", str(index)], check=False)
    current, _ = gpu_mode(index)
    if current == enable:
        return
    reason = (out or "").strip().splitlines()[0] if (out or "").strip() else f"exit {rc}"
    if reboot_allowed:
        raise Reboot(f"GPU {index}: MIG mode change pending and the reset failed ({reason})")
    raise ApplyError(f"GPU {index}: MIG mode change is pending and the GPU reset failed ({reason}); reboot the node "
                     "(or set driver.reboot: allowed) and run again")


class Reboot(Exception):
    """The node must reboot to finish a MIG mode change."""


def execute(actions: list, reboot_allowed: bool, device_plugin: bool) -> None:
    """Carry out ``actions`` in order; held services are started again whatever happens."""
    stopped: tuple = ()
    try:
        for action in actions:
            if action.kind in ("start-services", "restart-device-plugin"):
                continue
            say(str(action))
            if action.kind == "drain":
                drain(action.pids)
            elif action.kind == "stop-services":
                run(list(mig_layout.commands(action)[0]))
                stopped = action.units
                stop_gpu_pods(GPU_PODS)
            elif action.kind == "cdi-refresh":
                if shutil.which("nvidia-ctk"):
                    run(mig_layout.commands(action)[0])
                else:
                    say("nvidia-ctk not installed; CDI spec not regenerated")
            elif action.kind == "mig-mode":
                run(mig_layout.commands(action)[0])
                finish_mode(action.gpu, bool(action.enable), reboot_allowed)
            elif action.kind == "reset":
                finish_mode(action.gpu, True, reboot_allowed)
            else:
                for argv in mig_layout.commands(action):
                    run(argv)
    finally:
        if stopped:
            units = tuple(reversed(stopped))
            say("start " + " ".join(units))
            run(["systemctl", "start", *units], check=False)
    if device_plugin and stop_gpu_pods(GPU_PODS[:1]):
        say("restarted the device plugin")


def apply_layout(args) -> int:
    doc = migparted.read(args.layout)
    snapshot = probe(tables=True)
    desired = desired_for(doc, args.config, snapshot)
    if not desired:
        ids = ", ".join(sorted({g["pci_device_id"] for g in snapshot["gpus"]})) or "no GPUs"
        say(f"the layout file selects none of this node's GPUs ({ids}); nothing to do")
        return 0
    units = holders.running_holders()
    actions = mig_layout.plan_node(desired, snapshot, units, args.allow_drain, not args.boot)
    refusals = [a for a in actions if a.kind == "refuse"]
    if args.command == "plan":
        if args.json:
            print(json.dumps([str(a) for a in actions], indent=2))
        else:
            for action in actions:
                print(action)
            if not actions:
                print("nothing to do: every GPU has its layout")
        return 1 if refusals else 0
    if refusals:
        for action in refusals:
            say(str(action))
        return 1
    if not actions:
        say("every GPU has its layout: " + "; ".join(
            f"GPU {i}: {mig_layout.describe_gpu(g)}" for i, g in
            sorted((g["index"], g) for g in snapshot["gpus"] if g["index"] in desired)))
        return 0
    try:
        execute(actions, args.reboot_allowed and not args.boot, not args.boot)
    except Reboot as exc:
        say(str(exc) + "; rebooting (the boot unit applies the layout)")
        run(["systemctl", "reboot"], check=False)
        return 3
    except ApplyError as exc:
        say("failed: " + str(exc))
        say("state reached: " + state_reached(desired))
        return 1
    after = probe()
    left = [a for a in mig_layout.plan_node(desired, after, (), True, False) if a.kind not in ("cdi-refresh",)]
    if left:
        say("the GPUs differ from the layout after applying it: " + "; ".join(str(a) for a in left))
        say("state reached: " + state_reached(desired))
        return 1
    say("applied: " + state_reached(desired))
    return 0


def record_types(snapshot: dict, path: str) -> None:
    """Keep the ``{name: id}`` the VFs offer, to name the types of VFs that hold one later (their lists empty)."""
    known = dict(snapshot.get("vgpu_known_types") or {})
    for pf in (snapshot.get("vgpu") or {}).values():
        known.update(mig_vgpu.offered_types(pf))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".tmp", "w") as f:
        json.dump(known, f, indent=1, sort_keys=True)
    os.replace(path + ".tmp", path)


def apply_vgpu(args) -> int:
    with open(args.vgpu) as f:
        wanted = {int(k): v for k, v in json.load(f)["gpus"].items()}
    if args.command == "plan":
        snapshot = probe(vgpu=True, sysfs=args.sysfs, state_file=args.vgpu_state)
        for step in mig_vgpu.plan_vgpu(wanted, snapshot):
            print(step)
        return 0
    # Each write changes what the other VFs offer: probe, take the next step, repeat (bounded by the VF count).
    for done in range(1024):
        snapshot = probe(vgpu=True, sysfs=args.sysfs, state_file=args.vgpu_state)
        record_types(snapshot, args.vgpu_state)
        steps = mig_vgpu.plan_vgpu(wanted, snapshot)
        refusals = [s for s in steps if s.kind == "refuse"]
        if refusals:
            for step in refusals:
                say(str(step))
            return 1
        if not steps:
            say(f"vGPU types in place ({done} change(s))")
            return 0
        step = steps[0]
        say(str(step))
        try:
            if step.kind == "enable-vfs":
                run([mig_vgpu.SRIOV_MANAGE, "-e", step.address])
            else:
                path = os.path.join(args.sysfs, "bus", "pci", "devices", step.address, "nvidia", "current_vgpu_type")
                with open(path, "w") as f:
                    f.write(f"{step.type_id if step.kind == 'assign' else 0}\n")
        except (OSError, ApplyError) as exc:
            say(f"failed: {exc}")
            return 1
    say("failed: vGPU assignment did not settle")
    return 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="gpu-provision-node mig-apply", description="Apply a MIG layout and vGPU types.")
    parser.add_argument("command", choices=["plan", "apply", "vgpu", "boot"])
    parser.add_argument("--layout", help="mig-parted v1 layout file (JSON)")
    parser.add_argument("--config", help="config name in the layout file (default: its only config)")
    parser.add_argument("--vgpu", help="vGPU file: {\"gpus\": {\"0\": \"NVIDIA H200X-141C\"}}")
    parser.add_argument("--sysfs", default="/sys")
    parser.add_argument("--vgpu-state", default=KNOWN_TYPES_FILE, help="where vGPU type names and IDs are recorded")
    parser.add_argument("--allow-drain", action="store_true", help="stop user processes instead of refusing")
    parser.add_argument("--reboot-allowed", action="store_true", help="reboot when a GPU reset cannot finish")
    parser.add_argument("--boot", action="store_true", help="running at boot: no reboot, no device plugin restart")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    command = args.command
    args.boot = args.boot or command == "boot"
    if command == "apply" and not args.layout:
        parser.error("apply needs --layout FILE")
    if command == "vgpu" and not args.vgpu:
        parser.error("vgpu needs --vgpu FILE")
    try:
        rc = 0
        if command in ("plan", "apply", "boot") and args.layout and os.path.exists(args.layout):
            args.command = "plan" if command == "plan" else "apply"
            rc = apply_layout(args)
        elif command == "apply":
            raise ApplyError(args.layout + ": no such file")
        if rc == 0 and command in ("plan", "vgpu", "boot") and args.vgpu and os.path.exists(args.vgpu):
            args.command = "plan" if command == "plan" else "vgpu"
            rc = apply_vgpu(args)
        elif command == "vgpu":
            raise ApplyError(args.vgpu + ": no such file")
        return rc
    except (ApplyError, ValueError, OSError) as exc:
        say(f"failed: {exc}")
        return 1
