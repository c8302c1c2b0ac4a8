"""``nvidia-smi -q`` and ``nvidia-smi -q -x`` for the GPU simulator (stand-in, not NVIDIA software).

The templates in ``templates/`` are the captured H200 output (tests/fixtures/h200/nvsmi_q.*) with the
per-GPU values replaced by ``{{key}}`` markers, so every model shares the real field names and order.
"""

from __future__ import annotations

import os
import re
from typing import Any

from gpusim_config import date_line
from gpusim_hardware import Gpu
from gpusim_output import enabled_word
from gpusim_placement import gi_memory_mib
from gpusim_state import State, fb_memory

TEMPLATE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
LABEL_WIDTH = 55


def _template(name: str) -> str:
    with open(os.path.join(TEMPLATE_DIR, name), encoding="utf-8") as fh:
        return fh.read()


def _fill(text: str, values: dict[str, Any]) -> str:
    return re.sub(r"\{\{(\w+)\}\}", lambda m: str(values[m.group(1)]), text)


def _kv(level: int, label: str, value: Any) -> str:
    return ("    " * level + label).ljust(LABEL_WIDTH) + ": " + str(value) + "\n"


def _values(gpu: Gpu, state: State, info: dict) -> dict[str, Any]:
    """Per-GPU values for the template markers."""
    gs = state.gpu_state(gpu)
    t = gpu.telemetry
    total, reserved, used, free = fb_memory(state, gpu)
    bar1 = int(gpu.hwv("bar1_total_mib", 0))
    domain, bus, devfn = gpu.bus_id.split(":")
    device = devfn.split(".")[0]
    limit = f"{float(gpu.hwv('power_limit_w', 0)):.2f}"
    mig_on = gs["mig_current"]
    # The captured NVLink pair reports a configured fabric, the single GPU N/A; gpus.json may override.
    linked = len(state.gpus) > 1 and gpu.hwv("nvlink", None) is not None
    fabric = {"state": "Completed", "status": "Success", "clique": "0",
              "cluster": "00000000-0000-0000-0000-000000000000"} if linked else dict.fromkeys(
        ("state", "status", "clique", "cluster"), "N/A")
    fabric.update(gpu.entry.get("fabric", {}))
    return {
        "bus_id": gpu.bus_id,
        "name": gpu.name,
        "architecture": gpu.architecture,
        "persistence": "Enabled" if state.persistence(gpu) else "Disabled",
        "mig_current": enabled_word(gs["mig_current"]) if gpu.mig_capable else "N/A",
        "mig_pending": enabled_word(gs["mig_pending"]) if gpu.mig_capable else "N/A",
        "serial": gpu.serial,
        "uuid": gpu.uuid,
        "pdi": gpu.entry.get("pdi", "0x" + gpu.uuid.replace("-", "")[-16:]),
        "minor": gpu.entry.get("minor_number", gpu.index),
        "vbios": gpu.hwv("vbios_version"),
        "board_id": gpu.entry.get("board_id", hex(int(device, 16))),
        "board_part_number": gpu.hwv("board_part_number"),
        "gpu_part_number": gpu.hwv("gpu_part_number"),
        "module_id": gpu.entry.get("module_id", gpu.index + 1),
        "inforom_image": gpu.hwv("inforom_image"),
        "gsp_version": info["version"],
        "pci_bus_hex": "0x" + bus,
        "pci_device_hex": "0x" + device,
        "pci_domain_hex": "0x" + domain[-4:],
        "pci_bus": bus,
        "pci_device": device,
        "pci_domain": domain[-4:],
        "pci_device_id": gpu.hwv("pci_device_id"),
        "pci_device_id_raw": str(gpu.hwv("pci_device_id"))[2:],
        "pci_sub_system_id": gpu.hwv("pci_sub_system_id"),
        "pci_sub_system_id_raw": str(gpu.hwv("pci_sub_system_id"))[2:],
        "pcie_gen": gpu.hwv("pcie_gen_max"),
        "pcie_width": gpu.hwv("pcie_width_max"),
        "tx": t.get("tx_kbs", 0),
        "rx": t.get("rx_kbs", 0),
        "pstate": t.get("pstate", "P0"),
        "fb_total": total,
        "fb_reserved": reserved,
        "fb_used": used,
        "fb_free": free,
        "bar1_total": bar1,
        "bar1_used": 1,
        "bar1_free": bar1 - 1,
        "util_gpu": "N/A" if mig_on else t.get("utilization", 0),
        "util_mem": "N/A" if mig_on else 0,
        "temp": t.get("temperature", 0),
        "tlimit": t.get("tlimit_temperature", 0),
        "mem_temp": t.get("memory_temperature", 0),
        "avg_power": t.get("average_power_draw", "0.00"),
        "inst_power": t.get("instant_power_draw", "0.00"),
        "power_limit": limit,
        "power_min": f"{float(gpu.hwv('power_min_limit_w', 0)):.2f}",
        "mem_power": t.get("memory_power_draw", "N/A"),
        "clk_sm": t.get("clocks_sm_mhz", 0),
        "clk_mem": gpu.hwv("clocks_max_mem_mhz"),
        "clk_video": t.get("clocks_video_mhz", 0),
        "clk_max_sm": gpu.hwv("clocks_max_sm_mhz"),
        "clk_max_video": gpu.hwv("clocks_max_video_mhz"),
        "fabric_state": fabric["state"],
        "fabric_status": fabric["status"],
        "fabric_clique": fabric["clique"],
        "fabric_cluster": fabric["cluster"],
    }


def _mig_devices(gpu: Gpu, state: State, xml: bool) -> str:
    gs = state.gpu_state(gpu)
    devices = []
    if gs["mig_current"]:
        for gi in sorted(gs["gis"], key=lambda g: g["id"]):
            profile = next(p for p in gpu.profiles if int(p["id"]) == gi["profile_id"])
            res = gpu.resources(profile)
            for ci in gi["cis"]:
                devices.append((gi, ci, res, gi_memory_mib(gpu, gi)))
    if xml:
        if not devices:
            return "\t\t<mig_devices>\n\t\t\tNone\n\t\t</mig_devices>" if not gs["mig_current"] else "\t\t<mig_devices>\n\t\t</mig_devices>"
        parts = ["\t\t<mig_devices>"]
        for n, (gi, ci, res, mem) in enumerate(devices):
            parts += [
                "\t\t\t<mig_device>",
                f"\t\t\t\t<index>{n}</index>",
                f"\t\t\t\t<gpu_instance_id>{gi['id']}</gpu_instance_id>",
                f"\t\t\t\t<compute_instance_id>{ci['id']}</compute_instance_id>",
                "\t\t\t\t<device_attributes>",
                "\t\t\t\t\t<shared>",
                f"\t\t\t\t\t\t<multiprocessor_count>{res['sm']}</multiprocessor_count>",
                f"\t\t\t\t\t\t<copy_engine_count>{res['ce']}</copy_engine_count>",
                f"\t\t\t\t\t\t<encoder_count>{res['enc']}</encoder_count>",
                f"\t\t\t\t\t\t<decoder_count>{res['dec']}</decoder_count>",
                f"\t\t\t\t\t\t<ofa_count>{res['ofa']}</ofa_count>",
                f"\t\t\t\t\t\t<jpg_count>{res['jpeg']}</jpg_count>",
                "\t\t\t\t\t</shared>",
                "\t\t\t\t</device_attributes>",
                "\t\t\t\t<fb_memory_usage>",
                f"\t\t\t\t\t<total>{mem} MiB</total>",
                "\t\t\t\t\t<reserved>0 MiB</reserved>",
                "\t\t\t\t\t<used>0 MiB</used>",
                f"\t\t\t\t\t<free>{mem} MiB</free>",
                "\t\t\t\t</fb_memory_usage>",
                "\t\t\t</mig_device>",
            ]
        parts.append("\t\t</mig_devices>")
        return "\n".join(parts)
    if not devices:
        return ""
    text = _kv(1, "MIG Devices", "").rstrip(": \n") + "\n"
    for n, (gi, ci, res, mem) in enumerate(devices):
        text += "        MIG Device\n"
        text += _kv(3, "Index", n) + _kv(3, "GPU Instance ID", gi["id"]) + _kv(3, "Compute Instance ID", ci["id"])
        text += "            Device Attributes\n                Shared\n"
        text += _kv(5, "Multiprocessor count", res["sm"]) + _kv(5, "Copy Engine count", res["ce"])
        text += _kv(5, "Encoder count", res["enc"]) + _kv(5, "Decoder count", res["dec"])
        text += _kv(5, "OFA count", res["ofa"]) + _kv(5, "JPG count", res["jpeg"])
        text += "            FB Memory Usage\n"
        text += _kv(4, "Total", f"{mem} MiB") + _kv(4, "Reserved", "0 MiB") + _kv(4, "Used", "0 MiB")
        text += _kv(4, "Free", f"{mem} MiB")
    return text


def _processes(gpu: Gpu, state: State, xml: bool) -> str:
    procs = state.processes(gpu)
    if xml:
        parts = ["\t\t<processes>"]
        for p in procs:
            gi = "N/A" if p.get("gi") is None else p["gi"]
            ci = "N/A" if p.get("ci") is None else p["ci"]
            parts += [
                "\t\t\t<process_info>",
                f"\t\t\t\t<gpu_instance_id>{gi}</gpu_instance_id>",
                f"\t\t\t\t<compute_instance_id>{ci}</compute_instance_id>",
                f"\t\t\t\t<pid>{p['pid']}</pid>",
                "\t\t\t\t<type>C</type>",
                f"\t\t\t\t<process_name>{p['name']}</process_name>",
                f"\t\t\t\t<used_memory>{p['used_memory']} MiB</used_memory>",
                "\t\t\t</process_info>",
            ]
        parts.append("\t\t</processes>")
        return "\n".join(parts)
    if not procs:
        return "None"
    text = ""
    for p in procs:
        gi = "N/A" if p.get("gi") is None else p["gi"]
        ci = "N/A" if p.get("ci") is None else p["ci"]
        text += _kv(2, "GPU instance ID", gi) + _kv(2, "Compute instance ID", ci) + _kv(2, "Process ID", p["pid"])
        text += _kv(3, "Type", "C") + _kv(3, "Name", p["name"]) + _kv(3, "Used GPU Memory", f"{p['used_memory']} MiB")
    return "\n" + text.rstrip("\n")


def render(gpus: list[Gpu], state: State, info: dict, xml: bool) -> str:
    """The whole ``-q`` (text) or ``-q -x`` (XML) document for ``gpus``."""
    head = {"timestamp": date_line(), "version": info["version"], "cuda_version": info["cuda_version"],
            "count": len(state.gpus)}
    if xml:
        out = [
            '<?xml version="1.0" ?>',
            '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v13.dtd">',
            "<nvidia_smi_log>",
            f"\t<timestamp>{head['timestamp']}</timestamp>",
            f"\t<driver_version>{head['version']}</driver_version>",
            f"\t<cuda_version>{head['cuda_version']}</cuda_version>",
            f"\t<attached_gpus>{head['count']}</attached_gpus>",
        ]
        body = _template("q_gpu.xml")
        for gpu in gpus:
            values = _values(gpu, state, info)
            values["mig_devices_xml"] = _mig_devices(gpu, state, True)
            values["processes_xml"] = _processes(gpu, state, True)
            out.append(_fill(body, values))
        return "\n".join(out) + "\n</nvidia_smi_log>\n"
    text = _fill(_template("q_head.txt"), head)
    body = _template("q_gpu.txt")
    for gpu in gpus:
        values = _values(gpu, state, info)
        values["mig_devices"] = _mig_devices(gpu, state, False)
        values["processes"] = _processes(gpu, state, False)
        text += _fill(body, values) + "\n"
    return text
