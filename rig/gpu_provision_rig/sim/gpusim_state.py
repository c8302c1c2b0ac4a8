"""The GPU simulator's mutable state, kept in ``state.json`` under a file lock (stand-in, not NVIDIA software).

MIG mode, GPU and compute instances, legacy persistence and the registered GPU processes and clients live in
``/var/lib/gpu-sim/state.json``; every command reads and changes it under ``flock`` (``state.lock``), so concurrent
calls do not lose changes. A new boot id drops what a reboot drops on real hardware.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import uuid as uuidlib
from typing import Iterator

from gpusim_config import env_path, load_json, run_dir, state_dir
from gpusim_errors import RC_NO_PERMISSION, RC_NOT_FOUND, SimError
from gpusim_hardware import Gpu
from gpusim_procfs import alive, proc_start_time


def read_boot_id() -> str:
    """Identity of the current boot: the kernel's boot id plus a token kept in the run directory.

    The token matters in containers: a rebooted systemd-nspawn node may see the host kernel's boot id, but
    its /run is a fresh tmpfs, so a new token marks the new boot there too."""
    path = env_path("GPU_SIM_BOOT_ID_FILE", "/proc/sys/kernel/random/boot_id")
    try:
        with open(path, encoding="utf-8") as fh:
            kernel = fh.read().strip()
    except FileNotFoundError:
        kernel = "unknown"
    token_path = os.path.join(run_dir(), "boot-token")
    try:
        with open(token_path, encoding="utf-8") as fh:
            token = fh.read().strip()
    except FileNotFoundError:
        token = str(uuidlib.uuid4())
        with contextlib.suppress(OSError):
            os.makedirs(run_dir(), exist_ok=True)
            with open(token_path + ".tmp", "w", encoding="utf-8") as fh:
                fh.write(token + "\n")
            os.replace(token_path + ".tmp", token_path)
    return f"{kernel}/{token}"


class State:
    """The simulator's mutable state; use :func:`locked_state` to read and change it."""

    def __init__(self, data: dict, gpus: list[Gpu]) -> None:
        self.data = data
        self.gpus = gpus

    def gpu_state(self, gpu: Gpu) -> dict:
        gs = self.data.setdefault("gpus", {}).setdefault(gpu.uuid, {})
        default_mig = bool(gpu.entry.get("mig_enabled", False))
        gs.setdefault("mig_current", default_mig)
        gs.setdefault("mig_pending", gs["mig_current"])
        gs.setdefault("legacy_persistence", False)
        gs.setdefault("gis", [])
        return gs

    def processes(self, gpu: Gpu | None = None) -> list[dict]:
        procs = [p for p in self.data.setdefault("processes", []) if alive(p)]
        self.data["processes"] = procs
        return [p for p in procs if gpu is None or p["gpu"] == gpu.uuid]

    def clients(self) -> list[dict]:
        clients = [c for c in self.data.setdefault("clients", []) if alive(c)]
        self.data["clients"] = clients
        return clients

    def busy(self, gpu: Gpu) -> bool:
        """A GPU is in use while a registered compute process or a handle-holding daemon lives."""
        if self.processes(gpu):
            return True
        return any(c.get("gpus") in (None, "all") or gpu.uuid in c.get("gpus", []) for c in self.clients())

    def persistence(self, gpu: Gpu) -> bool:
        """Persistence mode: on while nvidia-persistenced runs, or after ``nvidia-smi -pm 1``."""
        if self.gpu_state(gpu)["legacy_persistence"]:
            return True
        pid_file = env_path("GPU_SIM_PERSISTENCED_PID", "/var/run/nvidia-persistenced/nvidia-persistenced.pid")
        try:
            with open(pid_file, encoding="utf-8") as fh:
                pid = int(fh.read().strip() or "0")
        except (FileNotFoundError, ValueError):
            return False
        return pid > 0 and proc_start_time(pid) is not None

    def apply_reboot(self) -> None:
        """What a node reboot does to the GPUs (MIG user guide): instances are gone; Hopper and later
        lose MIG mode, Ampere keeps it in the InfoROM (a pending change takes effect)."""
        for gpu in self.gpus:
            gs = self.gpu_state(gpu)
            gs["gis"] = []
            gs["legacy_persistence"] = False
            if gpu.hopper_or_later:
                gs["mig_current"] = gs["mig_pending"] = bool(gpu.entry.get("mig_enabled", False))
            else:
                gs["mig_current"] = gs["mig_pending"]
        self.data["processes"] = []
        self.data["clients"] = []


@contextlib.contextmanager
def locked_state(gpus: list[Gpu], write: bool = True) -> Iterator[State]:
    """Load the state under the lock, detect a reboot, and save it back on success.

    Readers that may not write the state directory (any user may run nvidia-smi) take a shared lock on a
    read-only descriptor and see the state as it is; changing commands need root anyway."""
    directory = state_dir()
    lock_path = os.path.join(directory, "state.lock")
    path = os.path.join(directory, "state.json")
    try:
        os.makedirs(directory, exist_ok=True)
        lock = open(lock_path, "a+", encoding="utf-8")  # noqa: SIM115 - closed in the finally below
        mode = fcntl.LOCK_EX
    except PermissionError:
        if write:
            raise SimError("Insufficient Permissions", RC_NO_PERMISSION) from None
        try:
            lock = open(lock_path, encoding="utf-8")  # noqa: SIM115
        except FileNotFoundError:
            lock = open(os.devnull, encoding="utf-8")  # noqa: SIM115 - no state yet: nothing to guard
        mode = fcntl.LOCK_SH
    try:
        fcntl.flock(lock, mode)
        try:
            data = load_json(path)
        except (FileNotFoundError, json.JSONDecodeError):
            data = {}
        state = State(data, gpus)
        boot_id = read_boot_id()
        if data.get("boot_id") not in (None, boot_id):
            state.apply_reboot()
        data["boot_id"] = boot_id
        for gpu in gpus:
            state.gpu_state(gpu)
        yield state
        if write:
            tmp = path + ".tmp"
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(data, fh, indent=1, sort_keys=True)
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    finally:
        lock.close()


def mem_used(state: State, gpu: Gpu) -> int:
    """Memory the registered processes of ``gpu`` use, in MiB: every listing prints this one sum."""
    return sum(int(p.get("used_memory", 0)) for p in state.processes(gpu))


def fb_memory(state: State, gpu: Gpu) -> tuple[int, int, int, int]:
    """The framebuffer of ``gpu`` in MiB: total, reserved, used (by registered processes) and free, as ``-q`` and
    ``--query-gpu`` print them (free is what an idle GPU has, less what the processes use)."""
    used = mem_used(state, gpu)
    total = int(gpu.hwv("memory_total_mib", 0))
    reserved = int(gpu.hwv("memory_reserved_mib", 0))
    free = int(gpu.hwv("memory_free_idle_mib", total - reserved)) - used
    return total, reserved, used, free


def require_root(action: str, gpu: Gpu) -> None:
    """Refuse a change to ``gpu`` unless run as root: any user may read, only root changes (as on a real host)."""
    if os.geteuid() != 0:
        raise SimError(f"Unable to {action} for GPU {gpu.bus_id}: Insufficient Permissions", RC_NO_PERMISSION)


def mig_enabled_gpus(gpus: list[Gpu], state: State) -> list[Gpu]:
    """The GPUs of ``gpus`` in MIG mode now; none fails as nvidia-smi's instance commands do."""
    enabled = [g for g in gpus if g.mig_capable and state.gpu_state(g)["mig_current"]]
    if not enabled:
        raise SimError("No MIG-enabled devices found.", RC_NOT_FOUND)
    return enabled
