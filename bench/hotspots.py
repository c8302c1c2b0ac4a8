"""Where the controller's time goes: a cProfile of one drift run, grouped into what the cost is for.

Each function's own time (``tottime``) goes to one group by the file it is in. Built-in functions (the C parts:
ciphers, key exchange maths, ``json``'s scanner, socket calls) have no file; their time goes to the groups of the
Python functions that called them, in proportion to what each caller spent in them. Under gevent every greenlet
shares one profiler, so the split is a guide to where the CPU goes, not an exact account.
"""

from __future__ import annotations

import pstats
from collections.abc import Iterable
from pathlib import Path

#: Groups in report order, with the path fragments that put a function's file into them (first match wins).
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("SSH handshake, key exchange, auth", (
        "paramiko/kex_", "paramiko/auth_handler", "paramiko/client.py", "paramiko/hostkeys", "paramiko/pkey",
        "paramiko/ed25519key", "paramiko/rsakey", "paramiko/ecdsakey", "paramiko/dsskey", "paramiko/primes",
        "paramiko/ssh_gss", "paramiko/agent", "paramiko/config", "paramiko/transport.py", "cryptography/",
        "nacl/", "bcrypt/", "pyinfra/connectors/ssh", "pyinfra/connectors/sshuserclient")),
    ("SSH packets: command payload and output", (
        "paramiko/packet", "paramiko/channel", "paramiko/message", "paramiko/buffered_pipe", "paramiko/pipe",
        "paramiko/file", "paramiko/util", "paramiko/common", "paramiko/compress", "paramiko/sftp")),
    ("waiting (event loop, sockets)", (
        "gevent/", "selectors", "socket.py", "threading.py", "queue.py")),
    ("JSON parsing", ("json/",)),
    ("pyinfra per-host work", ("pyinfra/", "pyinfra_cli/", "click/", "jinja2/", "typeguard/")),
    ("gpu-provision (ours)", ("gpu_provision/", "bench/", "inventory.py")),
)
OTHER = "other (Python start-up, imports, standard library)"


def group_of(filename: str) -> str:
    """The group a function in ``filename`` belongs to."""
    path = filename.replace("\\", "/")
    for name, fragments in GROUPS:
        if any(fragment in path for fragment in fragments):
            return name
    return OTHER


def grouped(stats: pstats.Stats) -> dict[str, float]:
    """Own CPU seconds per group (built-ins charged to their callers' groups), every group present."""
    totals = dict.fromkeys([name for name, _ in GROUPS] + [OTHER], 0.0)
    table = stats.stats  # type: ignore[attr-defined]  # (file, line, name) -> (cc, nc, tt, ct, callers)
    for (filename, _line, _name), (_cc, _nc, tottime, _ct, callers) in table.items():
        if filename != "~":
            totals[group_of(filename)] += tottime
            continue
        edges = {caller: edge[2] for caller, edge in callers.items()}
        share = sum(edges.values())
        if not share:
            totals[OTHER] += tottime
            continue
        for caller, spent in edges.items():
            totals[group_of(caller[0])] += tottime * spent / share
    return totals


def summary(path: Path, hosts: int) -> list[dict[str, float | str]]:
    """The profile at ``path`` of a run over ``hosts`` hosts: per group, seconds, ms per host and share."""
    totals = grouped(pstats.Stats(str(path)))
    whole = sum(totals.values()) or 1.0
    return [{"group": name, "seconds": round(seconds, 3), "ms_per_host": round(1000 * seconds / max(hosts, 1), 2),
             "share": round(seconds / whole, 3)} for name, seconds in totals.items()]


def lines(rows: Iterable[dict[str, float | str]]) -> list[str]:
    """The summary as text lines."""
    return [f"  {row['group']:<52}{row['seconds']:8.2f} s {row['ms_per_host']:8.2f} ms/host "
            f"{100 * float(row['share']):5.1f} %" for row in rows]
