"""systemd unit states (enabled, active) for named units."""

from . import _command


def collect(request):
    """``request``: ``{"units": [...]}``; returns UnitFileState and ActiveState per unit, or None without systemd."""
    units = sorted(set((request or {}).get("units", [])))
    out = {}
    if not units:
        return out
    # A systemctl that times out raises (the section answers an error) rather than report units as absent.
    rc, text = _command.run(["systemctl", "show", "--property=Id,UnitFileState,ActiveState,LoadState"] + units,
                            stderr="drop")
    if rc is None and text.startswith("timed out"):
        raise _command.TimedOut(text)
    if rc is None:
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
