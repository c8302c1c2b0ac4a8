"""nvidia-smi's own tables: the default summary, ``-L``, ``topo -m`` and ``--version`` (stand-in, not NVIDIA
software).

Layouts follow the real driver 580 output byte for byte where the project has captured it (tests/fixtures/h200,
h200x2).
"""

from __future__ import annotations

import os

from gpusim_config import date_line
from gpusim_hardware import Gpu
from gpusim_output import Out
from gpusim_placement import gi_memory_mib, mig_uuid
from gpusim_state import State, mem_used

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
