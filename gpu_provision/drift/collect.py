"""Reaching the fleet: pyinfra inventory, parallel connects, one probe per node, remote commands counted.

The inventory is built from ``inventory.py`` the way ``pyinfra`` builds it, so the SSH settings the cluster file
gives (user, port, key, known_hosts) apply unchanged. Every node is handled in its own greenlet of pyinfra's pool:
connect (bounded by the connect timeout, the SSH banner and the login alike), fetch the ``NodeState`` fact once,
compare. A node that refuses, times out or fails its probe is reported as not checked with the reason, and never
holds up the others beyond its own timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import gevent
from pyinfra.api import Config, Inventory, State
from pyinfra.api.exceptions import PyinfraError
from pyinfra.context import ctx_host, ctx_state

from gpu_provision.drift.compare import node_differences, node_request, section_problems
from gpu_provision.drift.report import FleetReport, NodeReport
from gpu_provision.drift.stages import names_of
from gpu_provision.facts.state import invalidate, node_state
from gpu_provision.spec import Cluster, Node
from gpu_provision.state import NodeStateData, Request

DEFAULT_COMMAND_TIMEOUT = 120.0

#: How a pyinfra host maps back to its typed node and cluster (the cluster file's inventory by default).
Resolver = Callable[[Any], tuple[Node, Cluster]]


def cluster_resolver(host: Any) -> tuple[Node, Cluster]:
    """The typed node and cluster of a host built by :mod:`gpu_provision.inventory`."""
    from gpu_provision.inventory import cluster_for, node_for

    return node_for(host), cluster_for(host)


@dataclass(frozen=True)
class CheckSettings:
    """How a drift run reaches the fleet.

    ``connect_timeout`` None: the largest ``ssh.connect_timeout`` among the nodes in the cluster file.
    ``parallel`` 0: pyinfra's default (20 per CPU core, at most one per node).
    """

    parallel: int = 0
    connect_timeout: float | None = None
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT
    limit: tuple[str, ...] = ()


def load_inventory(path: str) -> Inventory:
    """The pyinfra inventory of an inventory file, built as the ``pyinfra`` command builds it."""
    from pyinfra_cli.inventory import make_inventory_from_files

    # The CLI loads inventory files with a state in context (they may read it); the check makes its own later.
    with ctx_state.use(State()):
        return make_inventory_from_files(path)


def file_settings(path: str) -> dict[str, Any]:
    """The connection settings a pyinfra ``config.py`` sets (``PARALLEL``, ``CONNECT_TIMEOUT``), read the way the
    ``pyinfra`` command reads it, so ``gpu-provision drift`` and ``pyinfra --dry`` reach nodes alike."""
    from pyinfra.context import ctx_config
    from pyinfra_cli.util import exec_file

    config, default = Config(), Config()
    try:
        with ctx_state.use(State()), ctx_config.use(config):
            exec_file(path)
    except Exception as exc:
        from gpu_provision.errors import GpuProvisionError

        raise GpuProvisionError(f"{path}: {exc}") from exc
    return {key: getattr(config, key) for key in ("PARALLEL", "CONNECT_TIMEOUT")
            if getattr(config, key) != getattr(default, key)}


class CommandLog:
    """Counts and remembers the remote commands one host ran (wraps its connector)."""

    def __init__(self, connector: Any):
        self.commands = 0
        self.transfers = 0
        self.last_error: str | None = None
        run, put, get = connector.run_shell_command, connector.put_file, connector.get_file

        def run_shell_command(command: Any, *args: Any, **kwargs: Any) -> Any:
            self.commands += 1
            try:
                ok, output = run(command, *args, **kwargs)
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                raise
            if not ok:
                tail = [line for line in output.stderr_lines if line.strip()][-3:]
                self.last_error = " / ".join(tail) or "remote command failed with no message"
            return ok, output

        def counted(func: Callable[..., Any]) -> Callable[..., Any]:
            def transfer(*args: Any, **kwargs: Any) -> Any:
                self.transfers += 1
                return func(*args, **kwargs)
            return transfer

        connector.run_shell_command = run_shell_command
        connector.put_file = counted(put)
        connector.get_file = counted(get)


def _connect_timeout(inventory: Inventory, resolve: Resolver, given: float | None) -> float:
    if given is not None:
        return given
    timeouts = []
    for host in inventory:
        try:
            timeouts.append(resolve(host)[0].ssh.connect_timeout)
        except Exception:  # a host outside the cluster file is reported later, by the check itself
            continue
    return float(max(timeouts, default=Config.CONNECT_TIMEOUT))


def _apply_timeouts(host: Any, connect_timeout: float, command_timeout: float) -> None:
    # pyinfra's CONNECT_TIMEOUT bounds only the TCP connect; a node that accepts and then stalls would wait out
    # paramiko's own banner and auth timeouts, so both get the same bound.
    extra = dict(host.data.get("ssh_paramiko_connect_kwargs") or {})
    extra.setdefault("banner_timeout", connect_timeout)
    extra.setdefault("auth_timeout", connect_timeout)
    host.data.ssh_paramiko_connect_kwargs = extra
    if host.data.get("_timeout") is None:
        host.data._timeout = command_timeout


def _address(host: Any) -> str:
    return str(host.data.get("ssh_hostname") or host.name)


def check_host(state: State, host: Any, stages: Sequence[Any], resolve: Resolver, log: CommandLog) -> NodeReport:
    """Connect to one host, fetch its state once, and compare every stage."""
    report = NodeReport(name=host.name, address=_address(host))
    started = time.monotonic()
    try:
        _check(state, host, stages, resolve, log, report)
    finally:
        report.commands = log.commands + log.transfers
        report.seconds = time.monotonic() - started
    return report


def _check(state: State, host: Any, stages: Sequence[Any], resolve: Resolver, log: CommandLog,
           report: NodeReport) -> None:
    try:
        node, cluster = resolve(host)
    except Exception as exc:
        report.checked = False
        report.problems.append(f"not a node of the cluster file: {type(exc).__name__}: {exc}")
        return
    try:
        host.connect(show_errors=False, raise_exceptions=True)
    except Exception as exc:
        report.checked = False
        report.problems.append(f"unreachable: {exc}" if str(exc) else f"unreachable: {type(exc).__name__}")
        return
    state.activate_host(host)
    # The state cache is keyed by the host object's id, which a host of an earlier run in this process may
    # have had: start from a fresh generation so only this run's answer is used.
    invalidate(host)

    def fetch(request: Request) -> NodeStateData:
        try:
            data = node_state(host, request)
        except PyinfraError as exc:  # pyinfra gives up on the last active host; the reason is in the log
            raise ProbeFailed(log.last_error or str(exc)) from exc
        if not isinstance(data.raw, dict) or log.last_error:
            raise ProbeFailed(log.last_error or "python3 not found on the node")
        return data

    try:
        with ctx_state.use(state), ctx_host.use(host):
            request = node_request(node, cluster, stages)
            data = fetch(request)
            comparison = node_differences(node, cluster, data, stages, refetch=fetch)
    except ProbeFailed as exc:
        report.checked = False
        report.problems.append(f"probe failed: {exc}")
        return
    report.differences = comparison.differences
    report.problems = section_problems(data, request) + comparison.problems


class ProbeFailed(Exception):
    """The node-state probe did not answer (command failed, timed out, or python3 is missing)."""


def check_fleet(inventory: Inventory, stages: Sequence[Any], settings: CheckSettings | None = None,
                resolve: Resolver = cluster_resolver) -> FleetReport:
    """Check every host of ``inventory`` (or those named in ``settings.limit``) against ``stages``.

    Hosts run in parallel in pyinfra's greenlet pool; the report lists them in inventory order.
    """
    settings = settings or CheckSettings()
    started = time.monotonic()
    hosts = _chosen(inventory, settings.limit)
    if not hosts:
        from gpu_provision.errors import GpuProvisionError

        raise GpuProvisionError("the inventory has no hosts")
    connect_timeout = _connect_timeout(inventory, resolve, settings.connect_timeout)
    for host in hosts:
        _apply_timeouts(host, connect_timeout, settings.command_timeout)
    config = Config(CONNECT_TIMEOUT=connect_timeout, PARALLEL=settings.parallel, FAIL_PERCENT=None)
    state = State(inventory, config)
    logs = {host: CommandLog(host.connector) for host in hosts}
    try:
        greenlets = [state.pool.spawn(check_host, state, host, stages, resolve, logs[host]) for host in hosts]
        gevent.joinall(greenlets)
        nodes = [g.get() for g in greenlets]
    finally:
        _disconnect(hosts)
    return FleetReport(nodes=nodes, stages=names_of(stages), seconds=time.monotonic() - started,
                       parallel=int(config.PARALLEL), connect_timeout=connect_timeout)


def _chosen(inventory: Inventory, limit: Iterable[str]) -> list[Any]:
    names = set(limit)
    hosts = [h for h in inventory if not names or h.name in names]
    unknown = names - {h.name for h in hosts}
    if unknown:
        from gpu_provision.errors import GpuProvisionError

        raise GpuProvisionError(f"--limit names hosts the inventory does not have: {', '.join(sorted(unknown))}")
    return hosts


def _disconnect(hosts: Iterable[Any]) -> None:
    for host in hosts:
        if host.connected:
            host.disconnect()
        client = getattr(host.connector, "client", None)
        if client is not None:
            client.close()
