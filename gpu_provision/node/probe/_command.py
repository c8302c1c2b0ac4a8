"""Every command the probe runs on the node, bounded in time, so that a hung tool reads as "timed out", not a hang.

A hung ``nvidia-smi`` (a GPU fallen off the bus, a driver stuck in a reset), ``kubectl`` against an API server that
never answers, or ``systemctl`` waiting on a busy PID 1 would otherwise hold the whole probe, and with it the
controller's SSH command, until the controller gives up without any answer at all. Here each command gets at most
a quarter of the probe's budget and never more than what is left of it, so the probe answers within its budget:
the readings of the commands that finished, and for the others a timed-out reading naming the command.

The controller sends the budget with every request (``cluster.ssh.probe_timeout`` of the cluster file, see
:func:`start`); :data:`FALLBACK_BUDGET` applies when the probe is run by hand without one and when the MIG applier
borrows :func:`run` outside a probe.
"""

import os
import time

#: Seconds of a probe run without a budget from the controller: the default of ``cluster.ssh.probe_timeout``.
FALLBACK_BUDGET = 120.0
#: The share of the budget one command may take: one hung command leaves time for the others.
COMMAND_SHARE = 4

_run: dict = {"deadline": None, "budget": FALLBACK_BUDGET, "timed_out": []}


class TimedOut(Exception):
    """A command ran past its bound; sections whose reading would be wrong without it raise this (the section
    then answers ``{"error": "TimedOut: ..."}``) rather than report an absent package or unit."""


def start(budget=None):
    """Begin a probe run of at most ``budget`` seconds (None: :data:`FALLBACK_BUDGET`); forget earlier timeouts."""
    seconds = float(budget) if budget else FALLBACK_BUDGET
    _run["budget"] = seconds
    _run["deadline"] = time.monotonic() + seconds
    _run["timed_out"] = []


def timed_out():
    """The commands that ran past their bound since :func:`start`, as ``"ARGV0 ... (after N s)"`` lines."""
    return list(_run["timed_out"])


def bound(timeout=None):
    """Seconds the next command may run: its own ``timeout`` (default a quarter of the budget), no more than what
    is left of the probe's budget, and at least a moment so that a command can still report quickly."""
    seconds = float(timeout) if timeout else _run["budget"] / COMMAND_SHARE
    if _run["deadline"] is not None:
        seconds = min(seconds, _run["deadline"] - time.monotonic())
    return max(seconds, 0.5)


def available(name):
    """Whether ``name`` is an executable on the probe's ``PATH``: a tool the node lacks costs no process."""
    # PATH read directly: os.get_exec_path imports warnings, a cost on every probe run.
    path = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return any(os.access(os.path.join(folder or ".", name), os.X_OK) for folder in path)


def run(argv, timeout=None, stderr="merge"):
    """Run ``argv``: ``(exit status, output)``; the status is None when it could not start or timed out, and the
    output then says why (``"timed out after N s: ARGV"``). ``stderr``: ``"merge"`` it into the output,
    ``"drop"`` it, or ``"apart"``: then a failing command's output is its standard error.

    The command runs in a session of its own, so that a timeout kills it and whatever it started; a command stuck
    in the kernel (a hung ``nvidia-smi`` in uninterruptible sleep ignores even SIGKILL) is left behind rather than
    waited for, which :func:`subprocess.run` would do.
    """
    # Imported here, not with the module: a probe that runs no command (drift of files, packages and accounts on a
    # dpkg node) then never loads subprocess and what it pulls in (contextlib, signal, threading, selectors, locale,
    # re), about 4 ms of CPU on every node at every check.
    import contextlib
    import signal
    import subprocess

    stderr = {"merge": subprocess.STDOUT, "drop": subprocess.DEVNULL, "apart": subprocess.PIPE}[stderr]
    seconds = bound(timeout)
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                universal_newlines=True, start_new_session=True)
    except OSError as exc:
        return None, str(exc)
    try:
        out, err = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        reading = "timed out after %g s: %s" % (round(seconds, 1), " ".join(argv[:3]))
        _run["timed_out"].append(reading)
        return None, reading
    return proc.returncode, err if proc.returncode and err else out


def output(argv, timeout=None):
    """The standard output of ``argv`` (standard error dropped) whatever its exit status; "" when it could not
    start. A command that runs past its bound raises :class:`TimedOut`."""
    rc, text = run(argv, timeout, stderr="drop")
    if rc is None and text.startswith("timed out"):
        raise TimedOut(text)
    return text if rc is not None else ""
