"""Groups and their members, for device permissions."""

import grp


def collect(request):
    """``request``: ``{"groups": [...]}``; returns gid and members per group, or None when absent."""
    out = {}
    for name in sorted(set((request or {}).get("groups", []))):
        try:
            entry = grp.getgrnam(name)
            out[name] = {"gid": entry.gr_gid, "members": sorted(entry.gr_mem)}
        except KeyError:
            out[name] = None
    return out
