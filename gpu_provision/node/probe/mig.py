"""MIG and vGPU state of a node: MIG mode per GPU, GPU and compute instances, GPU processes, SR-IOV/vGPU sysfs.

Reads ``nvidia-smi --query-gpu`` (mode current/pending, PCI device id), ``nvidia-smi mig -lgi`` and ``-lci``
(instances with their ``Start:Size`` placements), ``nvidia-smi --query-compute-apps`` (processes holding a GPU)
and, for vGPU hosts, ``/sys/bus/pci/devices/<BDF>/{sriov_totalvfs,sriov_numvfs,virtfn*}`` and
``<VF>/nvidia/{creatable_vgpu_types,current_vgpu_type}``. With ``{"tables": true}`` it also reads the driver's own
profile tables (``mig -lgip`` and ``-lgipp``), which answer with MIG disabled; ``{"vgpu": false}`` skips sysfs.

The ``nvidia-smi mig`` tables are read by the node's one reader of them (:mod:`..mig.nvsmi`). The layout
applier (:mod:`..mig.apply`) imports this section too; like all node-side code it is Python 3.9+, standard library only.
"""

from __future__ import annotations

import glob
import json
import os
import re

from ..mig.nvsmi import parse_lci, parse_lgi, parse_lgip, parse_lgipp, sysfs_address
from . import _command

QUERY = "index,uuid,name,pci.bus_id,pci.device_id,mig.mode.current,mig.mode.pending"
APPS_QUERY = "pid,process_name,gpu_uuid,used_memory"
VGPU_STATE_FILE = "/var/lib/gpu-provision/vgpu-types.json"

_TYPE_LINE = re.compile(r"^\s*(\d+)\s*:\s*(.+?)\s*$")


def run(args, timeout=None):
    """Run a command, bounded (:func:`._command.run`): (exit status, or None when it could not start or timed out,
    combined output)."""
    return _command.run(args, timeout)


def _mode(value):
    value = value.strip()
    if value == "Enabled":
        return True
    if value == "Disabled":
        return False
    return None


def parse_query_gpu(text):
    """GPUs from ``--query-gpu=QUERY --format=csv,noheader`` lines."""
    keys = QUERY.split(",")
    gpus = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != len(keys):
            continue
        row = dict(zip(keys, values))
        gpus.append({
            "index": int(row["index"]),
            "uuid": row["uuid"],
            "name": row["name"],
            "bus_id": row["pci.bus_id"],
            "pci_device_id": row["pci.device_id"],
            "mig_current": _mode(row["mig.mode.current"]),
            "mig_pending": _mode(row["mig.mode.pending"]),
        })
    return gpus


def profile_table(lgip_rows, placements):
    """One GPU's profile table from its ``-lgip`` rows and ``-lgipp`` placements, in the probe's JSON answer.

    ``{"memory_slices", "compute_slices", "profiles": [{name, id, memory_slices, compute_slices, max_instances,
    starts}]}``: the keys of a GPU model file's ``mig`` object, so
    :meth:`gpu_provision.node.mig.model.ProfileTable.from_dict` reads both alike. Compute slices come from the
    profile name (``3g.71gb`` = 3 of the GPU's compute slices).
    """
    profiles = []
    for row in lgip_rows:
        if row["id"] not in placements:
            continue
        starts, size = placements[row["id"]]
        compute = int(row["name"].split("g.", 1)[0])
        profiles.append({"name": row["name"], "id": row["id"], "memory_slices": size, "compute_slices": compute,
                         "max_instances": row["total"], "starts": starts})
    return {
        "memory_slices": max([s + p["memory_slices"] for p in profiles for s in p["starts"]] or [0]),
        "compute_slices": max([p["compute_slices"] for p in profiles] or [0]),
        "profiles": profiles,
    }


def _instance(row):
    """A ``-lgi`` or ``-lci`` row as the probe answers an instance: its ``id``, profile and placement."""
    return {"id": row["instance_id"], "profile": row["profile"], "profile_id": row["profile_id"],
            "start": row["start"], "size": row["size"]}


def attach_instances(gpus, lgi_text, lci_text):
    """Give each GPU its ``gis`` (from ``-lgi`` output), each with its ``cis`` (from ``-lci`` output)."""
    gis = parse_lgi(lgi_text or "")
    cis = parse_lci(lci_text or "")
    for gpu in gpus:
        gpu["gis"] = []
        for gi in gis:
            if gi["gpu"] != gpu["index"]:
                continue
            entry = _instance(gi)
            entry["cis"] = [_instance(ci) for ci in cis
                            if ci["gpu"] == gpu["index"] and ci["gpu_instance_id"] == gi["instance_id"]]
            gpu["gis"].append(entry)
    return gpus


def parse_compute_apps(text, gpus):
    """Processes from ``--query-compute-apps=APPS_QUERY --format=csv,noheader,nounits``, with the GPU index."""
    by_uuid = {g["uuid"]: g["index"] for g in gpus}
    out = []
    for line in text.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) != 4 or not values[0].isdigit():
            continue
        out.append({"pid": int(values[0]), "name": values[1], "gpu_uuid": values[2],
                    "gpu": by_uuid.get(values[2]), "used_memory_mib": values[3]})
    return out


def parse_vgpu_types(text):
    """``creatable_vgpu_types`` lines ``<id> : <name>`` as ``{name: id}`` (other lines, such as a header, skipped)."""
    out = {}
    for line in text.splitlines():
        match = _TYPE_LINE.match(line)
        if match:
            out[match.group(2)] = int(match.group(1))
    return out


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def read_vgpu(sysfs_root, addresses):
    """SR-IOV and vGPU state of the physical functions ``addresses`` under ``sysfs_root``."""
    out = {}
    for address in addresses:
        base = os.path.join(sysfs_root, "bus", "pci", "devices", address)
        if not os.path.isdir(base):
            continue
        total = _read(os.path.join(base, "sriov_totalvfs"))
        numvfs = _read(os.path.join(base, "sriov_numvfs"))
        vfs = []
        links = glob.glob(os.path.join(base, "virtfn*"))
        for link in sorted(links, key=lambda p: int(os.path.basename(p)[6:] or 0)):
            vf = os.path.basename(os.path.realpath(link))
            vf_dir = os.path.join(sysfs_root, "bus", "pci", "devices", vf, "nvidia")
            creatable = _read(os.path.join(vf_dir, "creatable_vgpu_types"))
            current = _read(os.path.join(vf_dir, "current_vgpu_type"))
            vfs.append({
                "address": vf,
                "creatable": parse_vgpu_types(creatable) if creatable is not None else None,
                "current": int(current.strip() or 0) if current is not None else None,
            })
        out[address] = {
            "sriov_totalvfs": int(total.strip()) if total and total.strip().isdigit() else None,
            "sriov_numvfs": int(numvfs.strip()) if numvfs and numvfs.strip().isdigit() else None,
            "vfs": vfs,
        }
    return out


def collect(request):
    """Read the node's MIG and vGPU state.

    ``request``: ``{"tables": bool (default off), "vgpu": bool (default on), "sysfs": "/sys"}``. Never changes
    anything.
    """
    request = request or {}
    rc, text = run(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader"])
    out = {"smi_rc": rc, "error": None, "gpus": [], "processes": []}
    if rc != 0:
        out["error"] = (text or "").strip()[-500:]
        return out
    gpus = parse_query_gpu(text)
    out["gpus"] = gpus
    lgi = lci = ""
    if any(g["mig_current"] for g in gpus):
        _, lgi = run(["nvidia-smi", "mig", "-lgi"])
        _, lci = run(["nvidia-smi", "mig", "-lci"])
    attach_instances(gpus, lgi, lci)
    rc, apps = run(["nvidia-smi", "--query-compute-apps=" + APPS_QUERY, "--format=csv,noheader,nounits"])
    out["processes"] = parse_compute_apps(apps, gpus) if rc == 0 else []
    if rc != 0:
        out["error"] = "--query-compute-apps failed: " + (apps or "").strip()[-300:]
    if request.get("tables"):
        _, lgip = run(["nvidia-smi", "mig", "-lgip"])
        _, lgipp = run(["nvidia-smi", "mig", "-lgipp"])
        rows, places = parse_lgip(lgip), parse_lgipp(lgipp)
        out["tables"] = {str(g["index"]): profile_table(rows.get(g["index"], []), places.get(g["index"], {}))
                         for g in gpus}
    # Reading SR-IOV state is a few sysfs reads per GPU, so it is on unless asked off.
    if request.get("vgpu", True):
        sysfs = request.get("sysfs") or "/sys"
        out["vgpu"] = read_vgpu(sysfs, [sysfs_address(g["bus_id"]) for g in gpus])
        try:
            known = json.loads(_read(request.get("vgpu_state_file") or VGPU_STATE_FILE) or "{}")
        except ValueError:
            known = {}
        out["vgpu_known_types"] = known if isinstance(known, dict) else {}
    return out
