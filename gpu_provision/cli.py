"""The ``gpu-provision`` command line.

Subcommands live in :mod:`gpu_provision.commands`, one module each with a ``register(subparsers)`` function; this
module only discovers them, runs the chosen one, and turns errors into one line each (exit status 2), with the
traceback only under ``-v``.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
import traceback
from collections.abc import Sequence

from gpu_provision import __version__, commands
from gpu_provision.errors import GpuProvisionError

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every discovered subcommand registered."""
    parser = argparse.ArgumentParser(prog="gpu-provision", description="Declarative GPU node provisioning.")
    parser.add_argument("--version", action="version", version=f"gpu-provision {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and debug output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.handler(args) or 0)
    except GpuProvisionError as exc:
        if args.verbose:
            traceback.print_exc()
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
