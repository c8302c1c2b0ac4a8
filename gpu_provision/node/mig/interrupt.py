"""Signals and output for the MIG applier: an interruption unwinds in order, and a lost output never stops it.

The applier stops GPU-holding units and must start them again whatever happens. A SIGTERM (``systemctl stop``, a
shutdown) or SIGHUP (the SSH session's terminal going away) would otherwise end the process without running its
``finally`` blocks; here the first one becomes :class:`Interrupted`, raised in the main thread, so the applier
unwinds through its restarts. Later SIGTERM/SIGHUPs are held back: they cannot cut the restarts short, and one that
arrives during :func:`shielded` work is raised when that work is done. A closed output (the SSH channel gone, so a
progress line meets ``EPIPE``) must not end the run either: :func:`say` moves to stderr (the journal under systemd),
then drops the lines. Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Iterator, Optional

PREFIX = "gpu-provision-mig: "
#: Signals that end an apply in order (SIGINT already does, as KeyboardInterrupt).
SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class Interrupted(BaseException):
    """A signal asked the applier to stop; raised once, in the main thread, from the signal handler.

    A ``BaseException`` like ``KeyboardInterrupt``, so that no ``except Exception`` on the way out swallows it.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class _State:
    """What the handler needs: whether restarts are running, and the signal already received."""

    shielded = False
    received: Optional[int] = None
    raised = False


_STATE = _State()
_STREAMS = ["stdout", "stderr"]


def _handler(signum: int, frame: object) -> None:
    if _STATE.received is None:
        _STATE.received = signum
    if _STATE.shielded or _STATE.raised:
        return
    _STATE.raised = True
    raise Interrupted(signum)


def install() -> None:
    """Turn SIGTERM and SIGHUP into :class:`Interrupted` (call from the main thread, before any change)."""
    _STATE.shielded, _STATE.received, _STATE.raised = False, None, False
    for signum in SIGNALS:
        signal.signal(signum, _handler)


@contextlib.contextmanager
def shielded() -> Iterator[None]:
    """Run the block to its end whatever SIGTERM/SIGHUP arrive; one that arrived is raised after the block."""
    outer = _STATE.shielded
    _STATE.shielded = True
    try:
        yield
    finally:
        _STATE.shielded = outer
    if not outer and _STATE.received is not None and not _STATE.raised:
        _STATE.raised = True
        raise Interrupted(_STATE.received)


def say(text: str) -> None:
    """Print a progress line; never raises: a closed stdout moves the lines to stderr, a closed stderr drops them."""
    while _STREAMS:
        try:
            print(PREFIX + text, file=getattr(sys, _STREAMS[0]), flush=True)
            return
        except (OSError, ValueError):
            _silence(_STREAMS.pop(0))


def _silence(name: str) -> None:
    """Point a dead standard stream's descriptor at /dev/null, so the interpreter's flush at exit cannot fail."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, getattr(sys, name).fileno())
        os.close(null)
