"""How a fleet command's process starts: gevent's patches first, then its imports with the garbage collector paused,
and pyinfra's and paramiko's per-host logging quietened.

pyinfra reaches hosts in gevent greenlets, so sockets, threads and time must be patched before anything opens a
connection or starts a thread: ``monkey.patch_all()``, as pyinfra's own command does first thing (importing
``pyinfra_cli`` does it too, but only when that import comes, after much else has been imported unpatched).

The imports that follow (pyinfra, paramiko, jsonschema and this project: about a hundred thousand objects, none of
them garbage) would set off the cyclic collector over and over, each time through everything imported so far.
Paused for them, then frozen out of its sight (``gc.freeze``) so that later collections skip them, a 100-host drift
check costs the controller about 0.1 s of CPU less (``bench/README.md``).

The commands report every host themselves (a table, a JSON document); pyinfra would also log every connect and fact,
and paramiko a traceback for every host that does not answer its banner or refuses the login, so both are set to
critical only (pyinfra to warnings for commands whose operations may warn, such as ``verify``).
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def fleet_process(pyinfra_warnings: bool = False) -> Iterator[None]:
    """Inside: gevent's patches applied and the collector paused, for the command's imports and set-up. After:
    everything that exists is frozen (kept, never scanned again) and the collector runs as usual. pyinfra logs
    warnings only with ``pyinfra_warnings``, paramiko nothing short of critical."""
    gc.disable()
    try:
        from gevent import monkey

        monkey.patch_all()
        logging.getLogger("pyinfra").setLevel(logging.WARNING if pyinfra_warnings else logging.CRITICAL)
        logging.getLogger("paramiko").setLevel(logging.CRITICAL)
        yield
    finally:
        gc.freeze()
        gc.enable()
