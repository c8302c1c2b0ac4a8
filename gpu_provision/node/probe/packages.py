"""Installed versions and holds of named packages (dpkg or rpm), and the installed packages of given name prefixes."""

import os

from . import _command, _dpkg


def _run(argv):
    # A package query that times out raises (the section answers an error): a missing answer must not read as
    # "not installed", which a deploy would act on.
    return _command.output(argv)


def collect(request):
    """``request``: ``{"names": [...], "prefixes": [...]}``; returns manager, per-package version (None if absent)
    and held flag, and (when prefixes are asked for) under ``prefixed`` the installed packages of each prefix, which
    are also answered under ``packages``."""
    names = sorted(set((request or {}).get("names", [])))
    prefixes = sorted(set((request or {}).get("prefixes", [])))
    out = {"manager": None, "packages": {}}
    if prefixes:
        out["prefixed"] = {}
    if os.path.exists("/usr/bin/dpkg-query"):
        out["manager"] = "apt"
        found = {}
        held = set()
        read = _dpkg.entries(names, prefixes=prefixes)  # one read of dpkg's database for names and prefixes
        for prefix in prefixes:
            out["prefixed"][prefix] = sorted({e[0] for e in read if e[0].startswith(prefix) and e[2][1:2] == "i"})
            names = sorted(set(names) | set(out["prefixed"][prefix]))
        for name, version, abbrev in read:
            # Installed (status letter "i"), whatever the selection: a held package is installed too.
            if abbrev[1:2] == "i":
                found[name] = version
            # The selection "hold" (what apt-mark hold sets and apt-mark showhold lists) is the first letter: read
            # here rather than by apt-mark, which loads apt's whole cache (about 20 ms of CPU).
            if abbrev[:1] == "h":
                held.add(name)
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
        for prefix in prefixes:
            listed = _run(["rpm", "-qa", "--qf", "%{NAME}\n", prefix + "*"])
            out["prefixed"][prefix] = sorted(set(line for line in listed.splitlines() if line.startswith(prefix)))
            names = sorted(set(names) | set(out["prefixed"][prefix]))
        # One rpm process for every name (not one each): "NAME<TAB>VERSION-RELEASE" per installed package; a name
        # not installed gets rpm's "package NAME is not installed" line instead, which has no tab.
        found = {}
        text = _run(["rpm", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"] + names) if names else ""
        for line in text.splitlines():
            name, tab, version = line.partition("\t")
            if tab and name in names:
                found[name] = version
        for name in names:
            out["packages"][name] = {"version": found.get(name), "held": (name + "-") in locks}
    return out
