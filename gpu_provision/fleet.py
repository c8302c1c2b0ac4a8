"""One fleet runner over pyinfra's API: every command that does per-node work across the fleet goes through it.

The inventory is built from an inventory file the way ``pyinfra`` builds it, so the SSH settings the cluster file
gives (user, port, key, known_hosts) apply unchanged. :func:`run_fleet` handles every host in its own greenlet of
pyinfra's pool: connect (bounded by the connect timeout, the SSH banner and the login alike), run the caller's
per-host function, count the remote commands it ran, and disconnect as soon as that is done. Each host's outcome
comes back by value as a :class:`HostResult`: the function's result, or the reason the host was not reached, worded
the same for every caller. A host that refuses or stalls never holds up the others beyond its own timeouts.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import gevent
from paramiko.hostkeys import HostKeys
from pyinfra.api import Config, Inventory, State
from pyinfra.api.operations import run_host_op
from pyinfra.context import ctx_host, ctx_state

from gpu_provision.errors import GpuProvisionError
from gpu_provision.facts.state import mark_executing
from gpu_provision.operations.remote import StatusCommand, outcome, text_of, without_status

T = TypeVar("T")

#: Ciphers left out of the SSH negotiation, so that it settles on AES-GCM: an authenticated cipher needs no separate
#: MAC, which paramiko would compute and compare in Python for every packet. Every OpenSSH since 6.2 (2013) offers
#: AES-GCM; a cluster file's own ``disabled_algorithms`` replaces this.
NON_AEAD_CIPHERS = ("aes128-ctr", "aes192-ctr", "aes256-ctr", "aes128-cbc", "aes192-cbc", "aes256-cbc", "3des-cbc")


@dataclass(frozen=True)
class FleetSettings:
    """How a run reaches the fleet.

    ``parallel`` 0: pyinfra's default (20 per CPU core, at most one per host).
    ``connect_timeout`` None: the largest ``ssh.connect_timeout`` among the hosts' nodes in the cluster file.
    ``command_timeout`` None: each command keeps its own bound (the probe the node's ``ssh.probe_timeout``, deploy
    commands its ``ssh.command_timeout``, both from the cluster file; pyinfra's ``_timeout`` data where given).
    ``limit``: only these hosts (empty: all); a name the inventory lacks is an error.
    """

    parallel: int = 0
    connect_timeout: float | None = None
    command_timeout: float | None = None
    limit: tuple[str, ...] = ()


def load_inventory(path: str) -> Inventory:
    """The pyinfra inventory of ``path`` (an inventory file, or any inventory string the ``pyinfra`` command
    accepts, such as ``@local``), built as that command builds it.

    An inventory file that fails to run is a user error naming the file; this project's own errors (a bad
    cluster file read by ``inventory.py``) pass through as they are.
    """
    from pyinfra_cli.inventory import make_inventory

    if path.endswith(".py") and not os.path.exists(path):
        raise GpuProvisionError(f"{path}: no such inventory file")
    try:
        # The CLI loads inventory files with a state in context (they may read it); the run makes its own later.
        with ctx_state.use(State(check_for_changes=False)):
            return make_inventory(path, cwd=os.getcwd())
    except GpuProvisionError:
        raise
    except SystemExit as exc:  # the inventory printed its reason (on standard error) and stopped
        raise GpuProvisionError(f"inventory {path} stopped (exit status {exc.code}) before giving any host; "
                                "its message is above") from exc
    except Exception as exc:
        raise GpuProvisionError(f"cannot load inventory {path}: {type(exc).__name__}: {exc}") from exc


def file_settings(path: str) -> dict[str, Any]:
    """The connection settings a pyinfra ``config.py`` sets (``PARALLEL``, ``CONNECT_TIMEOUT``), read the way the
    ``pyinfra`` command reads it, so this project's commands and ``pyinfra`` reach nodes alike."""
    from pyinfra.context import ctx_config
    from pyinfra_cli.util import exec_file

    config, default = Config(), Config()
    try:
        with ctx_state.use(State()), ctx_config.use(config):
            exec_file(path)
    except Exception as exc:
        raise GpuProvisionError(f"{path}: {exc}") from exc
    return {key: getattr(config, key) for key in ("PARALLEL", "CONNECT_TIMEOUT")
            if getattr(config, key) != getattr(default, key)}


def settings_from(config_path: str | None = None, parallel: int | None = None,
                  connect_timeout: float | None = None, command_timeout: float | None = None,
                  limit: Iterable[str] = (),
                  default_command_timeout: float | None = None) -> FleetSettings:
    """A command's fleet settings: each from its command-line value when given, else from the pyinfra config
    file at ``config_path`` when it exists (``PARALLEL``, ``CONNECT_TIMEOUT``), else the runner's default."""
    if parallel is not None and parallel < 0:
        raise GpuProvisionError("--parallel must be 0 or more")
    from_file = file_settings(config_path) if config_path and os.path.exists(config_path) else {}
    timeout = connect_timeout if connect_timeout is not None else from_file.get("CONNECT_TIMEOUT")
    return FleetSettings(
        parallel=parallel or int(from_file.get("PARALLEL") or 0),
        connect_timeout=None if timeout is None else float(timeout),
        command_timeout=command_timeout or default_command_timeout,
        limit=tuple(limit),
    )


class CommandLog:
    """Counts and remembers the remote commands one host ran (wraps its connector).

    Every command runs as a :class:`gpu_provision.operations.remote.StatusCommand`, so a failed one is told with
    its exit status (``last_failure``: ``COMMAND exited N: last lines``, secrets hidden), whatever ran it: an
    operation, a fact or :func:`gpu_provision.operations.remote.run_on_host`.
    """

    def __init__(self, connector: Any):
        self.commands = 0
        self.transfers = 0
        #: The last failed command as :attr:`gpu_provision.operations.remote.HostCommand.failure` tells it.
        self.last_failure: str | None = None
        #: The operation :meth:`Reached.apply` stopped at, by its name.
        self.failed_operation: str | None = None
        run, put, get = connector.run_shell_command, connector.put_file, connector.get_file

        def run_shell_command(command: Any, *args: Any, **kwargs: Any) -> Any:
            self.commands += 1
            ours = not isinstance(command, StatusCommand)
            try:
                ok, output = run(StatusCommand(command) if ours else command, *args, **kwargs)
            except Exception as exc:
                error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
                self.last_failure = outcome(str(command), False, [], [], error=error).failure
                raise
            if not ok:
                password = kwargs.get("_sudo_password")
                self.last_failure = outcome(str(command), False, text_of(output.stdout_lines),
                                            text_of(output.stderr_lines), (str(password),) if password else ()).failure
            if ours:
                output = without_status(output)[1]
            return ok, output

        def counted(func: Callable[..., Any]) -> Callable[..., Any]:
            def transfer(*args: Any, **kwargs: Any) -> Any:
                self.transfers += 1
                return func(*args, **kwargs)
            return transfer

        connector.run_shell_command = run_shell_command
        connector.put_file = counted(put)
        connector.get_file = counted(get)


@dataclass(frozen=True)
class Reached:
    """A connected host, as the per-host function receives it: the run's pyinfra state, the host, and the log
    of the remote commands run on it so far."""

    state: State
    host: Any
    log: CommandLog

    def apply(self, deploy: Callable[..., T], *args: Any, **kwargs: Any) -> tuple[T, bool]:
        """Add the operations ``deploy`` (a ``@deploy`` function or operation) calls for this host and run them
        in order, stopping at the first that fails; returns what ``deploy`` returned and whether all succeeded.

        This is how a stage written for ``pyinfra inventory.py deploys/...`` runs on one host of a fleet run.
        """
        first = len(self.host.op_hash_order)
        with ctx_state.use(self.state), ctx_host.use(self.host):
            returned = deploy(*args, **kwargs)
            # The operations run now, each reading the node as the ones before left it: the same execution phase
            # pyinfra's CLI gives them (facts.state.executing), marked on this host alone.
            mark_executing(self.host, True)
            try:
                for op_hash in self.host.op_hash_order[first:]:
                    self.log.last_failure = None  # told by the operation's own commands
                    if not run_host_op(self.state, self.host, op_hash):
                        self.log.failed_operation = ", ".join(self.state.get_op_meta(op_hash).names) or op_hash
                        return returned, False
            finally:
                mark_executing(self.host, False)
        return returned, True


@dataclass(frozen=True)
class HostResult(Generic[T]):
    """One host's outcome: ``value`` is what the per-host function returned; ``unreached`` says why the host
    was not reached (then ``value`` is None). ``commands`` counts remote commands and file transfers."""

    name: str
    address: str
    value: T | None = None
    unreached: str | None = None
    commands: int = 0
    seconds: float = 0.0


@dataclass(frozen=True)
class FleetRun(Generic[T]):
    """Every chosen host's outcome in inventory order, with the run's own figures."""

    hosts: list[HostResult[T]]
    seconds: float
    parallel: int
    connect_timeout: float


def node_connect_timeout(host: Any) -> float | None:
    """The ``ssh.connect_timeout`` the cluster file gives the host's node; None for a host outside it."""
    from gpu_provision.inventory import node_for

    try:
        return float(node_for(host).ssh.connect_timeout)
    except Exception:  # a host outside the cluster file is the per-host function's business
        return None


#: Called after each host finishes with (hosts done, hosts that failed, hosts in the run).
Progress = Callable[[int, int, int], None]


def run_fleet(inventory: Inventory, work: Callable[[Reached], T], settings: FleetSettings | None = None,
              connect_timeout_of: Callable[[Any], float | None] = node_connect_timeout,
              progress: Progress | None = None, failed: Callable[[T], bool] = lambda value: False) -> FleetRun[T]:
    """Connect to every host of ``inventory`` (or those in ``settings.limit``), call ``work`` on each reached
    host in parallel, disconnect, and return each host's :class:`HostResult`.

    ``connect_timeout_of`` gives a host's own connect timeout, used when ``settings`` gives none.
    ``progress``, when given, hears once before the first host (0 done, 0 failed) and after every host how many
    are done, failed (unreached, or ``failed`` of its value) and in the run, so a long run can show where it is.
    An exception raised by ``work`` is raised here once every host has finished.
    """
    settings = settings or FleetSettings()
    started = time.monotonic()
    hosts = chosen_hosts(inventory, settings.limit)
    connect_timeout = settings.connect_timeout
    if connect_timeout is None:
        own = [t for t in map(connect_timeout_of, inventory) if t is not None]
        connect_timeout = float(max(own, default=Config.CONNECT_TIMEOUT))
    for host in hosts:
        _apply_timeouts(host, connect_timeout, settings.command_timeout)
    config = Config(CONNECT_TIMEOUT=connect_timeout, PARALLEL=settings.parallel, FAIL_PERCENT=None)
    state = State(inventory, config, check_for_changes=False)
    tally = _Tally(len(hosts), progress, failed)
    tally.begin()
    try:
        # pyinfra keeps the running State in one process-wide context, not one per greenlet: it is set here for
        # the whole run, so a greenlet leaving its own ``ctx_state.use(state)`` (a short command, one host's
        # deploy) cannot unset it under another host's deploy still in progress.
        with _remembered_host_keys(), ctx_state.use(state):
            greenlets = [state.pool.spawn(tally.counted, _run_host, state, host, work) for host in hosts]
            gevent.joinall(greenlets)
        results = [g.get() for g in greenlets]
    finally:
        _disconnect(hosts)
    return FleetRun(hosts=results, seconds=time.monotonic() - started, parallel=int(config.PARALLEL),
                    connect_timeout=connect_timeout)


class RememberedHostKeys(HostKeys):
    """A known_hosts file's keys (sharing ``source``'s entries) that finds a host's entries without scanning them all.

    paramiko's lookup compares the name with every entry (hashing it for every hashed one), and one connection
    looks its host up about a dozen times: with a known_hosts of a 1,000-node fleet that was most of the
    controller's CPU, growing with the fleet. Here plain host names are found through an index and only hashed
    entries are compared, once per name and run.
    """

    def __init__(self, source: HostKeys):
        super().__init__()
        self._entries = source._entries  # type: ignore[attr-defined]
        self._index()

    def _index(self) -> None:
        self._matching: dict[str, list[Any]] = {}
        self._plain: dict[str, list[int]] = {}
        self._hashed: list[int] = []
        for position, entry in enumerate(self._entries):  # type: ignore[attr-defined]
            if any(name.startswith("|1|") for name in entry.hostnames):
                self._hashed.append(position)
            for name in entry.hostnames:
                if not name.startswith("|1|"):
                    self._plain.setdefault(name, []).append(position)

    def lookup(self, hostname: str) -> Any:
        """As :meth:`HostKeys.lookup`, finding the entries of ``hostname`` only the first time it is asked for."""
        matching = self._matching.get(hostname)
        if matching is None:
            entries = self._entries  # type: ignore[attr-defined]
            matches = self._hostname_matches  # type: ignore[attr-defined]
            if hostname.startswith("|1|"):  # a hashed name asked for as such: compare it with every entry
                positions = {i for i, entry in enumerate(entries) if matches(hostname, entry)}
            else:
                positions = set(self._plain.get(hostname, ()))
                positions.update(i for i in self._hashed if matches(hostname, entries[i]))
            matching = self._matching[hostname] = [entries[i] for i in sorted(positions)]
        only = HostKeys()
        only._entries = matching  # type: ignore[attr-defined]
        return only.lookup(hostname)

    def add(self, hostname: str, keytype: str, key: Any) -> None:
        """As :meth:`HostKeys.add`, indexing the entries again."""
        super().add(hostname, keytype, key)
        self._index()


def load_host_keys(filenames: Iterable[str]) -> HostKeys:
    """The entries of known_hosts files, read in one pass.

    paramiko's :meth:`HostKeys.load` checks every new line against every entry read so far (a full lookup, hashing
    each hashed entry), so loading a fleet's known_hosts grows with the square of its size: about half a second of
    the controller's CPU at 1,000 entries, paid by every run whatever the number of hosts it checks. Here a line
    is dropped only when an earlier one has the same host names and key, which is all that check could change
    for a lookup. Files that cannot be read or lines that do not parse are skipped, as pyinfra's loader skips
    them (with its warning for a file).
    """
    from paramiko.hostkeys import HostKeyEntry
    from paramiko.ssh_exception import SSHException
    from pyinfra import logger

    keys = HostKeys()
    entries = keys._entries  # type: ignore[attr-defined]
    seen: set[tuple[tuple[str, ...], str, bytes]] = set()
    for filename in filenames:
        try:
            with open(filename, encoding="utf-8", errors="replace") as handle:
                lines = handle.readlines()
        except OSError as exc:
            logger.warning("Failed to load host keys from %s: %s", filename, exc)
            continue
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                entry = HostKeyEntry.from_line(line, number)
            except SSHException:
                continue
            if entry is None:
                continue
            identity = (tuple(entry.hostnames), entry.key.get_name(), entry.key.asbytes())
            if identity not in seen:
                seen.add(identity)
                entries.append(entry)
    return keys


@contextlib.contextmanager
def _remembered_host_keys() -> Iterator[None]:
    # pyinfra's SSH client loads known_hosts files through this module function (once per process, with
    # paramiko's quadratic load); during a run its hosts get RememberedHostKeys over entries read in one pass.
    from pyinfra.connectors.sshuserclient import client

    load = client.get_host_keys
    remembered: dict[tuple[str, ...], RememberedHostKeys] = {}

    def get_host_keys(filenames: tuple[str, ...]) -> RememberedHostKeys:
        if filenames not in remembered:
            remembered[filenames] = RememberedHostKeys(load_host_keys(filenames))
        return remembered[filenames]

    client.get_host_keys = get_host_keys
    try:
        yield
    finally:
        client.get_host_keys = load


class _Tally:
    """Counts finished hosts for a progress callback."""

    def __init__(self, total: int, progress: Progress | None, failed: Callable[[Any], bool]):
        self.total, self.progress, self.failed = total, progress, failed
        self.done = self.bad = 0

    def begin(self) -> None:
        """Tell the callback the run's size before any host finishes."""
        if self.progress is not None:
            self.progress(0, 0, self.total)

    def counted(self, run_host: Callable[..., HostResult[Any]], *args: Any) -> HostResult[Any]:
        """``run_host(*args)``, counted once it returns."""
        result = run_host(*args)
        if result.unreached is not None or self.failed(result.value):
            self.bad += 1
        else:
            self.done += 1
        if self.progress is not None:
            self.progress(self.done, self.bad, self.total)
        return result


def chosen_hosts(inventory: Inventory, limit: Iterable[str]) -> list[Any]:
    """The hosts ``limit`` names (all when empty), in inventory order; an unknown name or no host is an error."""
    names = set(limit)
    hosts = [h for h in inventory if not names or h.name in names]
    unknown = names - {h.name for h in hosts}
    if unknown:
        raise GpuProvisionError(f"--limit names hosts the inventory does not have: {', '.join(sorted(unknown))}")
    if not hosts:
        raise GpuProvisionError("the inventory has no hosts")
    return hosts


def _apply_timeouts(host: Any, connect_timeout: float, command_timeout: float | None) -> None:
    # pyinfra's CONNECT_TIMEOUT bounds only the TCP connect; a node that accepts and then stalls would wait out
    # paramiko's own banner and auth timeouts, so both get the same bound. The connection's cipher is chosen here
    # too (NON_AEAD_CIPHERS).
    extra = dict(host.data.get("ssh_paramiko_connect_kwargs") or {})
    extra.setdefault("banner_timeout", connect_timeout)
    extra.setdefault("auth_timeout", connect_timeout)
    extra.setdefault("disabled_algorithms", {"ciphers": list(NON_AEAD_CIPHERS)})
    host.data.ssh_paramiko_connect_kwargs = extra
    if command_timeout is not None and host.data.get("_timeout") is None:
        host.data._timeout = command_timeout


#: Why a host is not reached when its sudo asks for a password that no one gives (pyinfra prompts on a terminal).
SUDO_PASSWORD_NEEDED = ("sudo asks for a password: give it as pyinfra data (_sudo_password, for example in "
                        "group_data/all.py; see docs/connection.md) or allow the login user sudo without one")


def _address(host: Any) -> str:
    return str(host.data.get("ssh_hostname") or host.name)


def _run_host(state: State, host: Any, work: Callable[[Reached], T]) -> HostResult[T]:
    log = CommandLog(host.connector)
    started = time.monotonic()

    def result(**outcome: Any) -> HostResult[T]:
        return HostResult(name=host.name, address=_address(host), commands=log.commands + log.transfers,
                          seconds=time.monotonic() - started, **outcome)

    try:
        host.connect(show_errors=False, raise_exceptions=True)
    except Exception as exc:
        return result(unreached=f"unreachable: {exc}" if str(exc) else f"unreachable: {type(exc).__name__}")
    state.activate_host(host)
    try:
        value = work(Reached(state, host, log))
    except EOFError:  # pyinfra asked for the sudo password (getpass) and nobody can answer
        _disconnect([host])
        return result(unreached=SUDO_PASSWORD_NEEDED)
    # Closed as soon as its work is done: paramiko's transport wakes every 0.1 s while open, so connections kept
    # to the end of a run would cost the controller CPU in proportion to hosts times run length.
    _disconnect([host])
    return result(value=value)


def _disconnect(hosts: Iterable[Any]) -> None:
    for host in hosts:
        if host.connected:
            host.disconnect()
        client = getattr(host.connector, "client", None)
        if client is not None:
            client.close()
