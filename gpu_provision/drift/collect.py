"""One node's drift check as the fleet runner's per-host work: fetch the ``NodeState`` fact once, compare.

:func:`check_fleet` hands :func:`check_host` to :func:`gpu_provision.fleet.run_fleet`, which connects (bounded
timeouts, in parallel) and counts remote commands; a node that refuses, times out or fails its probe is reported
as not checked with the reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from pyinfra.api import Inventory
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host, ctx_state

from gpu_provision.drift.compare import node_differences, node_request, section_problems
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.drift.stages import names_of
from gpu_provision.facts.state import invalidate, node_state
from gpu_provision.fleet import FleetSettings, HostResult, Progress, Reached, run_fleet
from gpu_provision.spec import Cluster, Node
from gpu_provision.state import NodeStateData, Request

#: How a pyinfra host maps back to its typed node and cluster (the cluster file's inventory by default).
Resolver = Callable[[Any], tuple[Node, Cluster]]


def cluster_resolver(host: Any) -> tuple[Node, Cluster]:
    """The typed node and cluster of a host built by :mod:`gpu_provision.inventory`."""
    from gpu_provision.inventory import cluster_for, node_for

    return node_for(host), cluster_for(host)


class ProbeFailed(Exception):
    """The node-state probe did not answer (command failed, timed out, or python3 is missing)."""


def check_host(reached: Reached, stages: Sequence[Any], resolve: Resolver) -> NodeReport:
    """Fetch a reached host's state once and compare every stage (commands and time are the runner's)."""
    host, state, log = reached.host, reached.state, reached.log
    report = NodeReport(name=host.name, address="")
    try:
        node, cluster = resolve(host)
    except Exception as exc:
        report.checked = False
        report.problems.append(f"not a node of the cluster file: {type(exc).__name__}: {exc}")
        return report
    # The state cache is keyed by the host object's id, which a host of an earlier run in this process may
    # have had: start from a fresh generation so only this run's answer is used.
    invalidate(host)

    def fetch(request: Request) -> NodeStateData:
        try:
            data = node_state(host, request)
        except PyinfraError as exc:  # pyinfra gives up on the last active host; the reason is in the log
            raise ProbeFailed(log.last_failure or str(exc)) from exc
        if not isinstance(data.raw, dict) or log.last_failure:
            raise ProbeFailed(log.last_failure or "python3 not found on the node")
        return data

    try:
        with ctx_state.use(state), ctx_host.use(host):
            request = node_request(node, cluster, stages)
            data = fetch(request)
            comparison = node_differences(node, cluster, data, stages, refetch=fetch)
    except ProbeFailed as exc:
        report.checked = False
        report.problems.append(f"probe failed: {exc}")
        return report
    report.differences = comparison.differences
    report.diffs = comparison.diffs
    report.problems = section_problems(data, request) + comparison.problems
    return report


def node_report(result: HostResult[NodeReport]) -> NodeReport:
    """A host's drift report from its fleet result: the comparison, or not checked with the runner's reason."""
    if result.value is None:
        base = NodeReport(name=result.name, address=result.address, checked=False,
                          problems=[result.unreached or "not reached"])
    else:
        base = dataclasses.replace(result.value, name=result.name, address=result.address)
    return dataclasses.replace(base, commands=result.commands, seconds=result.seconds)


def check_fleet(inventory: Inventory, stages: Sequence[Any], settings: FleetSettings | None = None,
                resolve: Resolver = cluster_resolver, progress: Progress | None = None) -> FleetReport:
    """Check every host of ``inventory`` (or those named in ``settings.limit``) against ``stages``.

    Hosts run in parallel through the fleet runner; the report lists them in inventory order. ``progress`` hears
    how many nodes are done (a node not fully checked counts as failed) as they finish.
    """

    def connect_timeout_of(host: Any) -> float | None:
        try:
            return float(resolve(host)[0].ssh.connect_timeout)
        except Exception:  # a host outside the cluster file is reported by check_host
            return None

    run = run_fleet(inventory, lambda reached: check_host(reached, stages, resolve), settings, connect_timeout_of,
                    progress, failed=lambda report: report.status in ("not-checked", "error"))
    return FleetReport(nodes=[node_report(r) for r in run.hosts], stages=names_of(stages), seconds=run.seconds,
                       parallel=run.parallel, connect_timeout=run.connect_timeout)
