"""The argument grammar every subcommand shares, so a flag means the same thing and is spelt the same everywhere.

``--cluster FILE`` (else ``GPU_PROVISION_CLUSTER``, else ``./cluster.yaml``) names the cluster file, ``--limit NAME``
repeats (``--limit a --limit b``, or ``--limit a,b``) and never takes a positional, ``--json`` puts only JSON on
standard output, and exit statuses are :data:`EXIT_OK`, :data:`EXIT_FINDINGS` and :data:`EXIT_ERROR`. The output
helpers (:func:`emit`, :func:`say`, :func:`progress`, :func:`gpu_lines`) keep every command's output alike.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from collections.abc import Callable, Iterable
from typing import Any

#: Everything asked for is as it should be.
EXIT_OK = 0
#: The command worked and found something: drift, a failed verification, a layout that does not fit.
EXIT_FINDINGS = 1
#: The command could not do its work: a usage error, a bad input file, an unreachable node.
EXIT_ERROR = 2

#: The variable the pyinfra inventory reads the cluster file's name from.
CLUSTER_ENV = "GPU_PROVISION_CLUSTER"

EXIT_STATUS_HELP = "exit status: 0 ok, 1 findings ({findings}), 2 error ({errors})"


def add_command(sub: argparse._SubParsersAction, name: str, summary: str, description: str,
                examples: Iterable[str], findings: str = "none", errors: str = "bad arguments or input") -> Any:
    """A subcommand parser with the description, examples and exit statuses every ``--help`` shows, and ``--json``.

    ``summary`` is the one line in ``gpu-provision --help``; ``findings`` and ``errors`` say what exit statuses 1
    and 2 mean for this command.
    """
    lines = ["examples:", *(f"  {e}" for e in examples), "",
             EXIT_STATUS_HELP.format(findings=findings, errors=errors)]
    parser = sub.add_parser(name, help=summary, description=textwrap.fill(description, 110),
                            epilog="\n".join(lines), formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true",
                        help="print only JSON on standard output (errors too: {\"error\": {...}})")
    return parser


def add_cluster(parser: argparse.ArgumentParser, *aliases: str, positional: bool = False) -> None:
    """``--cluster FILE``; ``aliases`` are older spellings of the flag (``--node-file``) and, with ``positional``,
    the older ``COMMAND FILE`` spelling is accepted as the same."""
    parser.add_argument("--cluster", *aliases, dest="cluster", metavar="FILE",
                        help="cluster file (default: $GPU_PROVISION_CLUSTER, else ./cluster.yaml)")
    if positional:
        parser.add_argument("file", nargs="?", metavar="FILE", help="the cluster file, as --cluster FILE")


def cluster_file(args: argparse.Namespace) -> str:
    """The cluster file a command reads: ``--cluster``, the positional ``FILE``, the environment, ``./cluster.yaml``.

    Naming two different files is a usage error rather than a silent choice.
    """
    from gpu_provision.errors import GpuProvisionError
    from gpu_provision.spec import cluster_file_from_env

    flag, positional = getattr(args, "cluster", None), getattr(args, "file", None)
    if flag and positional and flag != positional:
        raise GpuProvisionError(f"two cluster files named: --cluster {flag} and {positional}")
    return str(flag or positional or cluster_file_from_env())


def use_cluster(args: argparse.Namespace) -> None:
    """Point the pyinfra inventory (``inventory.py`` reads ``GPU_PROVISION_CLUSTER``) at ``--cluster`` when given,
    once the file is known to be valid: its problems are reported as ``validate`` reports them (one line each, or
    the JSON error), not as an inventory that stopped."""
    if args.cluster:
        from gpu_provision.spec import load_cluster

        load_cluster(args.cluster)
        os.environ[CLUSTER_ENV] = args.cluster


def _names(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",")]
    if not all(names):
        raise argparse.ArgumentTypeError(f"expected NAME or NAME,NAME..., got {text!r}")
    return names


class _Extend(argparse.Action):
    """Appends each ``--limit`` value's names to one flat list."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *values])


def add_limit(parser: argparse.ArgumentParser, *aliases: str, what: str = "node") -> None:
    """``--limit NAME`` (repeatable, or ``NAME,NAME``): one value per flag, so it never takes a positional.

    ``aliases`` are older spellings of the same flag that keep working (``plan --node``).
    """
    parser.add_argument("--limit", *aliases, dest="limit", action=_Extend, type=_names, default=[], metavar="NAME",
                        help=f"only this {what} (repeat the flag, or give NAME,NAME)")


def add_fleet_options(p: argparse.ArgumentParser, command_timeout_help: str) -> None:
    """The inventory and connection options ``drift`` and ``verify`` share (both run through the fleet runner)."""
    p.add_argument("inventory", nargs="?", default="inventory.py", help="pyinfra inventory file (default: %(default)s)")
    add_cluster(p)
    add_limit(p)
    p.add_argument("--config", default="config.py",
                   help="pyinfra config file whose PARALLEL and CONNECT_TIMEOUT apply (default: %(default)s, if present)")
    p.add_argument("--parallel", type=int, default=None,
                   help="nodes handled at once (default: the config file's, else pyinfra's: 20 per CPU core)")
    p.add_argument("--connect-timeout", type=float, default=None,
                   help="seconds to wait for a node's SSH connection and login (default: the config file's, "
                        "else the largest ssh.connect_timeout in the cluster file)")
    p.add_argument("--command-timeout", type=float, default=None, help=command_timeout_help)


def add_in_cluster_options(p: argparse.ArgumentParser, in_cluster_help: str) -> None:
    """``--in-cluster``, ``--manifest`` and the DaemonSet options ``drift`` and ``verify`` share; the namespace's default is the
    project's own (``spec.namespaces.VERIFICATION``), the one name team namespaces are refused."""
    from gpu_provision.spec.namespaces import VERIFICATION

    p.add_argument("--in-cluster", action="store_true", help=in_cluster_help)
    p.add_argument("--manifest", action="store_true",
                   help="with --in-cluster (or verify's --workload): print the manifests it would apply (YAML; a "
                        "JSON list with --json) and exit")
    p.add_argument("--kubeconfig", help="kubeconfig for --in-cluster (default: kubectl's)")
    p.add_argument("--namespace", default=VERIFICATION, help="namespace of the DaemonSet (default: %(default)s)")


def emit(args: argparse.Namespace, doc: Any, text: Callable[[], str] | str | None = None) -> None:
    """Print ``doc`` as JSON under ``--json``, else ``text`` (a string, or a function making one) when given."""
    import json

    if args.json:
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif text is not None:
        print(text() if callable(text) else text)


def gpu_lines(per_gpu: dict[int, str]) -> list[str]:
    """``GPU N: text`` lines with runs of GPUs that read the same collapsed: ``GPU 0-7: MIG disabled``."""
    lines: list[str] = []
    run: list[int] = []
    for index in sorted(per_gpu):
        if run and (index != run[-1] + 1 or per_gpu[index] != per_gpu[run[0]]):
            lines.append(_gpu_run(run, per_gpu[run[0]]))
            run = []
        run.append(index)
    if run:
        lines.append(_gpu_run(run, per_gpu[run[0]]))
    return lines


def _gpu_run(indexes: list[int], text: str) -> str:
    label = str(indexes[0]) if len(indexes) == 1 else f"{indexes[0]}-{indexes[-1]}"
    return f"GPU {label}: {text}"


def say(message: str) -> None:
    """Human text that is not the command's result (what was written, progress): always standard error."""
    print(message, file=sys.stderr)


def progress(stream: Any = None, clock: Callable[[], float] | None = None) -> Callable[[int, int, int], None]:
    """Live counts for long fleet work, on standard error (never standard output, so ``--json`` stays clean).

    On a terminal one line (``3 done, 1 failed, 4 remaining``) is rewritten in place as hosts finish; everywhere
    (terminal, log file, pipe) the run ends with one summary line: ``8 nodes: 7 done, 1 failed (12.3 s)``.
    A log therefore gets the summary only, not a line per host.
    """
    import time

    out = stream or sys.stderr
    live = bool(getattr(out, "isatty", lambda: False)())
    now = clock or time.monotonic
    started = now()

    def show(done: int, failed: int, total: int) -> None:
        finished = done + failed >= total
        if live and not finished:
            out.write(f"\r{done} done, {failed} failed, {total - done - failed} remaining\033[K")
        elif finished:
            summary = (f"{total} node{'s' if total != 1 else ''}: {done} done, {failed} failed "
                       f"({now() - started:.1f} s)")
            out.write(f"\r{summary}\033[K\n" if live else summary + "\n")
        out.flush()

    return show
