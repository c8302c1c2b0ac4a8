"""The one reader of what ``nvidia-smi mig`` prints (``-lgi``, ``-lci``, ``-lgip``, ``-lgipp``) and of its bus ids.

The probe's ``mig`` section (and through it the applier) and the verification agent read GPU and compute instances
and the driver's profile tables with these functions, and turn nvidia-smi's PCI bus ids into sysfs addresses with
:func:`sysfs_address`, so the node reads each of them one way. The tables follow the printed formats of the
NVIDIA MIG user guide's examples and the captured H200 outputs in tests/fixtures/h200, e.g.
``|   0  MIG 1g.18gb         19        7          0:1     |``. Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

import re

# Patterns compiled on first use (re keeps them): the verification agent imports this module on every node.
_PLACEMENT = r"^(\d+):(\d+)$"
_LGIPP = r"^GPU\s+(\d+)\s+Profile ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,]*)\}:(\d+)\s*$"


def _table_rows(text):
    """Token lists of the data rows of an nvidia-smi box table (rows that name a ``MIG`` profile)."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if not (line.startswith("|") and line.endswith("|")):
            continue
        tokens = line.strip("|").split()
        if "MIG" in tokens:
            rows.append(tokens)
    return rows


def _placement(token):
    match = re.match(_PLACEMENT, token)
    if not match:
        raise ValueError("not a Start:Size placement: " + token)
    return int(match.group(1)), int(match.group(2))


def sysfs_address(bus_id):
    """nvidia-smi's ``00000000:41:00.0`` as sysfs spells it: ``0000:41:00.0``."""
    domain, _, rest = bus_id.lower().partition(":")
    return domain[-4:].rjust(4, "0") + ":" + rest


def parse_lgi(text):
    """GPU instances from ``nvidia-smi mig -lgi``: ``[{gpu, profile, profile_id, instance_id, start, size}]``.

    Columns: GPU, Name (``MIG <profile>``), Profile ID, Instance ID, Placement ``Start:Size``. The "No MIG-enabled
    devices found." and "No GPU instances found" answers give an empty list.
    """
    out = []
    for tokens in _table_rows(text):
        if tokens.index("MIG") != 1 or len(tokens) < 6:
            continue
        start, size = _placement(tokens[5])
        out.append({"gpu": int(tokens[0]), "profile": tokens[2], "profile_id": int(tokens[3]),
                    "instance_id": int(tokens[4]), "start": start, "size": size})
    return out


def parse_lci(text):
    """Compute instances from ``nvidia-smi mig -lci``:
    ``[{gpu, gpu_instance_id, profile, profile_id, instance_id, start, size}]``.

    Columns: GPU, GPU instance ID, Name (``MIG <profile>``; the full-size one has the GPU instance's profile name,
    smaller ones a ``<n>c.`` prefix), Profile ID, Instance ID, Placement ``Start:Size`` (compute slices).
    """
    out = []
    for tokens in _table_rows(text):
        if tokens.index("MIG") != 2 or len(tokens) < 7:
            continue
        start, size = _placement(tokens[6])
        out.append({"gpu": int(tokens[0]), "gpu_instance_id": int(tokens[1]), "profile": tokens[3],
                    "profile_id": int(tokens[4].rstrip("*")), "instance_id": int(tokens[5]), "start": start,
                    "size": size})
    return out


def parse_lgip(text):
    """Profiles from ``nvidia-smi mig -lgip``: ``{gpu: [{name, id, free, total}]}``."""
    out = {}
    for tokens in _table_rows(text):
        if tokens.index("MIG") != 1 or len(tokens) < 5 or "/" not in tokens[4]:
            continue
        free, total = tokens[4].split("/", 1)
        out.setdefault(int(tokens[0]), []).append(
            {"name": tokens[2], "id": int(tokens[3]), "free": int(free), "total": int(total)})
    return out


def parse_lgipp(text):
    """Placements from ``nvidia-smi mig -lgipp``: ``{gpu: {profile_id: (starts, size)}}``."""
    out = {}
    for line in text.splitlines():
        match = re.match(_LGIPP, line.strip())
        if not match:
            continue
        starts = [int(s) for s in match.group(3).split(",") if s]
        out.setdefault(int(match.group(1)), {})[int(match.group(2))] = (starts, int(match.group(4)))
    return out
