"""One run at a time per node: a lock file on the node, taken by a run's first operation and released by its last.

A run spans hundreds of SSH commands, so no process on the node can hold a lock for it. The lock is a file instead,
``/var/lib/gpu-provision/run.lock`` (root's), holding JSON that names its holder: the controller host, the pid of
the pyinfra process there, when the run started, a run id, and when the holder last renewed it (node clock). Every
change to it is made under ``flock`` on a guard file beside it and written atomically (mkstemp, fsync, rename), so
two runs arriving at once cannot both take it.

A second run finds the lock held and fails the node before changing anything, naming the holder. The lock is
*stale*, and taken over with a warning, when the holder's lease ran out (it is renewed at every stage, see
:data:`LEASE_S`) or when the holder ran on this same controller host and its pid is gone (the only place a pid can
be checked). pyinfra has no ``finally``: the lock is released by the run's last operation, and by
:class:`ReleaseOnFailure` when an operation fails the node; a run whose connection or controller died leaves the
lock to the stale rules.

Drift and verification (``gpu-provision drift``, ``gpu-provision verify``) only read nodes and take no lock: they
may run while a deploy does and report what they see.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

from pyinfra import logger
from pyinfra.api import operation
from pyinfra.api.state import BaseStateCallback

from gpu_provision.operations.commands import connector_arguments, fail_command, this_host
from gpu_provision.operations.remote import run_on_host

LOCK_PATH = "/var/lib/gpu-provision/run.lock"
#: Seconds a holder's lock stays valid without renewal. It is renewed before every stage, so this is the longest a
#: stage may take (a driver build from source takes minutes) before another controller may take the node over.
LEASE_S = 3600

_RUN_ATTR = "_gpu_provision_run"

# Runs on the node with its own python3 (the probe needs it anyway). argv: action (take, takeover, release), lock
# path, this run's holder JSON, lease seconds, and for takeover the run id of the holder found dead.
_PROGRAM = """\
import fcntl,json,os,sys,tempfile,time
action,path,me,lease=sys.argv[1],sys.argv[2],json.loads(sys.argv[3]),float(sys.argv[4])
d=os.path.dirname(path)
os.makedirs(d,mode=0o700,exist_ok=True)
guard=os.open(path+'.guard',os.O_RDWR|os.O_CREAT,0o600)
fcntl.flock(guard,fcntl.LOCK_EX)
try:
    with open(path) as f:
        held=json.load(f)
except (OSError,ValueError):
    held=None
if not isinstance(held,dict):
    held=None
def answer(result,holder=None):
    print(json.dumps({'result':result,'holder':holder}))
    sys.exit(0)
mine=held is not None and held.get('run_id')==me['run_id']
if action=='release':
    if mine:
        os.unlink(path)
        answer('released')
    answer('not-held',held)
try:
    expired=held is not None and time.time()-float(held.get('renewed'))>lease
except (TypeError,ValueError):
    expired=True
dead=held is not None and action=='takeover' and held.get('run_id')==sys.argv[5]
if held is None or mine or expired or dead:
    me['renewed']=time.time()
    fd,tmp=tempfile.mkstemp(dir=d,prefix='.run.lock.')
    with os.fdopen(fd,'w') as f:
        json.dump(me,f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp,path)
    answer('renewed' if mine else 'taken' if held is None else 'expired' if expired else 'dead',
           None if mine else held)
answer('held',held)
"""


@dataclass(frozen=True)
class LockHolder:
    """Who holds a node's run lock: the controller host, its pyinfra process, when the run started, the run's id."""

    controller: str
    pid: int
    started: str
    run_id: str

    def describe(self) -> str:
        """``run 5f3a... from ctl-1 (pid 4242) since 2026-12-01T04:47:46Z``."""
        return f"run {self.run_id} from {self.controller} (pid {self.pid}) since {self.started}"

    @classmethod
    def from_json(cls, data: Any) -> LockHolder:
        """The holder recorded in a lock file (fields a foreign or damaged file lacks read as ``?``)."""
        data = data if isinstance(data, dict) else {}
        pid = data.get("pid")
        return cls(str(data.get("controller", "?")), pid if isinstance(pid, int) else -1,
                   str(data.get("started", "?")), str(data.get("run_id", "?")))


def this_run(target: Any) -> LockHolder:
    """This run's identity on ``target``: made at its first use and kept on the host object for the whole run."""
    found: LockHolder | None = getattr(target, _RUN_ATTR, None)
    if found is None:
        found = LockHolder(socket.gethostname(), os.getpid(), time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       uuid.uuid4().hex)
        setattr(target, _RUN_ATTR, found)
    return found


def lock_command(action: str, me: LockHolder, path: str = LOCK_PATH, lease: int = LEASE_S, dead_run: str = "") -> str:
    """The node-side command for ``action`` (``take``, ``takeover`` of ``dead_run``, ``release``); prints JSON."""
    args = [action, path, json.dumps(asdict(me)), str(lease)] + ([dead_run] if dead_run else [])
    return f"python3 -c {shlex.quote(_PROGRAM)} " + " ".join(shlex.quote(a) for a in args)


def pid_gone(holder: LockHolder) -> bool:
    """Whether ``holder`` ran on this controller host and its process is gone (elsewhere it cannot be told)."""
    if holder.controller != socket.gethostname() or holder.pid <= 0:
        return False
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _ask(target: Any, command: str, op_hash: str | None = None) -> dict[str, Any]:
    """Run ``command`` with the operation's connector arguments (sudo for a non-root login); its JSON answer."""
    arguments = connector_arguments(target.state, target, op_hash or target.executing_op_hash)
    ran = run_on_host(target, command, arguments)
    lines = ran.stdout_lines
    if not ran.ok:
        return {"result": "error", "error": ran.failure}
    if not lines:
        return {"result": "error", "error": "no answer (is python3 installed?)"}
    try:
        return dict(json.loads(lines[-1]))
    except ValueError:
        return {"result": "error", "error": lines[-1]}


def _held_message(holder: LockHolder, path: str) -> str:
    return (f"{path} is held by {holder.describe()}: stopping before any change. Wait for that run to finish, or "
            f"remove {path} on the node if it is gone")


@operation(is_idempotent=False)
def run_lock(stage: str, path: str = LOCK_PATH, lease: int = LEASE_S):
    """This run holds the node's run lock from here on: taken by the first call, renewed by the later ones.

    + stage: the stage about to start (for messages)
    + path: the lock file on the node
    + lease: seconds the lock stays valid without renewal

    Another run's valid lock fails the node (only it) before anything changed, naming the holder; a stale one is
    taken over with a warning. Never a change: a converged node still runs with no change, and ``--dry`` takes no
    lock (it changes nothing).

    .. code:: python

        lock.run_lock(name="Run lock", stage="preflight")
    """
    target = this_host()
    if target.executing_op_hash is None:  # planning: nothing runs, nothing to guard
        return
    me = this_run(target)
    answer = _ask(target, lock_command("take", me, path, lease))
    if answer["result"] == "held":
        holder = LockHolder.from_json(answer.get("holder"))
        if not pid_gone(holder):
            yield fail_command(_held_message(holder, path))
            return
        answer = _ask(target, lock_command("takeover", me, path, lease, holder.run_id))
        if answer["result"] == "held":  # renewed or taken by a third run meanwhile
            yield fail_command(_held_message(LockHolder.from_json(answer.get("holder")), path))
            return
    if answer["result"] == "error":
        yield fail_command(f"cannot take the run lock {path} before {stage}: {answer.get('error')}")
        return
    if answer["result"] in ("expired", "dead"):
        why = "its lease ran out" if answer["result"] == "expired" else "its process is gone"
        holder = LockHolder.from_json(answer.get("holder"))
        target.log_styled(f"took over the run lock {path} from {holder.describe()} ({why})", fg="yellow",
                          log_func=logger.warning)


def release(target: Any, op_hash: str | None = None, path: str = LOCK_PATH) -> str:
    """Release ``target``'s run lock if this run holds it; the node's answer (``released``, ``not-held``, ...)."""
    me: LockHolder | None = getattr(target, _RUN_ATTR, None)
    if me is None:
        return "not-held"
    return str(_ask(target, lock_command("release", me, path), op_hash)["result"])


@operation(is_idempotent=False)
def run_unlock(path: str = LOCK_PATH):
    """The run is over on this node: its run lock goes (only if this run holds it). Never a change.

    + path: the lock file on the node

    .. code:: python

        lock.run_unlock(name="Release the run lock")
    """
    target = this_host()
    if target.executing_op_hash is None:
        return
    if release(target, path=path) not in ("released", "not-held"):
        target.log_styled(f"could not release the run lock {path}; the next run takes it over once it is stale",
                          fg="yellow", log_func=logger.warning)
    return
    yield  # an operation is a generator


class ReleaseOnFailure(BaseStateCallback):
    """pyinfra's stand-in for ``finally``: a node that fails an operation (after its retries) releases its lock.

    Its later operations, the release included, never run; the lock would otherwise stay until it is stale.
    """

    def operation_host_error(self, state: Any, host: Any, op_hash: str,  # type: ignore[override]
                             retry_count: int = 0, max_retries: int = 0) -> None:
        """Release ``host``'s run lock once the operation has failed for good."""
        if retry_count < max_retries or getattr(host, _RUN_ATTR, None) is None:
            return
        try:
            release(host, op_hash)
        except (OSError, TimeoutError) as exc:  # the connection is gone: the stale rules apply
            logger.warning(f"{host.name}: run lock not released ({exc}); the next run takes it over once stale")


def release_on_failure(state: Any) -> None:
    """Register :class:`ReleaseOnFailure` with ``state`` once."""
    if not any(isinstance(h, ReleaseOnFailure) for h in state.callback_handlers):
        state.add_callback_handler(ReleaseOnFailure())
