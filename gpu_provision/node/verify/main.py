"""Entry point of the verification agent: read the expectations, take the readings, print one JSON report.

Usage on a node: ``python3 gpu-provision-node.pyz verify --expect /etc/gpu-provision/verify-expect.json``
(``--state``: only the checks that start no work on the GPUs, as the support archive runs them).
Exit status: 0 when every check passed or was skipped, 1 when any failed, 2 when the agent itself could not
work (a report is printed all the same, with ``status: error``).

The checks are rows of a table (``registry``) over lazily taken readings (``node_readings``); the CUDA probes are
child processes of this program (``probes``), started again through :func:`self_command`.
"""

from __future__ import annotations

import json
import os
import sys
import time
from types import SimpleNamespace

from . import AGENT_VERSION, cuda, registry
from .node_readings import NodeReadings
from .report import Check, build_report, utc_now

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any


def self_command() -> tuple[list[str], dict[str, str]]:
    """Return the argv prefix and environment that start this agent again (zipapp or package)."""
    env = dict(os.environ)
    loader = globals().get("__loader__")
    if type(loader).__name__ == "zipimporter":
        # The archive itself, not argv[0]: the kept agent is imported from its zip by a ``python3 -c`` loader
        # (gpu_provision.verify.agent), where argv[0] is "-c".
        return [sys.executable, str(getattr(loader, "archive", sys.argv[0])), "verify"], env
    if sys.argv[0].endswith(".pyz"):
        return [sys.executable, sys.argv[0], "verify"], env
    package = __package__ or "gpu_provision.node.verify"
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in range(package.count(".") + 1):
        root = os.path.dirname(root)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return [sys.executable, "-m", package], env


def verify(expect: dict[str, Any], state_only: bool = False) -> tuple[list[Check], dict[str, Any]]:
    """Run every registered check for one node (``registry.CHECKS``), or with ``state_only`` those that start no
    work on it (``registry.STATE_CHECKS``); the checks and the report's host header."""
    node = NodeReadings(expect, self_command())
    try:
        if not state_only:
            node.start_background()
        found = registry.run_checks(node, expect, registry.STATE_CHECKS if state_only else registry.CHECKS)
        return found, node.host()
    finally:
        node.close()


#: The agent's options: name -> (takes a value, default, help). A small parser of its own rather than argparse,
#: whose import (gettext, locale and their patterns) cost each run on each node more than its checks of the files.
OPTIONS: dict[str, tuple[bool, Any, str]] = {
    "expect": (True, None, "expectations JSON written by the controller"),
    "output": (True, None, "also write the report to this file"),
    "compact": (False, False, "print the report on one line (for pod logs)"),
    "state": (False, False, "only the checks of the node's state against the file: no CUDA, container or pod work"),
    "libcuda": (True, "libcuda.so.1", ""),
    "cuda-probe": (False, False, ""),
    "peer-probe": (False, False, ""),
    "peer-wait": (False, False, ""),
    "peer-rounds": (False, False, ""),
}
USAGE = ("usage: gpu-verify [--expect FILE] [--output FILE] [--compact] [--state]\n"
         "Verify this GPU node; print a JSON report.\n"
         + "".join(f"  --{name}{' FILE' if value else ''}: {text}\n" for name, (value, _, text) in OPTIONS.items()
                   if text))


def parse_args(argv: list[str] | None) -> SimpleNamespace:
    """Command-line arguments of the agent (``--name VALUE`` or ``--name=VALUE``); usage and exit 2 on a word it
    does not know, as argparse does, and exit 0 after ``-h``/``--help``."""
    args = {name.replace("-", "_"): default for name, (_, default, _) in OPTIONS.items()}
    words = list(sys.argv[1:] if argv is None else argv)
    while words:
        word = words.pop(0)
        if word in ("-h", "--help"):
            sys.stdout.write(USAGE)
            raise SystemExit(0)
        name, given, value = word[2:].partition("=") if word.startswith("--") else ("", "", "")
        spec = OPTIONS.get(name)
        if spec is None or (given and not spec[0]) or (spec[0] and not given and not words):
            sys.stderr.write(f"{USAGE}gpu-verify: error: unrecognized or incomplete argument: {word}\n")
            raise SystemExit(2)
        args[name.replace("-", "_")] = (value if given else words.pop(0)) if spec[0] else True
    return SimpleNamespace(**args)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; print the report; return 0 (all pass/skip), 1 (a failure) or 2 (agent error)."""
    args = parse_args(argv)
    if args.cuda_probe:
        print(json.dumps(cuda.probe_devices(args.libcuda)))
        return 0
    if args.peer_probe:
        ready = (lambda: sys.stdin.readline().strip() == "go") if args.peer_wait else None
        print(json.dumps(cuda.probe_peers(args.libcuda, together=args.peer_rounds, ready=ready)))
        return 0
    started, clock = utc_now(), time.perf_counter()
    node, error = os.uname().nodename, None
    found: list[Check] = []
    host: dict[str, Any] = {}
    try:
        if not args.expect:
            raise ValueError("--expect FILE is required")
        with open(args.expect, encoding="utf-8") as handle:
            expect = json.load(handle)
        node = expect.get("node") or node
        found, host = verify(expect, args.state)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        import traceback  # here: only a run that ends in an exception formats one

        host = dict(host, traceback=traceback.format_exc(limit=5))
    report = build_report(node, AGENT_VERSION, started, time.perf_counter() - clock, host, found, error)
    # The indented form only where it is read: json's C encoder does not indent, and the Python one costs a
    # compact run (every fleet check) more than its checks of the node's state.
    text = json.dumps(report, indent=1) if args.output or not args.compact else ""
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(json.dumps(report, separators=(",", ":")) if args.compact else text)
    return 2 if error else (1 if report["summary"]["fail"] else 0)
