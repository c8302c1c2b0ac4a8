#!/usr/bin/env python3
"""GPU simulator behind the test rig's stand-in ``nvidia-smi`` (stand-in, not NVIDIA software).

Hardware comes from ``/etc/gpu-sim/gpus.json`` (one entry per simulated GPU), profile tables from the
project's GPU model files copied to ``/usr/share/gpu-sim/gpus/`` and read through the project's one catalog reader
(``gpu_provision/node/catalog.py``, installed next to this file as ``catalog.py``), and mutable state (MIG mode, GPU and
compute instances, registered GPU processes) from ``/var/lib/gpu-sim/state.json`` under a file lock.

Output formats follow the real driver 580 ``nvidia-smi`` byte for byte where the project has captured
output (tests/fixtures/h200, h200x2). Python 3.9+ standard library only: it runs on rig nodes.

Environment (for tests; defaults are the installed paths):
  GPU_SIM_CONFIG        hardware file               (/etc/gpu-sim/gpus.json)
  GPU_SIM_STATE_DIR     state directory             (/var/lib/gpu-sim)
  GPU_SIM_DATA_DIR      model data directory        (/usr/share/gpu-sim)
  GPU_SIM_LIB_DIR       driver library directory    (/usr/lib/gpu-sim; driver.json)
  GPU_SIM_RUN_DIR       "loaded module" directory   (/run/gpu-sim; version written at module load)
  GPU_SIM_BOOT_ID_FILE  boot id source              (/proc/sys/kernel/random/boot_id)
  GPU_SIM_PERSISTENCED_PID  pid file of the persistence daemon
  GPU_SIM_CLOCK         fixed clock, seconds since the epoch (UTC), for the date lines
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import time
import uuid as uuidlib
from typing import Any, Iterator

try:
    from catalog import load_model
except ImportError:  # run from a checkout, where the catalog reader is the product's own module
    from gpu_provision.node.catalog import load_model

# NVML / nvidia-smi return codes (nvidia-smi(1) "RETURN VALUE").
RC_INVALID_ARG = 2
RC_NOT_SUPPORTED = 3
RC_NO_PERMISSION = 4
RC_NOT_FOUND = 6
RC_DRIVER_NOT_LOADED = 9
RC_LIB_MISMATCH = 18
RC_OTHER = 255

NOT_LOADED_MESSAGE = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)

TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""

# Compute-instance profile id by compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*_SLICE order).
CI_PROFILE_ID_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


class SimError(Exception):
    """A failure reported the way nvidia-smi reports it: message on stdout/stderr and an exit code."""

    def __init__(self, message: str, code: int = RC_OTHER, stream: str = "stdout") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.stream = stream


def env_path(name: str, default: str) -> str:
    """Return the path configured by environment variable ``name`` or ``default``."""
    return os.environ.get(name) or default


def config_path() -> str:
    return env_path("GPU_SIM_CONFIG", "/etc/gpu-sim/gpus.json")


def state_dir() -> str:
    return env_path("GPU_SIM_STATE_DIR", "/var/lib/gpu-sim")


def data_dir() -> str:
    return env_path("GPU_SIM_DATA_DIR", "/usr/share/gpu-sim")


def lib_dir() -> str:
    return env_path("GPU_SIM_LIB_DIR", "/usr/lib/gpu-sim")


def run_dir() -> str:
    return env_path("GPU_SIM_RUN_DIR", "/run/gpu-sim")


def now() -> float:
    """Current time, or the fixed clock from GPU_SIM_CLOCK (so date lines can be compared)."""
    fixed = os.environ.get("GPU_SIM_CLOCK")
    return float(fixed) if fixed else time.time()


def date_line() -> str:
    """The ``Sun Nov 29 21:18:36 2026`` form nvidia-smi prints (C ``asctime`` layout)."""
    return time.asctime(time.gmtime(now()) if os.environ.get("GPU_SIM_CLOCK") else time.localtime(now()))


# ---------------------------------------------------------------------------------------------
# Hardware


class Gpu:
    """One simulated GPU: its identity from gpus.json plus its model's tables."""

    def __init__(self, entry: dict, model: dict, hardware: dict) -> None:
        self.entry = entry
        self.model = model
        self.hw = hardware
        self.index: int = int(entry["index"])
        self.uuid: str = entry["uuid"]
        self.bus_id: str = entry["pci_bus_id"].upper() if entry["pci_bus_id"] else ""
        self.serial: str = str(entry.get("serial", "N/A"))
        telemetry = dict(hardware.get("telemetry", {}))
        telemetry.update(entry.get("telemetry", {}))
        self.telemetry = telemetry

    @property
    def name(self) -> str:
        return self.entry.get("name") or self.hw.get("product_name") or self.model["product_names"][0]

    @property
    def architecture(self) -> str:
        return self.model.get("architecture", "unknown").capitalize()

    @property
    def hopper_or_later(self) -> bool:
        return self.model.get("architecture") not in ("ampere", "turing", "volta", "pascal", "ada")

    @property
    def profiles(self) -> list[dict]:
        return list(self.model.get("mig", {}).get("profiles", []))

    @property
    def mig_capable(self) -> bool:
        return bool(self.profiles)

    @property
    def memory_slices(self) -> int:
        return int(self.model.get("mig", {}).get("memory_slices", 8))

    @property
    def compute_slices(self) -> int:
        return int(self.model.get("mig", {}).get("compute_slices", 7))

    def hwv(self, key: str, default: Any = "N/A") -> Any:
        """A per-GPU override from gpus.json, else the model's hardware default, else what the model file says."""
        fallback = {
            "pci_device_id": (self.model.get("pci_device_ids") or [default])[0],
            "memory_total_mib": int(self.model.get("memory_gib", 0)) * 1024 or default,
        }.get(key, default)
        return self.entry.get(key, self.hw.get(key, fallback))

    def profile(self, ref: str) -> dict:
        """Resolve a GPU-instance profile by id, short name or ``MIG <name>`` (as -cgi accepts)."""
        ref = ref.strip()
        if ref.upper().startswith("MIG "):
            ref = ref[4:].strip()
        for p in self.profiles:
            if ref.isdigit() and int(ref) == int(p["id"]):
                return p
            if ref == p["name"]:
                return p
        raise SimError(f"Unable to find GPU instance profile {ref}: Not Found", RC_NOT_FOUND)

    def resources(self, profile: dict) -> dict:
        """The -lgip resource columns; derived from slices where the model file has none."""
        if "resources" in profile:
            return profile["resources"]
        total_gib = float(self.model.get("memory_gib", 0))
        sms = int(self.hw.get("sm_count", 0))
        per_slice = sms // self.compute_slices if sms else 0
        cs = int(profile["compute_slices"])
        return {
            "memory_gib": round(total_gib * int(profile["memory_slices"]) / self.memory_slices * 0.975, 2),
            "sm": per_slice * cs,
            "ce": cs,
            "dec": 0,
            "enc": 0,
            "jpeg": 0,
            "ofa": 0,
            "p2p": False,
        }


def load_json(path: str) -> Any:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def load_gpus() -> list[Gpu]:
    """Read the node's simulated hardware; no file means no NVIDIA GPU in this node."""
    try:
        config = load_json(config_path())
    except FileNotFoundError:
        return []
    models_dir = os.path.join(data_dir(), "gpus")
    hardware_all = load_json(os.path.join(data_dir(), "hardware.json"))
    gpus = []
    for entry in config.get("gpus", []):
        model_key = entry["model"]
        model = load_model(model_key, models_dir)
        gpus.append(Gpu(entry, model, hardware_all["models"].get(model_key, {})))
    gpus.sort(key=lambda g: g.index)
    return gpus


def driver_info() -> dict:
    """The installed user-space driver (library) version, from the driver package."""
    try:
        return load_json(os.path.join(lib_dir(), "driver.json"))
    except FileNotFoundError as exc:
        raise SimError("NVIDIA-SMI couldn't find libnvidia-ml.so library in your system.", 12) from exc


def loaded_module_version() -> str | None:
    """Version of the 'loaded kernel module' (written at module load), or None if not loaded."""
    try:
        with open(os.path.join(run_dir(), "version"), encoding="utf-8") as fh:
            first = fh.readline()
    except FileNotFoundError:
        return None
    for token in first.split():
        if token.count(".") >= 1 and token.replace(".", "").isdigit():
            return token
    return None


def check_driver() -> dict:
    """Fail like nvidia-smi does when the module is not loaded or does not match the library."""
    info = driver_info()
    module = loaded_module_version()
    if module is None:
        raise SimError(NOT_LOADED_MESSAGE.rstrip("\n"), RC_DRIVER_NOT_LOADED)
    if module != info["version"]:
        major_minor = ".".join(info["version"].split(".")[:2])
        raise SimError(
            f"Failed to initialize NVML: Driver/library version mismatch\nNVML library version: {major_minor}",
            RC_LIB_MISMATCH,
        )
    return info


# ---------------------------------------------------------------------------------------------
# State


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


def proc_start_time(pid: int) -> str | None:
    """Start time of ``pid`` in clock ticks (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as fh:
            data = fh.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    fields = data[data.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def alive(record: dict) -> bool:
    """True while the registered process still runs (pid and start time match, so reuse is caught)."""
    started = proc_start_time(int(record["pid"]))
    if started is None:
        return False
    state = ""
    with contextlib.suppress(OSError), open(f"/proc/{record['pid']}/stat", encoding="utf-8") as fh:
        data = fh.read()
        state = data[data.rfind(")") + 2 :].split()[0]
    return started == record.get("start_time", started) and state != "Z"


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


# ---------------------------------------------------------------------------------------------
# MIG placement logic


def gi_id_for(start: int, size: int, slices: int) -> int:
    """GPU-instance id from its placement: slots numbered like a binary heap over the memory slices
    (whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14). Real drivers number instances in their
    own way; consumers must read ids from ``mig -lgi``."""
    level_size = slices
    base = 0
    while level_size > size and level_size > 1:
        base = base * 2 + 1
        level_size //= 2
    return base + start // max(size, 1)


def occupied(gs: dict) -> tuple[set[int], int]:
    """Memory slices in use and compute slices in use on one GPU."""
    slots: set[int] = set()
    compute = 0
    for gi in gs["gis"]:
        slots.update(range(gi["start"], gi["start"] + gi["size"]))
        compute += gi["compute_slices"]
    return slots, compute


def fits(gpu: Gpu, gs: dict, profile: dict, start: int) -> bool:
    """Whether ``profile`` can be placed at ``start`` given what already exists."""
    if start not in profile["starts"]:
        return False
    count = sum(1 for gi in gs["gis"] if gi["profile_id"] == profile["id"])
    if count >= int(profile["max_instances"]):
        return False
    # Only one media-extension (+me) instance can exist: it takes the GPU's shared media engines.
    if profile["name"].endswith("+me") and any(gi["name"].endswith("+me") for gi in gs["gis"]):
        return False
    slots, compute = occupied(gs)
    wanted = set(range(start, start + int(profile["memory_slices"])))
    if wanted & slots:
        return False
    return compute + int(profile["compute_slices"]) <= gpu.compute_slices


def free_count(gpu: Gpu, gs: dict, profile: dict) -> int:
    """How many more instances of ``profile`` could be created now (the -lgip Free column)."""
    trial = {"gis": list(gs["gis"])}
    count = 0
    while True:
        start = next((s for s in sorted(profile["starts"], reverse=True) if fits(gpu, trial, profile, s)), None)
        if start is None:
            return count
        trial["gis"].append(make_gi(gpu, profile, start))
        count += 1


def make_gi(gpu: Gpu, profile: dict, start: int) -> dict:
    size = int(profile["memory_slices"])
    return {
        "id": gi_id_for(start, size, gpu.memory_slices),
        "profile_id": int(profile["id"]),
        "name": profile["name"],
        "start": start,
        "size": size,
        "compute_slices": int(profile["compute_slices"]),
        "cis": [],
    }


def mig_uuid(gpu: Gpu, gi: dict, ci: dict) -> str:
    """Stable MIG device UUID derived from the parent GPU and the instance ids."""
    return "MIG-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"{gpu.uuid}/{gi['id']}/{ci['id']}"))


def gi_memory_mib(gpu: Gpu, gi: dict) -> int:
    profile = next(p for p in gpu.profiles if int(p["id"]) == gi["profile_id"])
    return int(round(float(gpu.resources(profile)["memory_gib"]) * 1024))


# ---------------------------------------------------------------------------------------------
# Output helpers


class Out:
    """Collects stdout and stderr text, so a command's output is written once at the end."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []

    def line(self, text: str = "") -> None:
        self.stdout.append(text + "\n")

    def err(self, text: str) -> None:
        self.stderr.append(text + "\n")


def select_gpus(gpus: list[Gpu], ids: str | None) -> list[Gpu]:
    """Resolve ``-i`` (indexes, UUIDs or PCI bus ids, comma separated) like nvidia-smi."""
    if not ids:
        return gpus
    chosen = []
    for ref in ids.split(","):
        ref = ref.strip()
        match = None
        for gpu in gpus:
            bus = gpu.bus_id.lower()
            r = ref.lower()
            if (ref.isdigit() and int(ref) == gpu.index) or r == gpu.uuid.lower() or r in (bus, bus[4:]):
                match = gpu
        if match is None:
            raise SimError("No devices were found", RC_NOT_FOUND)
        chosen.append(match)
    return chosen


def mem_used(state: State, gpu: Gpu) -> int:
    return sum(int(p.get("used_memory", 0)) for p in state.processes(gpu))


# ---------------------------------------------------------------------------------------------
# nvidia-smi (summary table)


def summary(out: Out, gpus: list[Gpu], state: State, info: dict) -> None:
    """The default ``nvidia-smi`` table (driver 580 layout)."""
    bar = "+" + "-" * 89 + "+"
    cell = "+" + "-" * 41 + "+" + "-" * 24 + "+" + "-" * 22 + "+"
    out.line(date_line() + "       ")
    out.line(bar)
    head = f"| NVIDIA-SMI {info['version']:<23}Driver Version: {info['version']:<15}CUDA Version: {info['cuda_version']:<9}|"
    out.line(head)
    out.line(cell)
    out.line("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |")
    out.line("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |")
    out.line("|                                         |                        |               MIG M. |")
    out.line("|" + "=" * 41 + "+" + "=" * 24 + "+" + "=" * 22 + "|")
    for gpu in gpus:
        gs = state.gpu_state(gpu)
        t = gpu.telemetry
        pm = "On" if state.persistence(gpu) else "Off"
        name = gpu.name if len(gpu.name) <= 28 else gpu.name[:25] + "..."
        out.line(f"| {gpu.index:>3}  {name:<29}{pm:>4}  | {gpu.bus_id:>18} {'Off':>3} | {'0':>20} |")
        used = mem_used(state, gpu)
        total = gpu.hwv("memory_total_mib")
        draw = f"{t.get('power_draw', 0)}W"
        cap = f"{gpu.hwv('power_limit_w')}W"
        memory = f"{used}MiB / {total}MiB"
        util = "N/A" if gs["mig_current"] else f"{t.get('utilization', 0)}%"
        out.line(
            f"| {'N/A'}{str(t.get('temperature', 0)) + 'C':>6}{t.get('pstate', 'P0'):>6}{draw:>16} / {cap:>5} |"
            f" {memory:>22} | {util:>7}{'Default':>13} |"
        )
        mig = ("Enabled" if gs["mig_current"] else "Disabled") if gpu.mig_capable else "N/A"
        out.line(f"|{'':41}|{'':24}| {mig:>20} |")
        out.line(cell)
    if any(state.gpu_state(g)["mig_current"] for g in gpus):
        mig_devices_table(out, gpus, state)
    out.line("")
    out.line(bar)
    out.line("| Processes:" + " " * 78 + "|")
    out.line("|  GPU   GI   CI              PID   Type   Process name                        GPU Memory |")
    out.line("|        ID   ID                                                               Usage      |")
    out.line("|" + "=" * 89 + "|")
    procs = [(g, p) for g in gpus for p in state.processes(g)]
    if not procs:
        out.line("|  No running processes found" + " " * 61 + "|")
    for gpu, p in procs:
        gi = "N/A" if p.get("gi") is None else str(p["gi"])
        ci = "N/A" if p.get("ci") is None else str(p["ci"])
        name = p["name"] if len(p["name"]) <= 37 else "..." + p["name"][-34:]
        out.line(
            f"|{gpu.index:>5}{gi:>5}{ci:>5}{p['pid']:>16}{'C':>7}   {name:<37}{str(p['used_memory']) + 'MiB':>10} |"
        )
    out.line(bar)


def mig_devices_table(out: Out, gpus: list[Gpu], state: State) -> None:
    """The ``MIG devices:`` block nvidia-smi prints between the GPU and process tables."""
    rule = "+" + "-" * 18 + "+" + "-" * 34 + "+" + "-" * 11 + "+" + "-" * 23 + "+"
    out.line("")
    out.line("+" + "-" * 89 + "+")
    out.line("| MIG devices:" + " " * 76 + "|")
    out.line(rule)
    out.line("| GPU  GI  CI  MIG |              Shared Memory-Usage |        Vol|        Shared         |")
    out.line("|      ID  ID  Dev |                Shared BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |")
    out.line("|                  |                                  |        ECC|                       |")
    out.line("|" + "=" * 18 + "+" + "=" * 34 + "+" + "=" * 11 + "+" + "=" * 23 + "|")
    shown = False
    for gpu in gpus:
        gs = state.gpu_state(gpu)
        if not gs["mig_current"]:
            continue
        dev = 0
        for gi in sorted(gs["gis"], key=lambda g: g["id"]):
            profile = next(p for p in gpu.profiles if int(p["id"]) == gi["profile_id"])
            res = gpu.resources(profile)
            for ci in gi["cis"]:
                used = sum(
                    int(p["used_memory"]) for p in state.processes(gpu) if p.get("gi") == gi["id"] and p.get("ci") == ci["id"]
                )
                mem = f"{used}MiB / {gi_memory_mib(gpu, gi)}MiB"
                sm = res["sm"] * ci["compute_slices"] // max(gi["compute_slices"], 1)
                out.line(
                    f"| {gpu.index:>2}{gi['id']:>5}{ci['id']:>4}{dev:>4}  | {mem:>32} | {sm:<6}{'0':>3} |"
                    f"{res['ce']:>3}{res['enc']:>4}{res['dec']:>5}{res['ofa']:>5}{res['jpeg']:>5} |"
                )
                out.line(f"|{'':18}| {'0MiB / ' + str(gpu.hwv('bar1_total_mib', 0) // 8) + 'MiB':>32} |{'':11}|{'':23}|")
                out.line(rule)
                dev += 1
                shown = True
    if not shown:
        out.line("|  No MIG devices found" + " " * 67 + "|")
        out.line("+" + "-" * 89 + "+")


def list_gpus(out: Out, gpus: list[Gpu], state: State) -> None:
    """``nvidia-smi -L``: one line per GPU, then its MIG devices."""
    for gpu in gpus:
        out.line(f"GPU {gpu.index}: {gpu.name} (UUID: {gpu.uuid})")
        gs = state.gpu_state(gpu)
        if not gs["mig_current"]:
            continue
        dev = 0
        for gi in sorted(gs["gis"], key=lambda g: g["id"]):
            for ci in gi["cis"]:
                name = ci["name"]
                out.line(f"  MIG {name:<11} Device {dev:>2}: (UUID: {mig_uuid(gpu, gi, ci)})")
                dev += 1


# ---------------------------------------------------------------------------------------------
# --query-gpu


def _mig_mode(flag: bool) -> str:
    return "Enabled" if flag else "Disabled"


def query_fields(gpu: Gpu, state: State, info: dict, count: int) -> dict[str, tuple[str, str]]:
    """Every supported ``--query-gpu`` field: name -> (value, unit)."""
    gs = state.gpu_state(gpu)
    t = gpu.telemetry
    used = mem_used(state, gpu)
    total = int(gpu.hwv("memory_total_mib", 0))
    reserved = int(gpu.hwv("memory_reserved_mib", 0))
    free = int(gpu.hwv("memory_free_idle_mib", total - reserved)) - used
    mig_cur = _mig_mode(gs["mig_current"]) if gpu.mig_capable else "[N/A]"
    mig_pend = _mig_mode(gs["mig_pending"]) if gpu.mig_capable else "[N/A]"
    fields = {
        "index": (str(gpu.index), ""),
        "count": (str(count), ""),
        "uuid": (gpu.uuid, ""),
        "name": (gpu.name, ""),
        "serial": (gpu.serial, ""),
        "pci.bus_id": (gpu.bus_id, ""),
        "pci.domain": ("0x" + gpu.bus_id.split(":")[0][-4:], ""),
        "pci.bus": ("0x" + gpu.bus_id.split(":")[1], ""),
        "pci.device": ("0x" + gpu.bus_id.split(":")[2].split(".")[0], ""),
        "pci.device_id": (gpu.hwv("pci_device_id"), ""),
        "pci.sub_device_id": (gpu.hwv("pci_sub_system_id"), ""),
        "driver_version": (info["version"], ""),
        "vbios_version": (gpu.hwv("vbios_version"), ""),
        "memory.total": (str(total), "MiB"),
        "memory.reserved": (str(reserved), "MiB"),
        "memory.used": (str(used), "MiB"),
        "memory.free": (str(free), "MiB"),
        "mig.mode.current": (mig_cur, ""),
        "mig.mode.pending": (mig_pend, ""),
        "persistence_mode": ("Enabled" if state.persistence(gpu) else "Disabled", ""),
        "ecc.mode.current": ("Enabled", ""),
        "ecc.mode.pending": ("Enabled", ""),
        "compute_mode": ("Default", ""),
        "compute_cap": (gpu.hwv("compute_cap"), ""),
        "power.limit": (f"{float(gpu.hwv('power_limit_w', 0)):.2f}", "W"),
        "power.default_limit": (f"{float(gpu.hwv('power_limit_w', 0)):.2f}", "W"),
        "power.max_limit": (f"{float(gpu.hwv('power_limit_w', 0)):.2f}", "W"),
        "power.min_limit": (f"{float(gpu.hwv('power_min_limit_w', 0)):.2f}", "W"),
        "power.draw": (f"{float(t.get('instant_power_draw') or t.get('power_draw') or 0):.2f}", "W"),
        "temperature.gpu": (str(t.get("temperature", 0)), ""),
        "temperature.memory": (str(t.get("memory_temperature", 0)), ""),
        "utilization.gpu": ("[N/A]" if gs["mig_current"] else str(t.get("utilization", 0)), "%"),
        "utilization.memory": ("[N/A]" if gs["mig_current"] else "0", "%"),
        "pstate": (t.get("pstate", "P0"), ""),
        "clocks.max.sm": (str(gpu.hwv("clocks_max_sm_mhz", 0)), "MHz"),
        "clocks.max.graphics": (str(gpu.hwv("clocks_max_sm_mhz", 0)), "MHz"),
        "clocks.max.memory": (str(gpu.hwv("clocks_max_mem_mhz", 0)), "MHz"),
        "clocks.sm": (str(t.get("clocks_sm_mhz", 0)), "MHz"),
        "clocks.mem": (str(gpu.hwv("clocks_max_mem_mhz", 0)), "MHz"),
        "pcie.link.gen.max": (str(gpu.hwv("pcie_gen_max", 0)), ""),
        "pcie.link.gen.current": (str(gpu.hwv("pcie_gen_max", 0)), ""),
        "pcie.link.width.max": (str(gpu.hwv("pcie_width_max", 0)), ""),
        "pcie.link.width.current": (str(gpu.hwv("pcie_width_max", 0)), ""),
        "display_mode": ("Requested functionality has been deprecated", ""),
        "display_active": ("Disabled", ""),
        "fan.speed": ("[N/A]", ""),
    }
    aliases = {"gpu_name": "name", "gpu_uuid": "uuid", "gpu_bus_id": "pci.bus_id", "gpu_serial": "serial"}
    for alias, target in aliases.items():
        fields[alias] = fields[target]
    return fields


def parse_format(spec: str) -> tuple[bool, bool]:
    """``--format=csv[,noheader][,nounits]`` -> (header, units)."""
    parts = [p.strip() for p in spec.split(",") if p.strip()]
    if not parts or parts[0] != "csv" or any(p not in ("csv", "noheader", "nounits") for p in parts):
        raise SimError('"' + spec + '" is not a valid format.\n', RC_INVALID_ARG)
    return "noheader" not in parts, "nounits" not in parts


def query_gpu(out: Out, gpus: list[Gpu], state: State, info: dict, fields_spec: str, fmt: str) -> None:
    """``--query-gpu=<fields> --format=csv...``."""
    header, units = parse_format(fmt)
    names = [f.strip() for f in fields_spec.split(",") if f.strip()]
    all_gpus = state.gpus
    rows = []
    unit_of: dict[str, str] = {}
    for gpu in gpus:
        table = query_fields(gpu, state, info, len(all_gpus))
        row = []
        for name in names:
            if name not in table:
                raise SimError(f'Field "{name}" is not a valid field to query.\n', RC_INVALID_ARG)
            value, unit = table[name]
            unit_of[name] = unit
            row.append(f"{value} {unit}" if units and unit and not value.startswith("[") else value)
        rows.append(row)
    for name in names:
        if name not in unit_of:
            table = query_fields(gpus[0], state, info, len(all_gpus)) if gpus else {}
            if gpus and name not in table:
                raise SimError(f'Field "{name}" is not a valid field to query.\n', RC_INVALID_ARG)
            unit_of[name] = table.get(name, ("", ""))[1]
    if header:
        out.line(", ".join(f"{n} [{unit_of[n]}]" if unit_of[n] else n for n in names))
    for row in rows:
        out.line(", ".join(row))


def query_compute_apps(out: Out, gpus: list[Gpu], state: State, fields_spec: str, fmt: str) -> None:
    """``--query-compute-apps=pid,process_name,gpu_uuid,used_memory --format=csv...``."""
    header, units = parse_format(fmt)
    names = [f.strip() for f in fields_spec.split(",") if f.strip()]
    known = {"pid", "process_name", "gpu_uuid", "gpu_name", "gpu_bus_id", "gpu_serial", "used_memory", "used_gpu_memory"}
    for n in names:
        if n not in known:
            raise SimError(f'Field "{n}" is not a valid field to query.\n', RC_INVALID_ARG)
    if header:
        out.line(", ".join(f"{n} [MiB]" if n in ("used_memory", "used_gpu_memory") else n for n in names))
    for gpu in gpus:
        for p in state.processes(gpu):
            values = {
                "pid": str(p["pid"]),
                "process_name": p["name"],
                "gpu_uuid": gpu.uuid,
                "gpu_name": gpu.name,
                "gpu_bus_id": gpu.bus_id,
                "gpu_serial": gpu.serial,
                "used_memory": f"{p['used_memory']} MiB" if units else str(p["used_memory"]),
            }
            values["used_gpu_memory"] = values["used_memory"]
            out.line(", ".join(values[n] for n in names))


# ---------------------------------------------------------------------------------------------
# MIG listings


def lgip(out: Out, gpus: list[Gpu], state: State) -> None:
    """``nvidia-smi mig -lgip``: profiles with free/total counts and resources (MIG may be off)."""
    capable = [g for g in gpus if g.mig_capable]
    if not capable:
        raise SimError("No MIG-supported devices found.", RC_NOT_FOUND)
    bar = "+" + "-" * 79 + "+"
    out.line(bar)
    out.line("| GPU instance profiles:" + " " * 56 + "|")
    out.line("| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |")
    out.line("|                                Free/Total   GiB              CE    JPEG  OFA  |")
    out.line("|" + "=" * 79 + "|")
    for gpu in capable:
        gs = state.gpu_state(gpu)
        for p in gpu.profiles:
            r = gpu.resources(p)
            free = free_count(gpu, gs, p) if gs["mig_current"] else int(p["max_instances"])
            inst = f"{free}/{p['max_instances']}"
            mem = f"{float(r['memory_gib']):.2f}"
            p2p = "Yes" if r.get("p2p") else "No"
            out.line(
                f"| {gpu.index:>3}  MIG {p['name']:<15}{p['id']:>3}     {inst:<11}{mem:<11}{p2p:<7}"
                f"{r['sm']:<7}{r['dec']:<6}{r['enc']:<4}|"
            )
            out.line(f"|{'':63}{r['ce']:<6}{r['jpeg']:<6}{r['ofa']:<4}|")
            out.line(bar)


def lgipp(out: Out, gpus: list[Gpu]) -> None:
    """``nvidia-smi mig -lgipp``: possible placements per profile."""
    capable = [g for g in gpus if g.mig_capable]
    if not capable:
        raise SimError("No MIG-supported devices found.", RC_NOT_FOUND)
    for gpu in capable:
        for p in gpu.profiles:
            starts = ",".join(str(s) for s in p["starts"])
            word = "Placements:" if len(p["starts"]) > 1 else "Placement :"
            out.line(f"GPU {gpu.index:>2} Profile ID {p['id']:>2} {word} {{{starts}}}:{p['memory_slices']}")


def mig_enabled_gpus(gpus: list[Gpu], state: State) -> list[Gpu]:
    enabled = [g for g in gpus if g.mig_capable and state.gpu_state(g)["mig_current"]]
    if not enabled:
        raise SimError("No MIG-enabled devices found.", RC_NOT_FOUND)
    return enabled


def lgi(out: Out, gpus: list[Gpu], state: State) -> None:
    """``nvidia-smi mig -lgi``."""
    enabled = mig_enabled_gpus(gpus, state)
    bar = "+" + "-" * 57 + "+"
    rows = [(g, gi) for g in enabled for gi in sorted(state.gpu_state(g)["gis"], key=lambda x: x["id"])]
    if not rows:
        raise SimError("No GPU instances found: Not Found", RC_NOT_FOUND)
    out.line(bar)
    out.line("| GPU instances:" + " " * 42 + "|")
    out.line("| GPU   Name               Profile  Instance   Placement  |")
    out.line("|                            ID       ID       Start:Size |")
    out.line("|" + "=" * 57 + "|")
    for gpu, gi in rows:
        place = f"{gi['start']}:{gi['size']}"
        out.line(f"| {gpu.index:>3}  MIG {gi['name']:<16}{gi['profile_id']:>4}{gi['id']:>9}{place:>13}     |")
        out.line(bar)


def lci(out: Out, gpus: list[Gpu], state: State, gi_filter: set[int] | None) -> None:
    """``nvidia-smi mig -lci [-gi ID]``."""
    enabled = mig_enabled_gpus(gpus, state)
    rows = []
    for gpu in enabled:
        for gi in sorted(state.gpu_state(gpu)["gis"], key=lambda x: x["id"]):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            for ci in gi["cis"]:
                rows.append((gpu, gi, ci))
    if not rows:
        raise SimError("No compute instances found: Not Found", RC_NOT_FOUND)
    bar = "+" + "-" * 68 + "+"
    out.line(bar)
    out.line("| Compute instances:" + " " * 49 + "|")
    out.line("| GPU     GPU       Name             Profile   Instance   Placement  |")
    out.line("|       Instance                       ID        ID       Start:Size |")
    out.line("|         ID                                                         |")
    out.line("|" + "=" * 68 + "|")
    for gpu, gi, ci in rows:
        place = f"{ci['start']}:{ci['compute_slices']}"
        out.line(
            f"| {gpu.index:>3}{gi['id']:>7}       MIG {ci['name']:<16}{ci['profile_id']:>2}{ci['id']:>10}{place:>13}     |"
        )
        out.line(bar)


# ---------------------------------------------------------------------------------------------
# MIG changes


def require_root(action: str, gpu: Gpu) -> None:
    if os.geteuid() != 0:
        raise SimError(f"Unable to {action} for GPU {gpu.bus_id}: Insufficient Permissions", RC_NO_PERMISSION)


def set_mig_mode(out: Out, gpus: list[Gpu], state: State, enable: bool) -> int:
    """``nvidia-smi [-i N] -mig 0|1``: immediate when idle, pending with "In use by another client"
    while the GPU is busy (then a reset or, on Ampere, a reboot makes it effective)."""
    rc = 0
    for gpu in gpus:
        if not gpu.mig_capable:
            out.err(f"Unable to {'enable' if enable else 'disable'} MIG Mode for GPU {gpu.bus_id}: Not Supported")
            rc = RC_NOT_SUPPORTED
            continue
        require_root(("enable" if enable else "disable") + " MIG Mode", gpu)
        gs = state.gpu_state(gpu)
        if not enable and gs["gis"]:
            out.err(f"Unable to disable MIG Mode for GPU {gpu.bus_id}: In use by another client")
            rc = RC_OTHER
            continue
        gs["mig_pending"] = enable
        if state.busy(gpu):
            word = "enable" if enable else "disable"
            out.line(f"Warning: MIG mode is in pending {word} state for GPU {gpu.bus_id}:In use by another client")
            out.line(
                f"{gpu.bus_id} is currently being used by one or more other processes (e.g. CUDA application or a "
                "monitoring application such as another instance of nvidia-smi). Please first kill all processes "
                "using the device and retry the command or reboot the system to make MIG mode effective."
            )
            continue
        gs["mig_current"] = enable
        out.line(f"{'Enabled' if enable else 'Disabled'} MIG Mode for GPU {gpu.bus_id}")
    if rc == 0:
        out.line("All done.")
    return rc


def reset(out: Out, gpus: list[Gpu], state: State, explicit: bool) -> int:
    """``nvidia-smi -r [-i N]``: refused while the GPU is in use; applies a pending MIG mode."""
    for gpu in gpus:
        require_root("reset GPU", gpu)
        if state.busy(gpu):
            out.line(f"GPU {gpu.bus_id} is currently in use by another process.")
            out.line("")
            out.line(
                "1 device is currently being used by one or more other processes (e.g., Fabric Manager, CUDA "
                "application, graphics application such as an X server, or a monitoring application such as "
                "another instance of nvidia-smi). Please first kill all processes using this device and all "
                "compute applications running in the system."
            )
            return RC_OTHER
    for gpu in gpus:
        gs = state.gpu_state(gpu)
        gs["gis"] = []
        gs["mig_current"] = gs["mig_pending"]
        out.line(f"GPU {gpu.bus_id} was successfully reset.")
    out.line("All done.")
    return 0


def set_persistence(out: Out, gpus: list[Gpu], state: State, enable: bool) -> int:
    """``nvidia-smi -pm 0|1`` (legacy persistence mode; lost at reboot)."""
    for gpu in gpus:
        require_root("set persistence mode", gpu)
        state.gpu_state(gpu)["legacy_persistence"] = enable
        word = "Enabled" if enable else "Disabled"
        out.line(f"{word} Legacy persistence mode for GPU {gpu.bus_id}.")
    out.line("All done.")
    return 0


def parse_cgi(spec: str) -> list[tuple[str, int | None]]:
    """``-cgi 9,3g.71gb,1g.18gb:6`` -> [(profile ref, start or None)]."""
    items: list[tuple[str, int | None]] = []
    for raw in spec.split(","):
        raw = raw.strip()
        if not raw:
            continue
        if ":" in raw:
            ref, _, start = raw.rpartition(":")
            if not start.isdigit():
                raise SimError(f"Invalid placement in '{raw}'", RC_INVALID_ARG)
            items.append((ref, int(start)))
        else:
            items.append((raw, None))
    if not items:
        raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", RC_INVALID_ARG)
    return items


def add_full_ci(gpu: Gpu, gi: dict) -> dict:
    ci = {
        "id": 0 if not gi["cis"] else max(c["id"] for c in gi["cis"]) + 1,
        "profile_id": CI_PROFILE_ID_BY_SLICES.get(gi["compute_slices"], 0),
        "name": gi["name"],
        "start": 0,
        "compute_slices": gi["compute_slices"],
    }
    gi["cis"].append(ci)
    return ci


def create_gis(out: Out, gpus: list[Gpu], state: State, spec: str, with_ci: bool) -> int:
    """``nvidia-smi mig -cgi <profiles>[:start] [-C]``. Without an explicit start the highest free
    start is taken (this reproduces the MIG user guide's ``-cgi 19,14,5`` example: 1g at 6, 2g at 4,
    4g at 0). A request that does not fit fails with "Insufficient Resources"; earlier ones stay."""
    items = parse_cgi(spec)
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("create GPU instances", gpu)
        gs = state.gpu_state(gpu)
        for ref, start in items:
            profile = gpu.profile(ref)
            candidates = [start] if start is not None else sorted(profile["starts"], reverse=True)
            chosen = next((s for s in candidates if fits(gpu, gs, profile, s)), None)
            if chosen is None:
                out.err("Failed to create GPU instances: Insufficient Resources")
                return RC_OTHER
            gi = make_gi(gpu, profile, chosen)
            gs["gis"].append(gi)
            out.line(
                f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu.index:>2} using profile "
                f"MIG {profile['name']} (ID {profile['id']:>2})"
            )
            if with_ci:
                ci = add_full_ci(gpu, gi)
                out.line(
                    f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu.index:>2} GPU instance ID "
                    f"{gi['id']:>2} using profile MIG {ci['name']} (ID {ci['profile_id']:>2})"
                )
    return 0


def find_gis(gpu: Gpu, state: State, gi_ids: set[int] | None) -> list[dict]:
    gs = state.gpu_state(gpu)
    return [gi for gi in sorted(gs["gis"], key=lambda g: g["id"]) if gi_ids is None or gi["id"] in gi_ids]


def create_cis(out: Out, gpus: list[Gpu], state: State, spec: str | None, gi_ids: set[int] | None) -> int:
    """``nvidia-smi mig -cci [profile ids] [-gi ID]``: compute instances; only the full-size
    (default) compute instance profile of each GPU instance is simulated."""
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("create compute instances", gpu)
        gis = find_gis(gpu, state, gi_ids)
        if not gis:
            out.err("No GPU instances found: Not Found")
            return RC_NOT_FOUND
        for gi in gis:
            default_id = CI_PROFILE_ID_BY_SLICES.get(gi["compute_slices"], 0)
            wanted = [int(x) for x in spec.split(",")] if spec else [default_id]
            for pid in wanted:
                if pid != default_id:
                    out.err(f"Failed to create compute instances: Not Supported (simulated profile {default_id} only)")
                    return RC_NOT_SUPPORTED
                if gi["cis"]:
                    out.err("Failed to create compute instances: Insufficient Resources")
                    return RC_OTHER
                ci = add_full_ci(gpu, gi)
                out.line(
                    f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu.index:>2} GPU instance ID "
                    f"{gi['id']:>2} using profile MIG {ci['name']} (ID {ci['profile_id']:>2})"
                )
    return 0


def gi_busy(state: State, gpu: Gpu, gi: dict) -> bool:
    return any(p.get("gi") == gi["id"] for p in state.processes(gpu))


def destroy_cis(out: Out, gpus: list[Gpu], state: State, gi_ids: set[int] | None, ci_ids: set[int] | None) -> int:
    """``nvidia-smi mig -dci [-gi ID] [-ci ID]``."""
    found = False
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("destroy compute instances", gpu)
        for gi in find_gis(gpu, state, gi_ids):
            for ci in list(gi["cis"]):
                if ci_ids is not None and ci["id"] not in ci_ids:
                    continue
                found = True
                if gi_busy(state, gpu, gi):
                    out.err(
                        f"Unable to destroy compute instance ID {ci['id']:>2} from GPU {gpu.index:>2} GPU instance ID "
                        f"{gi['id']:>2}: In use by another client"
                    )
                    return RC_OTHER
                gi["cis"].remove(ci)
                out.line(
                    f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {gpu.index:>2} GPU instance ID {gi['id']:>2}"
                )
    if not found:
        out.err("No compute instances found: Not Found")
        return RC_NOT_FOUND
    return 0


def destroy_gis(out: Out, gpus: list[Gpu], state: State, gi_ids: set[int] | None) -> int:
    """``nvidia-smi mig -dgi [-gi ID]``: refused while compute instances exist or it is in use."""
    found = False
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("destroy GPU instances", gpu)
        gs = state.gpu_state(gpu)
        for gi in find_gis(gpu, state, gi_ids):
            found = True
            if gi["cis"] or gi_busy(state, gpu, gi):
                out.err(f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {gpu.index:>2}: In use by another client")
                return RC_OTHER
            gs["gis"].remove(gi)
            out.line(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu.index:>2}")
    if not found:
        out.err("No GPU instances found: Not Found")
        return RC_NOT_FOUND
    return 0


# ---------------------------------------------------------------------------------------------
# topo -m and --version


def topo(out: Out, gpus: list[Gpu]) -> None:
    """``nvidia-smi topo -m`` (as printed, with the terminal underline codes)."""
    cols = "".join(f"GPU{g.index}\t" for g in gpus)
    out.line(f"\t\x1b[4m{cols}CPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m")
    ncpu = os.cpu_count() or 1
    for g in gpus:
        links = []
        for other in gpus:
            if other is g:
                links.append(" X ")
            else:
                links.append(g.hwv("nvlink", "SYS"))
        affinity = g.entry.get("cpu_affinity", f"0-{ncpu - 1}")
        out.line(f"GPU{g.index}\t" + "\t".join(links) + f"\t{affinity}\t{g.entry.get('numa', 0)}\t\tN/A")
    out.stdout.append(TOPO_LEGEND)


def version(out: Out, info: dict) -> None:
    """``nvidia-smi --version``."""
    nvml = ".".join(info["version"].split(".")[:2])
    out.line(f"NVIDIA-SMI version  : {info['version']}")
    out.line(f"NVML version        : {nvml}")
    out.line(f"DRIVER version      : {info['version']}")
    out.line(f"CUDA Version        : {info['cuda_version']}")


# ---------------------------------------------------------------------------------------------
# -q / -q -x


def render_q(out: Out, gpus: list[Gpu], state: State, info: dict, xml: bool) -> None:
    """``nvidia-smi -q`` and ``-q -x`` from templates shaped like the captured H200 output."""
    import gpusim_query  # noqa: PLC0415 - shipped next to this file; only -q needs it

    out.stdout.append(gpusim_query.render(gpus, state, info, xml))


# ---------------------------------------------------------------------------------------------
# Command line


HELP = """NVIDIA System Management Interface -- stand-in for the gpu-provision test rig (gpu-sim).

Supported: nvidia-smi [-i ID] [-L | -q [-x] | --query-gpu=F --format=csv[,noheader][,nounits] |
  --query-compute-apps=F --format=csv | -mig 0|1 | -r | -pm 0|1 | --version | topo -m]
  nvidia-smi mig [-i ID] -lgip | -lgipp | -lgi | -lci [-gi ID] | -cgi P[,P...][:start] [-C] |
  -cci [ID,...] [-gi ID] | -dci [-gi ID] [-ci ID] | -dgi [-gi ID]
"""


def take(args: list[str], i: int, flag: str) -> str:
    if i + 1 >= len(args):
        raise SimError(f"Option \"{flag}\" requires a value.\n\n{HELP}", RC_INVALID_ARG)
    return args[i + 1]


def parse_ids(value: str | None) -> set[int] | None:
    if value is None:
        return None
    try:
        return {int(x) for x in value.split(",") if x.strip()}
    except ValueError as exc:
        raise SimError(f"Invalid instance id list: {value}", RC_INVALID_ARG) from exc


def run_mig(args: list[str], out: Out) -> int:
    """``nvidia-smi mig ...``."""
    opts: dict[str, str | None] = {}
    action = None
    with_ci = False
    i = 0
    value_flags = {"-i", "--id", "-gi", "--gpu-instance-id", "-ci", "--compute-instance-id"}
    actions_with_value = {"-cgi": "cgi", "--create-gpu-instance": "cgi"}
    optional_value = {"-cci": "cci", "--create-compute-instance": "cci"}
    plain = {
        "-lgip": "lgip", "--list-gpu-instance-profiles": "lgip",
        "-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
        "-lgi": "lgi", "--list-gpu-instances": "lgi",
        "-lci": "lci", "--list-compute-instances": "lci",
        "-dci": "dci", "--destroy-compute-instance": "dci",
        "-dgi": "dgi", "--destroy-gpu-instance": "dgi",
    }
    while i < len(args):
        a = args[i]
        if a in value_flags:
            key = {"--id": "-i", "--gpu-instance-id": "-gi", "--compute-instance-id": "-ci"}.get(a, a)
            opts[key] = take(args, i, a)
            i += 2
        elif a in actions_with_value:
            action = actions_with_value[a]
            opts["spec"] = take(args, i, a)
            i += 2
        elif a in optional_value:
            action = optional_value[a]
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                opts["spec"] = args[i + 1]
                i += 2
            else:
                i += 1
        elif a in plain:
            action = plain[a]
            i += 1
        elif a in ("-C", "--default-compute-instance"):
            with_ci = True
            i += 1
        else:
            raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.\n", RC_INVALID_ARG)
    if action is None:
        raise SimError(HELP, RC_INVALID_ARG)
    info = check_driver()
    all_gpus = load_gpus()
    gpus = select_gpus(all_gpus, opts.get("-i"))
    read_only = action in ("lgip", "lgipp", "lgi", "lci")
    with locked_state(all_gpus, write=not read_only) as state:
        del info
        if action == "lgip":
            lgip(out, gpus, state)
        elif action == "lgipp":
            lgipp(out, gpus)
        elif action == "lgi":
            lgi(out, gpus, state)
        elif action == "lci":
            lci(out, gpus, state, parse_ids(opts.get("-gi")))
        elif action == "cgi":
            return create_gis(out, gpus, state, opts["spec"] or "", with_ci)
        elif action == "cci":
            return create_cis(out, gpus, state, opts.get("spec"), parse_ids(opts.get("-gi")))
        elif action == "dci":
            return destroy_cis(out, gpus, state, parse_ids(opts.get("-gi")), parse_ids(opts.get("-ci")))
        elif action == "dgi":
            return destroy_gis(out, gpus, state, parse_ids(opts.get("-gi")))
    return 0


def run_smi(args: list[str], out: Out) -> int:
    """Entry point for the ``nvidia-smi`` command line."""
    if args and args[0] == "mig":
        return run_mig(args[1:], out)
    if args and args[0] == "topo":
        if args[1:2] != ["-m"]:
            raise SimError("Only 'nvidia-smi topo -m' is simulated.", RC_NOT_SUPPORTED)
        check_driver()
        topo(out, load_gpus())
        return 0
    opts: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--query-gpu=") or a.startswith("--query-compute-apps=") or a.startswith("--format="):
            key, _, value = a.partition("=")
            opts[key] = value
            i += 1
        elif a in ("--query-gpu", "--query-compute-apps", "--format"):
            opts[a] = take(args, i, a)
            i += 2
        elif a.startswith("--id="):
            opts["-i"] = a.split("=", 1)[1]
            i += 1
        elif a in ("-i", "--id", "-mig", "--multi-instance-gpu", "-pm", "--persistence-mode"):
            key = {"--id": "-i", "--multi-instance-gpu": "-mig", "--persistence-mode": "-pm"}.get(a, a)
            opts[key] = take(args, i, a)
            i += 2
        elif a in ("-L", "--list-gpus", "-q", "--query", "-x", "--xml-format", "-r", "--gpu-reset", "--version",
                   "-h", "--help"):
            flags.add({"--list-gpus": "-L", "--query": "-q", "--xml-format": "-x", "--gpu-reset": "-r"}.get(a, a))
            i += 1
        else:
            raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", RC_INVALID_ARG)
    if flags & {"-h", "--help"}:
        out.stdout.append(HELP)
        return 0
    info = check_driver()
    if "--version" in flags:
        version(out, info)
        return 0
    all_gpus = load_gpus()
    if not all_gpus:
        raise SimError("No devices were found", RC_NOT_FOUND)
    gpus = select_gpus(all_gpus, opts.get("-i"))
    mutating = "-mig" in opts or "-r" in flags or "-pm" in opts
    with locked_state(all_gpus, write=mutating) as state:
        if "-mig" in opts:
            if opts["-mig"] not in ("0", "1"):
                raise SimError(f"Invalid MIG mode: {opts['-mig']}", RC_INVALID_ARG)
            return set_mig_mode(out, gpus, state, opts["-mig"] == "1")
        if "-pm" in opts:
            return set_persistence(out, gpus, state, opts["-pm"] == "1")
        if "-r" in flags:
            return reset(out, gpus, state, "-i" in opts)
        if "--query-gpu" in opts:
            query_gpu(out, gpus, state, info, opts["--query-gpu"], opts.get("--format", ""))
        elif "--query-compute-apps" in opts:
            query_compute_apps(out, gpus, state, opts["--query-compute-apps"], opts.get("--format", ""))
        elif "-L" in flags:
            list_gpus(out, gpus, state)
        elif "-q" in flags:
            render_q(out, gpus, state, info, "-x" in flags)
        else:
            summary(out, gpus, state, info)
    return 0


# ---------------------------------------------------------------------------------------------
# gpu-sim helper commands


def register(kind: str, record: dict) -> None:
    """Add a process record (kind ``processes`` or ``clients``) under the state lock."""
    gpus = load_gpus()
    with locked_state(gpus) as state:
        state.data.setdefault(kind, []).append(record)


def hold(args: list[str]) -> int:
    """``gpu-sim hold --gpu N [--mem MiB] [--gi ID --ci ID] -- CMD...``: run CMD as a GPU process
    (shown by nvidia-smi, blocks resets and MIG changes while it lives)."""
    gpu_ref = None
    mem = 512
    gi = ci = None
    i = 0
    while i < len(args) and args[i] != "--":
        if args[i] == "--gpu":
            gpu_ref = take(args, i, "--gpu")
        elif args[i] == "--mem":
            mem = int(take(args, i, "--mem"))
        elif args[i] == "--gi":
            gi = int(take(args, i, "--gi"))
        elif args[i] == "--ci":
            ci = int(take(args, i, "--ci"))
        else:
            raise SimError(f"gpu-sim hold: unknown option {args[i]}", RC_INVALID_ARG)
        i += 2
    command = args[i + 1 :]
    if gpu_ref is None or not command:
        raise SimError("usage: gpu-sim hold --gpu N [--mem MiB] [--gi ID --ci ID] -- CMD...", RC_INVALID_ARG)
    gpus = load_gpus()
    gpu = select_gpus(gpus, gpu_ref)[0]
    if gi is not None and ci is None:
        ci = 0
    # Register this very process, then become CMD: the pid (and its start time) stay the same, so the
    # GPU process lives exactly as long as CMD and signals reach CMD directly.
    pid = os.getpid()
    register(
        "processes",
        {
            "pid": pid,
            "start_time": proc_start_time(pid),
            "gpu": gpu.uuid,
            "name": command[0],
            "used_memory": mem,
            "gi": gi,
            "ci": ci,
        },
    )
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise SimError(f"gpu-sim hold: cannot run {command[0]}: {exc.strerror}", 127) from exc
    return 0


def client(args: list[str]) -> int:
    """``gpu-sim client --name NAME [--pid PID]``: register a daemon holding GPU handles (blocks MIG
    mode changes and resets like DCGM does) for as long as that process lives."""
    name = "client"
    pid = os.getppid()
    i = 0
    while i < len(args):
        if args[i] == "--name":
            name = take(args, i, "--name")
        elif args[i] == "--pid":
            pid = int(take(args, i, "--pid"))
        else:
            raise SimError(f"gpu-sim client: unknown option {args[i]}", RC_INVALID_ARG)
        i += 2
    register("clients", {"pid": pid, "start_time": proc_start_time(pid), "name": name, "gpus": "all"})
    return 0


def dump_state(out: Out) -> int:
    """``gpu-sim state``: the current state as JSON (for tests and debugging)."""
    gpus = load_gpus()
    with locked_state(gpus, write=False) as state:
        state.processes()
        state.clients()
        out.line(json.dumps(state.data, indent=1, sort_keys=True))
    return 0


def run_gpu_sim(args: list[str], out: Out) -> int:
    """Entry point for the ``gpu-sim`` helper."""
    if not args:
        raise SimError("usage: gpu-sim hold|client|state ...", RC_INVALID_ARG)
    if args[0] == "hold":
        return hold(args[1:])
    if args[0] == "client":
        return client(args[1:])
    if args[0] == "state":
        return dump_state(out)
    raise SimError(f"gpu-sim: unknown command {args[0]}", RC_INVALID_ARG)


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the program name (``nvidia-smi`` or ``gpu-sim``) or on the first argument."""
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0])
    args = argv[1:]
    if prog not in ("nvidia-smi", "gpu-sim") and args and args[0] in ("nvidia-smi", "gpu-sim"):
        prog, args = args[0], args[1:]
    out = Out()
    try:
        rc = run_gpu_sim(args, out) if prog == "gpu-sim" else run_smi(args, out)
    except SimError as exc:
        if exc.stream == "stderr":
            out.err(exc.message)
        else:
            out.line(exc.message)
        rc = exc.code
    sys.stdout.write("".join(out.stdout))
    sys.stdout.flush()
    sys.stderr.write("".join(out.stderr))
    return rc


if __name__ == "__main__":
    sys.exit(main())
