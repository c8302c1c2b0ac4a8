"""Node-side MIG layout and vGPU applier of gpu-provision (Python 3.9+, standard library only).

The ``mig-apply`` entry of the node bundle (``/usr/local/lib/gpu-provision/gpu-provision-node.pyz``), next to the
probe's ``mig`` section and the shared decision code it imports. Run by the deploy after a layout change and by
``gpu-provision-mig.service`` at boot (MIG instances, Hopper's MIG mode and SR-IOV virtual functions do not
survive a reboot).

    mig-apply plan  --layout /etc/gpu-provision/mig-layout.yaml          # what would change (read-only)
    mig-apply apply --layout FILE [--config NAME] [--allow-drain] [--reboot-allowed] [--allow-module-unload]
    mig-apply vgpu  --vgpu /etc/gpu-provision/vgpu.json [--sysfs /sys]
    mig-apply boot  --layout FILE --vgpu FILE                            # both, as the boot unit runs them

The layout file is NVIDIA mig-parted's ``version: v1`` format written as JSON (valid YAML, readable with the
standard library). Placements are planned here from the driver's own tables (``mig -lgip``/``-lgipp``) with the
same search the controller uses. Exit status: 0 done (or nothing to do), 1 refused, failed or interrupted (the
message says the state reached; a later run continues from there), 2 usage, 3 rebooting to finish a MIG mode change.

Whatever happens, the units and kernel modules taken down for a change come back: they are written to a durable
record (:mod:`.record`, ``/var/lib/gpu-provision/mig-stopped.json``) before they go, SIGTERM and SIGHUP unwind
through the restarts (:mod:`.interrupt`), and a closed output only silences the progress lines. When even that
cannot run (``kill -9``, power loss), the next ``apply`` or the boot unit finds the record, finishes the layout and
then starts every unit and loads every module it names.

Every run but ``plan`` holds the node's one-applier lock (:mod:`.lock`, ``/run/gpu-provision/mig-apply.lock``) from
before it reads the GPUs until it ends, so the boot unit, a deploy and a run by hand never change the GPUs at once:
a second one waits up to ``--lock-timeout`` seconds, then fails naming the holder.
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
from . import holders, kmod, lock, migparted, placement, record
from . import layout as mig_layout
from . import vgpu as mig_vgpu
from .interrupt import Interrupted, install, say, shielded
from .model import GpuLayout, Placement, ProfileTable

DRAIN_WAIT_S = 30.0
GPU_PODS = ("nvidia-device-plugin", "gpu-feature-discovery", "dcgm-exporter")
KNOWN_TYPES_FILE = mig_probe.VGPU_STATE_FILE


class ApplyError(Exception):
    """A step failed or was refused; the message says which and why."""


def run(argv: list, check: bool = True) -> tuple:
    """Run ``argv``; with ``check`` a non-zero exit raises :class:`ApplyError` quoting the command's output."""
    rc, out = mig_probe.run(argv, timeout=300)
    if check and rc != 0:
        raise ApplyError(f"'{' '.join(argv)}' failed (exit {rc}): {(out or '').strip()[-800:]}")
    return rc, out


def desired_for(doc: dict, config: str | None, snapshot: dict) -> dict[int, GpuLayout]:
    """Per GPU index, the :class:`GpuLayout` planned from the :class:`.model.MigLayout` the layout file asks for, placed on
    the driver's own tables."""
    gpus = [(g["index"], [g["pci_device_id"]]) for g in snapshot["gpus"]]
    out: dict[int, GpuLayout] = {}
    for index, want in migparted.requested(doc, config, gpus).items():
        placements: tuple[Placement, ...] = ()
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


# crictl's flags as cri-tools v1.36 defines them (kubernetes-sigs/cri-tools, cmd/crictl/sandbox.go listPodCommand:
# -q, --state ready|notready, --label key=value; container.go listContainersCommand: -q, --name (a regular
# expression), --pod; stopContainerCommand: stop ID...). Running containers only, as ``ps`` lists without -a.


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


def stop_labelled_pods(label) -> list:
    """Stop the containers of the ready pods carrying ``label`` (``(key, value)``; kubelet starts them again)."""
    if not shutil.which("crictl"):
        return []
    rc, out = mig_probe.run(["crictl", "pods", "-q", "--state", "ready", "--label", "=".join(label)])
    stopped = []
    for pod in (out or "").split() if rc == 0 else []:
        rc, containers = mig_probe.run(["crictl", "ps", "-q", "--pod", pod])
        for cid in (containers or "").split() if rc == 0 else []:
            if mig_probe.run(["crictl", "stop", cid])[0] == 0:
                stopped.append(cid)
    return stopped


def gpu_mode(index: int) -> tuple:
    gpu = next((g for g in probe()["gpus"] if g["index"] == index), None)
    if gpu is None:
        raise ApplyError(f"GPU {index} disappeared")
    return gpu["mig_current"], gpu["mig_pending"]


def finish_mode(index: int, enable: bool, reboot_allowed: bool, takedown: Takedown) -> None:
    """Make a pending MIG mode change effective: GPU reset (kernel modules that block it unloaded first when
    allowed), else a reboot when allowed, else an error naming what holds the GPU."""
    current, _ = gpu_mode(index)
    if current == enable:
        return
    blocking = takedown.modules_blocking()
    if blocking and takedown.allow_module_unload:
        takedown.unload(blocking)
        blocking = ()
    say(f"GPU {index}: MIG mode change pending; resetting the GPU")
    rc, out = run(["nvidia-smi", "-r", "-i", str(index)], check=False)
    current, _ = gpu_mode(index)
    if current == enable:
        return
    reason = (out or "").strip().splitlines()[0] if (out or "").strip() else f"exit {rc}"
    if blocking:
        reason += ("; kernel module(s) " + kmod.describe(blocking, takedown.procfs) + " hold the GPU: set "
                   "mig.allow_module_unload: true to unload them for the reset")
    if reboot_allowed:
        raise Reboot(f"GPU {index}: MIG mode change pending and the reset failed ({reason})")
    raise ApplyError(f"GPU {index}: MIG mode change is pending and the GPU reset failed ({reason}); reboot the node "
                     "(or set driver.reboot: allowed) and run again")


class Reboot(Exception):
    """The node must reboot to finish a MIG mode change."""


class Takedown:
    """The units and kernel modules taken down for a change, recorded durably before each goes and brought back
    (then the record removed) by :meth:`restore`.

    ``previous`` is what an interrupted apply left in the record; it is brought back too. At boot, units are started
    with ``--no-block``: the boot unit is ordered before kubelet and DCGM, so waiting for their start would deadlock.
    """

    def __init__(self, path: str, previous: record.Stopped | None = None, boot: bool = False,
                 allow_module_unload: bool = False, sysfs: str = "/sys", procfs: str = "/proc") -> None:
        self.path = path
        self.down = previous or record.Stopped()
        self.boot = boot
        self.allow_module_unload = allow_module_unload
        self.sysfs = sysfs
        self.procfs = procfs

    def stop_units(self, units) -> None:
        """Record ``units``, then stop them."""
        self.down = self.down.merged(units=units)
        record.write(self.path, self.down)
        run(["systemctl", "stop", *units])

    def modules_blocking(self) -> tuple:
        """The loaded kernel modules that keep a GPU reset from running (see :mod:`.kmod`)."""
        return kmod.blocking(self.sysfs, self.procfs)

    def unload(self, modules) -> None:
        """Record ``modules``, then unload them (in order); a module that stays in use is named."""
        self.down = self.down.merged(modules=modules)
        record.write(self.path, self.down)
        say("unload kernel module(s) " + ", ".join(modules) + " for the GPU reset")
        rc, out = run(["modprobe", "-r", *modules], check=False)
        if rc != 0:
            raise ApplyError("the GPU reset needs kernel module(s) " + kmod.describe(modules, self.procfs)
                             + f" unloaded and 'modprobe -r' failed: {(out or '').strip()[-400:]}")

    def restore(self) -> bool:
        """Load every recorded module and start every recorded unit (whatever signals arrive meanwhile); remove
        the record when all are back. False when something did not come back (the record stays for the next run)."""
        if not self.down:
            return True
        with shielded():
            ok = True
            for module in reversed(self.down.modules):
                say("load kernel module " + module)
                ok = run(["modprobe", module], check=False)[0] == 0 and ok
            if self.down.units:
                units = tuple(reversed(self.down.units))
                say("start " + " ".join(units))
                ok = run(["systemctl", "start", *(("--no-block",) if self.boot else ()), *units],
                         check=False)[0] == 0 and ok
            if ok:
                record.remove(self.path)
                self.down = record.Stopped()
            else:
                say(f"not everything came back; {self.path} keeps {self.down} for the next run")
        return ok


def execute(actions: list, reboot_allowed: bool, plugin: str | None, takedown: Takedown) -> bool:
    """Carry out ``actions`` in order; what was taken down comes back whatever happens (False if it did not)."""
    try:
        for action in actions:
            if action.kind in ("start-services", "restart-plugin"):
                continue
            say(str(action))
            if action.kind == "drain":
                drain(action.pids)
            elif action.kind == "stop-services":
                takedown.stop_units(action.units)
                stop_gpu_pods(GPU_PODS)
                stop_labelled_pods(holders.DRA_PLUGIN_LABEL)
            elif action.kind == "cdi-refresh":
                if shutil.which("nvidia-ctk"):
                    run(mig_layout.commands(action)[0])
                else:
                    say("nvidia-ctk not installed; CDI spec not regenerated")
            elif action.kind == "mig-mode":
                run(mig_layout.commands(action)[0])
                finish_mode(action.gpu, bool(action.enable), reboot_allowed, takedown)
            elif action.kind == "reset":
                finish_mode(action.gpu, True, reboot_allowed, takedown)
            else:
                for argv in mig_layout.commands(action):
                    run(argv)
    finally:
        restored = takedown.restore()
    # Each plugin lists the node's devices only as it starts: restarted, it offers the MIG devices just made.
    if plugin == "device-plugin" and stop_gpu_pods(GPU_PODS[:1]):
        say("restarted the device plugin")
    if plugin == "dra" and stop_labelled_pods(holders.DRA_PLUGIN_LABEL):
        say("restarted the DRA kubelet plugin: its ResourceSlices list the new MIG devices")
    return restored


def apply_layout(args) -> int:
    """Plan the layout file against the GPUs and, for ``apply``, carry it out; an interrupted earlier apply is
    finished first (its layout by the normal plan, then everything its record names brought back)."""
    previous = record.read(args.record)
    takedown = Takedown(args.record, previous, args.boot, args.allow_module_unload, args.sysfs, args.procfs)
    if previous and args.command != "plan":
        say(f"an earlier apply was interrupted with {previous} down ({args.record}); finishing it")
    doc = migparted.read(args.layout)
    snapshot = probe(tables=True)
    desired = desired_for(doc, args.config, snapshot)
    if not desired:
        ids = ", ".join(sorted({g["pci_device_id"] for g in snapshot["gpus"]})) or "no GPUs"
        say(f"the layout file selects none of this node's GPUs ({ids}); nothing to do")
        return 0 if args.command == "plan" or takedown.restore() else 1
    units = holders.running_holders()
    plugin = None if args.boot or args.plugin == "none" else args.plugin
    actions = mig_layout.plan_node(desired, snapshot, units, args.allow_drain, plugin, args.cdi_output or None)
    refusals = [a for a in actions if a.kind == "refuse"]
    if args.command == "plan":
        lines = [str(a) for a in actions] + ([f"bring back {previous} (an interrupted apply left it down)"]
                                             if previous else [])
        if args.json:
            print(json.dumps(lines, indent=2))
        else:
            for line in lines:
                print(line)
            if not lines:
                print("nothing to do: every GPU has its layout")
        return 1 if refusals else 0
    if refusals:
        for action in refusals:
            say(str(action))
        takedown.restore()
        return 1
    if not actions:
        say("every GPU has its layout: " + "; ".join(
            f"GPU {i}: {mig_layout.describe_gpu(g)}" for i, g in
            sorted((g["index"], g) for g in snapshot["gpus"] if g["index"] in desired)))
        return 0 if takedown.restore() else 1
    try:
        restored = execute(actions, args.reboot_allowed and not args.boot, plugin, takedown)
    except Reboot as exc:
        say(str(exc) + "; rebooting (the boot unit applies the layout)")
        run(["systemctl", "reboot"], check=False)
        return 3
    except ApplyError as exc:
        say("failed: " + str(exc))
        say("state reached: " + state_reached(desired))
        return 1
    except Interrupted as exc:
        say(f"interrupted by {exc}; state reached: {state_reached(desired)}; a later run finishes the layout")
        return 1
    after = probe()
    left = [a for a in mig_layout.plan_node(desired, after, (), True, None) if a.kind not in ("cdi-refresh",)]
    if left:
        say("the GPUs differ from the layout after applying it: " + "; ".join(str(a) for a in left))
        say("state reached: " + state_reached(desired))
        return 1
    say("applied: " + state_reached(desired))
    return 0 if restored else 1


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
    parser.add_argument("--allow-module-unload", action="store_true",
                        help="unload nvidia_drm/nvidia_modeset for a GPU reset (loaded again after) instead of failing")
    parser.add_argument("--procfs", default="/proc", help="where /proc/modules is read")
    parser.add_argument("--record", default=record.default_path(),
                        help="record of the units and modules an apply took down (default: $GPU_PROVISION_MIG_RECORD "
                             "or " + record.RECORD_FILE + ")")
    parser.add_argument("--lock", default=lock.default_path(),
                        help="the node's one-applier lock (default: $GPU_PROVISION_MIG_LOCK or " + lock.LOCK_FILE + ")")
    parser.add_argument("--lock-timeout", type=float, default=lock.WAIT_S, metavar="SECONDS",
                        help="how long to wait for another applier holding the lock (default: %(default)g)")
    parser.add_argument("--cdi-output", default=mig_layout.CDI_OUTPUT, metavar="PATH",
                        help="CDI spec regenerated after a change (empty: the node keeps none)")
    parser.add_argument("--boot", action="store_true", help="running at boot: no reboot, no plugin restart")
    parser.add_argument("--plugin", choices=[*mig_layout.PLUGINS, "none"], default=mig_layout.DEFAULT_PLUGIN,
                        help="the Kubernetes plugin restarted after a change (kubernetes.gpu_allocation)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    command = args.command
    args.boot = args.boot or command == "boot"
    if command == "apply" and not args.layout:
        parser.error("apply needs --layout FILE")
    if command == "vgpu" and not args.vgpu:
        parser.error("vgpu needs --vgpu FILE")
    install()
    try:
        # Everything but 'plan' changes the GPUs, so it runs only while no other applier does.
        with (contextlib.nullcontext() if command == "plan" else lock.held(args.lock, args.lock_timeout, say)):
            return run_commands(args, command)
    except (ApplyError, record.RecordError, lock.LockBusy, ValueError, OSError) as exc:
        say(f"failed: {exc}")
        return 1
    except Interrupted as exc:
        say(f"interrupted by {exc}; a later run continues from the state reached")
        return 1


def run_commands(args, command: str) -> int:
    """The layout, then the vGPU types, as ``command`` asks (``boot`` does both)."""
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
