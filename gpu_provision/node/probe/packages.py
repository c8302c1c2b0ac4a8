"""Installed versions and holds of named packages (dpkg or rpm)."""

import os

from . import _command


def _run(argv):
    # A package query that times out raises (the section answers an error): a missing answer must not read as
    # "not installed", which a deploy would act on.
    return _command.output(argv)


def collect(request):
    """``request``: ``{"names": [...]}``; returns manager, per-package version (None if absent) and held flag."""
    names = sorted(set((request or {}).get("names", [])))
    out = {"manager": None, "packages": {}}
    if os.path.exists("/usr/bin/dpkg-query"):
        out["manager"] = "apt"
        text = _run(["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n"] + names) if names else ""
        found = {}
        held = set()
        for line in text.splitlines():
            parts = line.split("\t")
            if len(parts) == 3 and parts[2].startswith("ii") or len(parts) == 3 and parts[2][:1] == "h":
                found[parts[0]] = parts[1]
            # The selection "hold" (what apt-mark hold sets and apt-mark showhold lists) is the status's first
            # letter: read here rather than by apt-mark, which loads apt's whole cache (about 20 ms of CPU).
            if len(parts) == 3 and parts[2][:1] == "h":
                held.add(parts[0])
        for name in names:
            out["packages"][name] = {"version": found.get(name), "held": name in held}
    elif os.path.exists("/usr/bin/rpm"):
        out["manager"] = "dnf"
        locks = ""
        for path in ("/etc/dnf/plugins/versionlock.list",):
            try:
                with open(path) as f:
                    locks += f.read()
            except OSError:
                pass
        for name in names:
            text = _run(["rpm", "-q", "--qf", "%{VERSION}-%{RELEASE}\n", name]).strip()
            version = text if text and "not installed" not in text else None
            out["packages"][name] = {"version": version, "held": (name + "-") in locks}
    return out
