"""Bounded reads for the support archive: every command has a time limit, every item and the whole archive a size
limit, so a wedged driver (``nvidia-smi`` hanging on a GPU fallen off the bus) or a huge log never stalls or floods
the collection."""

import os
import signal
import subprocess
import time

#: Bytes one item keeps (the first ones: headers and versions come first in every output we read).
ITEM_BYTES = 1 << 20
#: Bytes the whole archive keeps before compression; items past it are listed in the manifest as left out.
TOTAL_BYTES = 24 << 20


class Budget:
    """What is left of the archive's size bound, and the manifest entry of every item tried."""

    def __init__(self, total=TOTAL_BYTES):
        self.left = total
        self.items = []

    def take(self, name, data, entry):
        """``data`` cut to what the bound leaves (None when nothing is left), with ``entry`` recorded for ``name``."""
        entry = dict(entry, name=name)
        if self.left <= 0:
            entry["left_out"] = "bundle size bound reached"
            self.items.append(entry)
            return None
        if len(data) > self.left:
            data = data[: self.left]
            entry["truncated"] = True
        self.left -= len(data)
        entry["bytes"] = len(data)
        self.items.append(entry)
        return data


def run(argv, seconds, limit=ITEM_BYTES, env=None):
    """Run ``argv`` for at most ``seconds``; its output (standard output, then standard error) cut to ``limit``
    bytes, and a manifest entry: ``rc`` (None when it could not start or was stopped), ``seconds``, ``error``,
    ``truncated``. A command past its time is stopped with its whole process group (scripts start children)."""
    started = time.monotonic()
    entry = {"source": " ".join(argv), "rc": None}
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)
    except OSError as exc:
        entry["error"] = "%s: %s" % (type(exc).__name__, exc.strerror or exc)
        return b"", entry
    try:
        out, err = proc.communicate(timeout=seconds)
        entry["rc"] = proc.returncode
    except subprocess.TimeoutExpired:
        _stop(proc)
        out, err = proc.communicate()
        entry["error"] = "stopped after %ss" % seconds
    data = out + err
    if len(data) > limit:
        data = data[:limit]
        entry["truncated"] = True
    entry["seconds"] = round(time.monotonic() - started, 2)
    return data, entry


def _stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        proc.kill()


def read(path, limit=ITEM_BYTES):
    """The first ``limit`` bytes of the file at ``path`` and its manifest entry (``error`` when unreadable)."""
    entry = {"source": path}
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as exc:
        entry["error"] = "%s: %s" % (type(exc).__name__, exc.strerror or exc)
        return b"", entry
    if len(data) > limit:
        data = data[:limit]
        entry["truncated"] = True
    return data, entry
