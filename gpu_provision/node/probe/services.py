"""systemd unit states (enabled, active) for named units."""

import subprocess


def collect(request):
    """``request``: ``{"units": [...]}``; returns UnitFileState and ActiveState per unit, or None without systemd."""
    units = sorted(set((request or {}).get("units", [])))
    out = {}
    if not units:
        return out
    try:
        text = subprocess.run(["systemctl", "show", "--property=Id,UnitFileState,ActiveState,LoadState"] + units,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, universal_newlines=True,
                              check=False).stdout
    except OSError:
        return {u: None for u in units}
    blocks = [b for b in text.strip().split("\n\n") if b.strip()]
    for unit, block in zip(units, blocks):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        out[unit] = {
            "loaded": props.get("LoadState") == "loaded",
            "enabled": props.get("UnitFileState", ""),
            "active": props.get("ActiveState", ""),
        }
    return out
