"""Runs the ``pyinfra`` command line unchanged, counting the remote commands and file transfers of each host.

    python -m bench.stock_pyinfra COUNTS.json -- inventory.py bench/stock_deploy.py --dry

The counts are written to COUNTS.json (host name -> commands) when pyinfra exits.
"""

from __future__ import annotations

import atexit
import json
import sys
from collections import Counter
from typing import Any


def main() -> None:
    """Count, then hand over to pyinfra's own ``main``."""
    out, argv = sys.argv[1], sys.argv[3:]
    import pyinfra_cli  # noqa: F401  (patches sockets for gevent first, as the pyinfra command does)
    from pyinfra.connectors.ssh import SSHConnector
    from pyinfra_cli.main import main as pyinfra_main

    counts: Counter[str] = Counter()

    def counting(method: Any) -> Any:
        def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
            counts[self.host.name] += 1
            return method(self, *args, **kwargs)
        return wrapper

    for name in ("run_shell_command", "put_file", "get_file"):
        setattr(SSHConnector, name, counting(getattr(SSHConnector, name)))

    def dump() -> None:
        with open(out, "w", encoding="utf-8") as f:
            json.dump(dict(counts), f)

    atexit.register(dump)
    sys.argv = ["pyinfra", *argv]
    pyinfra_main()


if __name__ == "__main__":
    main()
