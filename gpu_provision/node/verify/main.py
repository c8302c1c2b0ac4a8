"""Entry point of the verification agent: read the expectations, take the readings, print one JSON report.

Usage on a node: ``python3 gpu-provision-node.pyz verify --expect /etc/gpu-provision/verify-expect.json``
(``--state``: only the checks that start no work on the GPUs, as the support archive runs them).
Exit status: 0 when every check passed or was skipped, 1 when any failed, 2 when the agent itself could not
work (a report is printed all the same, with ``status: error``).

The checks are rows of a table (``registry``) over lazily taken readings (``node_readings``); the CUDA probes are
child processes of this program (``probes``), started again through :func:`self_command`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from typing import Any

from . import AGENT_VERSION, cuda, registry
from .node_readings import NodeReadings
from .report import Check, build_report, utc_now


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
    if not state_only:
        node.start_background()
    found = registry.run_checks(node, expect, registry.STATE_CHECKS if state_only else registry.CHECKS)
    host = node.host()
    node.close()
    return found, host


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments of the agent."""
    parser = argparse.ArgumentParser(prog="gpu-verify", description="Verify this GPU node; print a JSON report.")
    parser.add_argument("--expect", help="expectations JSON written by the controller")
    parser.add_argument("--output", help="also write the report to this file")
    parser.add_argument("--compact", action="store_true", help="print the report on one line (for pod logs)")
    parser.add_argument("--state", action="store_true",
                        help="only the checks of the node's state against the file: no CUDA, container or pod work")
    parser.add_argument("--libcuda", default="libcuda.so.1", help=argparse.SUPPRESS)
    parser.add_argument("--cuda-probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer-probe", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; print the report; return 0 (all pass/skip), 1 (a failure) or 2 (agent error)."""
    args = parse_args(argv)
    if args.cuda_probe:
        print(json.dumps(cuda.probe_devices(args.libcuda)))
        return 0
    if args.peer_probe:
        print(json.dumps(cuda.probe_peers(args.libcuda)))
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
        host = dict(host, traceback=traceback.format_exc(limit=5))
    report = build_report(node, AGENT_VERSION, started, time.perf_counter() - clock, host, found, error)
    text = json.dumps(report, indent=1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(json.dumps(report, separators=(",", ":")) if args.compact else text)
    return 2 if error else (1 if report["summary"]["fail"] else 0)
