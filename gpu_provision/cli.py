"""The ``gpu-provision`` command line.

Subcommands live in :mod:`gpu_provision.commands`, one module each with a ``register(subparsers)`` function (the
shared grammar is :mod:`gpu_provision.commands.args`); this module only discovers them, runs the chosen one, and turns
every error into one line on standard error, or under ``--json`` into ``{"error": {"message", "kind"}}`` on standard
output, with exit status 2 either way. The traceback of an unexpected exception appears only with ``-v``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
import traceback
from collections.abc import Sequence
from typing import NoReturn

from gpu_provision import __version__, commands
from gpu_provision.commands.args import EXIT_ERROR
from gpu_provision.errors import GpuProvisionError, SpecError, one_line


class UsageError(Exception):
    """A command line argparse refused; raised instead of argparse's own exit so ``--json`` can report it."""


class Parser(argparse.ArgumentParser):
    """An argument parser whose errors are :class:`UsageError` (its subcommand parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        """Raise the problem with the parser's name, as argparse words it."""
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every discovered subcommand registered."""
    parser = Parser(prog="gpu-provision", description="Declarative GPU node provisioning.",
                    epilog="'gpu-provision COMMAND --help' shows a command's description and examples.")
    parser.add_argument("--version", action="version", version=f"gpu-provision {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="show tracebacks and debug output")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        if hasattr(module, "register"):
            module.register(sub)
    return parser


def _fail(message: str, kind: str, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": {"message": message, "kind": kind}}))
    else:
        print(message, file=sys.stderr)
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:  # leaves by SystemExit, as argparse does, with the same status 2
        as_json = "--json" in argv
        if not as_json:
            parser.print_usage(sys.stderr)
        raise SystemExit(_fail(str(exc), "usage", as_json)) from None
    as_json = bool(getattr(args, "json", False))
    try:
        return int(args.handler(args) or 0)
    except GpuProvisionError as exc:
        if args.verbose:
            traceback.print_exc()
        if isinstance(exc, SpecError):  # one line per problem, each made one line by SpecProblem
            return _fail("\n".join(str(p) for p in exc.problems), "spec", as_json)
        return _fail(one_line(str(exc)), "error", as_json)
    except KeyboardInterrupt:
        _fail("interrupted", "interrupted", as_json)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug or an environment problem: one line naming it, the traceback under -v
        if args.verbose:
            traceback.print_exc()
        text = str(exc).strip().splitlines()
        message = f"unexpected {type(exc).__name__}" + (f": {text[0]}" if text else "")
        return _fail(message + ("" if args.verbose else " (run with -v for the traceback)"), "internal", as_json)


if __name__ == "__main__":
    sys.exit(main())
