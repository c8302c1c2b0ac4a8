"""Selective queries printed as CSV: ``--query-gpu`` and ``--query-compute-apps`` (stand-in, not NVIDIA software).

Field names, units and the ``[N/A]`` forms follow the driver 580 output the project captured (tests/fixtures/h200).
"""

from __future__ import annotations

from gpusim_errors import RC_INVALID_ARG, SimError
from gpusim_hardware import Gpu
from gpusim_output import Out, enabled_word
from gpusim_state import State, fb_memory


def query_fields(gpu: Gpu, state: State, info: dict, count: int) -> dict[str, tuple[str, str]]:
    """Every supported ``--query-gpu`` field: name -> (value, unit)."""
    gs = state.gpu_state(gpu)
    t = gpu.telemetry
    total, reserved, used, free = fb_memory(state, gpu)
    mig_cur = enabled_word(gs["mig_current"]) if gpu.mig_capable else "[N/A]"
    mig_pend = enabled_word(gs["mig_pending"]) if gpu.mig_capable else "[N/A]"
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
