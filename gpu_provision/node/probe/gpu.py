"""NVIDIA GPUs as the driver and the PCI bus see them: nvidia-smi, /proc driver version, sysfs devices, /dev files."""

import glob
import os

from .mig import run

QUERY = ("index,uuid,name,pci.bus_id,driver_version,memory.total,mig.mode.current,mig.mode.pending,"
         "persistence_mode,pci.device_id")


def functions(sysfs_root="/sys"):
    """Every PCI function's sysfs directory under ``sysfs_root`` with its vendor id, read once for the section's
    readers of the bus. The root is a parameter so a fake sysfs tree can stand in for the node's."""
    out = []
    for path in sorted(glob.glob(os.path.join(sysfs_root, "bus", "pci", "devices", "*"))):
        try:
            with open(os.path.join(path, "vendor")) as f:
                out.append((path, f.read().strip()))
        except OSError:
            continue
    return out


def pci(sysfs_root="/sys", found=None):
    """Every NVIDIA PCI function under ``sysfs_root`` (or among ``found``, :func:`functions`' answer) with its device
    id and class: the GPUs, and the rest of the board (NVSwitches, audio functions), which the controller tells apart
    by class (an NVSwitch decides Fabric Manager)."""
    out = []
    for path, vendor in functions(sysfs_root) if found is None else found:
        if vendor != "0x10de":
            continue
        try:
            with open(os.path.join(path, "device")) as f:
                device = f.read().strip()
            with open(os.path.join(path, "class")) as f:
                klass = f.read().strip()
        except OSError:
            continue
        # Display (0x03xxxx) devices are GPUs; NVSwitches and audio functions are counted apart.
        out.append({"address": os.path.basename(path), "device": device, "class": klass,
                    "gpu": klass.startswith("0x03")})
    return out


#: At most this much of a function's VPD is read: the marker sits in its read-only section, near the start.
VPD_READ_BYTES = 4096


def vpd_functions(vendor, marker, sysfs_root="/sys", found=None):
    """The PCI functions of ``vendor`` whose VPD (``/sys/bus/pci/devices/<BDF>/vpd``, provided by the kernel's PCI
    core whatever driver is bound, readable by root) holds ``marker``: on NVLink 5 boards, the ConnectX-7 bridge
    functions through which Fabric Manager and NVLSM reach NVSwitches that are not PCI devices of the host. The
    controller names vendor and marker (its data file, with their source); ``found`` as for :func:`pci`."""
    out = []
    want = marker.encode("ascii")
    for path, function_vendor in functions(sysfs_root) if found is None else found:
        if function_vendor != vendor:
            continue
        try:
            with open(os.path.join(path, "device")) as f:
                device = f.read().strip()
            with open(os.path.join(path, "vpd"), "rb") as f:
                vpd = f.read(VPD_READ_BYTES)
        except OSError:
            continue
        if want in vpd:
            out.append({"address": os.path.basename(path), "vendor": vendor, "device": device})
    return out


def _devices():
    out = {}
    for path in sorted(glob.glob("/dev/nvidia*") + glob.glob("/dev/nvidia-caps/*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        if os.path.isdir(path):
            continue
        out[path] = {"mode": "%04o" % (st.st_mode & 0o7777), "uid": st.st_uid, "gid": st.st_gid}
    return out


def collect(request):
    """Read GPUs and the board around them; ``request`` may name, as ``nvlink5_bridge`` (``vendor``,
    ``vpd_marker``), the PCI functions through which an NVLink 5 board's NVSwitches are managed."""
    rc, text = run(["nvidia-smi", "--query-gpu=" + QUERY, "--format=csv,noheader,nounits"])
    gpus = []
    if rc == 0:
        keys = QUERY.split(",")
        for line in text.strip().splitlines():
            values = [v.strip() for v in line.split(",")]
            if len(values) == len(keys):
                gpus.append(dict(zip(keys, values)))
    version_line = None
    for path in ("/proc/driver/nvidia/version",):
        try:
            with open(path) as f:
                version_line = f.readline().strip()
            break
        except OSError:
            continue
    bus = functions()
    return {
        "smi_rc": rc,
        "smi_error": None if rc == 0 else (text or "").strip()[-500:],
        "gpus": gpus,
        "driver_version_line": version_line,
        "pci": pci(found=bus),
        "nvlink5_bridges": _bridges((request or {}).get("nvlink5_bridge"), bus),
        "devices": _devices(),
    }


def _bridges(fact, found=None):
    if not fact:
        return []
    return vpd_functions(str(fact["vendor"]), str(fact["vpd_marker"]), found=found)
