"""Read-only HTTP server for the rig's package mirror, bound to the bridge address (port 8080).

Run as ``python -m gpu_provision_rig.httpserve DIR --bind 10.77.0.1 --port 8080``. Only GET and HEAD are answered
(``http.server`` answers 501 to anything else), so nodes can read the mirror but never change it.
"""

from __future__ import annotations

import argparse
import functools
import ipaddress
import signal
import sys
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from gpu_provision_rig.config import SUBNET


class MirrorHandler(SimpleHTTPRequestHandler):
    """Serves files under the mirror root; logs one line per request to stdout."""

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        sys.stdout.write(f"{self.address_string()} {format % args}\n")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> None:
    """Command-line entry of the mirror server."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("root", type=Path, help="directory to serve")
    parser.add_argument("--bind", required=True, help="address in the rig subnet")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if ipaddress.ip_address(args.bind) not in ipaddress.ip_network(SUBNET):
        parser.error(f"bind address {args.bind} is outside the rig subnet {SUBNET}")
    handler = functools.partial(MirrorHandler, directory=str(args.root.resolve()))
    server = ThreadingHTTPServer((args.bind, args.port), handler)

    def stop(_signum: int, _frame: object) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stop)
    try:
        server.serve_forever()
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
