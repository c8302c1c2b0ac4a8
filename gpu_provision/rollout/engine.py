"""The rollout itself: batches of nodes, and each node's way through its states (:mod:`.states`).

Nodes whose changes disrupt nothing are changed all at once first, as a deploy does (no cordon, no states). The
others go in batches: control-plane nodes alone, then at most ``max_parallel`` nodes that never take more than
``max_unavailable`` nodes of one node group down, counting the nodes that failed (they stay cordoned, so they are
unavailable): once the failed nodes of a group reach its ``max_unavailable`` no further node of it starts, and the
rollout stops when no node can start. Nodes a previous run left in progress go first.

Per node, on Kubernetes: cordon → wait for the GPU jobs (``wait_for_jobs``: a pod selector, a timeout, 0 waits
without limit) → evict the GPU pods still there through the Eviction API (PodDisruptionBudgets respected; bare pods
only with ``force``, emptyDir pods only with ``delete_empty_dir``; a timeout) → drain when that did not empty the
node and ``drain.enable`` → the change (GPU clients stopped, the node's deploy, a reboot when needed and allowed,
clients started again) → verification → uncordon only when verification passed. Outside Kubernetes, GPU containers
found through the runtime are refused, waited for or stopped (``gpu_containers``). Any failure records
``upgrade-failed`` with the reason and leaves the node cordoned.

:meth:`RolloutRun.interrupt` (the command's SIGINT handler) starts no further batch; a node still waiting for its jobs
or pods backs out (uncordoned again unless it was unschedulable before, state ``upgrade-required``), and a node
already being changed finishes its change, verification and uncordon. The Kubernetes API and the nodes are reached
through :class:`KubeApi` and :class:`NodeOps`, so the same machine runs against a cluster over SSH and against a
fake one in tests.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from gpu_provision.rollout import pods as gpu_pods
from gpu_provision.rollout.batches import next_batch, split
from gpu_provision.rollout.containers import Container
from gpu_provision.rollout.disruption import Disruption
from gpu_provision.rollout.progress import CHANGING, DONE, FAILED, NodeProgress

REPORT_VERSION = "gpu-provision.rollout/v1"
Result = Literal["done", "prepared", "failed", "backed-out", "not-started", "skipped"]
#: ``run``: every step; ``prepare``: one batch up to ``apply-required`` (the operator runs the deploy);
#: ``finish``: nodes in ``apply-required`` or later, from verification to ``upgrade-done``.
Mode = Literal["run", "prepare", "finish"]


class KubeApi(Protocol):
    """What the rollout asks of the Kubernetes API (:mod:`gpu_provision.rollout.kubectl` over SSH in use)."""

    def recorded(self, node: str) -> NodeProgress | None:
        """The node's recorded rollout state."""

    def record(self, node: str, record: NodeProgress) -> None:
        """Record the node's state (label, annotations)."""

    def cordon(self, node: str) -> bool:
        """Mark the node unschedulable; whether it already was."""

    def uncordon(self, node: str) -> None:
        """Mark the node schedulable."""

    def pods(self, node: str) -> list[dict[str, Any]]:
        """Every pod bound to the node."""

    def evict(self, pod: dict[str, Any]) -> str | None:
        """Ask the Eviction API to evict ``pod``: None when accepted (or the pod is gone), else why not."""

    def drain(self, node: str, timeout: int, force: bool, delete_empty_dir: bool) -> str | None:
        """Drain the node (every pod but DaemonSet pods, through the Eviction API): None when done, else why not."""


class NodeOps(Protocol):
    """What the rollout does on one node (over its SSH connection in use)."""

    def recorded(self) -> NodeProgress | None:
        """The node's state file."""

    def record(self, record: NodeProgress) -> None:
        """Write the node's state file."""

    def gpu_containers(self) -> list[Container]:
        """Running containers that hold a GPU (nodes outside Kubernetes)."""

    def stop_container(self, container: Container) -> None:
        """Stop one container through its runtime."""

    def change(self) -> str | None:
        """Stop the GPU clients, run the node's deploy (rebooting when needed and allowed), start the clients
        again: None when it succeeded, else why not."""

    def verify(self) -> str | None:
        """The verification phase: None when the node passed, else the first failure."""


@dataclass(frozen=True)
class RolloutNode:
    """A node the rollout takes: its group and role, whether it is in Kubernetes, what its changes disrupt, and
    the state a previous run left it in."""

    name: str
    disruption: Disruption
    group: str = ""
    control_plane: bool = False
    kubernetes: bool = False
    changes: tuple[str, ...] = ()
    previous: NodeProgress | None = None
    #: Why the node is not rolled at all (not reached, not compared), when it is not.
    skip: str = ""

    @property
    def resumed(self) -> bool:
        """Whether a previous run left this node between its first and last step (or failed)."""
        return self.previous is not None and self.previous.state != DONE

    @property
    def skipped_because(self) -> str:
        """Why a node an earlier run failed (or one not compared) is not rolled now."""
        earlier = (self.previous.reason if self.previous else "") or "no reason recorded"
        return self.skip or f"failed in an earlier run ({earlier}); --retry-failed retries it"


@dataclass(frozen=True)
class Policy:
    """The rollout's settings (the cluster file's ``rollout`` with the command line's overrides)."""

    max_parallel: int = 1
    max_unavailable: int | str = "25%"
    wait_timeout: int = 0
    pod_selector: str | None = None
    deletion_timeout: int = 300
    deletion_force: bool = False
    deletion_empty_dir: bool = False
    drain_enable: bool = False
    drain_timeout: int = 300
    drain_force: bool = False
    drain_empty_dir: bool = False
    gpu_containers: str = "refuse"
    #: Seconds between two looks at the pods or containers a node waits for.
    poll: float = 5.0


@dataclass
class Outcome:
    """How one node's rollout ended: result, reason, the states it went through (with UTC epoch seconds), the
    batch it was in, and how long it was unavailable (cordoned, or being changed)."""

    name: str
    result: Result = "not-started"
    reason: str = ""
    batch: int | None = None
    states: list[tuple[str, float]] = field(default_factory=list)
    unavailable_s: float = 0.0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The outcome as a JSON object."""
        return {"name": self.name, "result": self.result, "reason": self.reason or None, "batch": self.batch,
                "states": [{"state": s, "at": round(t, 3)} for s, t in self.states],
                "unavailable_s": round(self.unavailable_s, 3), "seconds": round(self.seconds, 3)}


@dataclass
class Report:
    """The whole rollout: every node's outcome, the batches as run, why it stopped early (if it did)."""

    outcomes: dict[str, Outcome]
    batches: list[tuple[int, tuple[str, ...]]] = field(default_factory=list)
    stopped: str = ""
    interrupted: bool = False
    seconds: float = 0.0
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def exit_status(self) -> int:
        """0 every node done (or nothing to do), 1 a node failed or nodes were left (stopped, interrupted)."""
        results = {o.result for o in self.outcomes.values()}
        return 1 if results & {"failed", "backed-out", "not-started", "skipped"} else 0

    def to_json(self) -> dict[str, Any]:
        """The report as one JSON object."""
        counts = Counter(o.result for o in self.outcomes.values())
        return {"version": REPORT_VERSION, "settings": self.settings, "seconds": round(self.seconds, 3),
                "interrupted": self.interrupted, "stopped": self.stopped or None,
                "summary": {r: counts.get(r, 0) for r in ("done", "prepared", "failed", "backed-out", "not-started",
                                                          "skipped")},
                "batches": [{"index": i, "nodes": list(n)} for i, n in self.batches],
                "nodes": [o.to_json() for o in self.outcomes.values()], "exit_status": self.exit_status}

    def render(self) -> str:
        """The report as text: one line per node, then why the rollout stopped."""
        width = max((len(n) for n in self.outcomes), default=4)
        lines = [f"rollout: {len(self.batches)} batch{'es' if len(self.batches) != 1 else ''} in "
                 f"{self.seconds:.1f}s"]
        for o in self.outcomes.values():
            where = f"batch {o.batch}" if o.batch is not None else "-"
            extra = f", unavailable {o.unavailable_s:.1f}s" if o.unavailable_s else ""
            lines.append(f"{o.name:<{width}}  {o.result:<11}  {where}{extra}" + (f": {o.reason}" if o.reason else ""))
        if self.interrupted:
            lines.append("interrupted: nodes in flight reached a safe state; run again to resume")
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        return "\n".join(lines)


#: Runs ``work`` on each named node (in parallel), returning each node's outcome; an unreached node's outcome says so.
RunBatch = Callable[[list[str], Callable[[str, NodeOps], Outcome]], Mapping[str, Outcome]]


class Failed(Exception):
    """A node's rollout cannot go on: the reason is recorded with ``upgrade-failed``."""


class BackOut(Exception):
    """An interruption reached a node before any change: it is put back in service."""


class RolloutRun:
    """One rollout run over ``targets`` (see the module's docstring)."""

    def __init__(self, policy: Policy, kube: KubeApi | None, run_batch: RunBatch,
                 log: Callable[[str], None] = lambda line: None, clock: Callable[[], float] = time.time,
                 mode: Mode = "run") -> None:
        self.policy, self.kube, self.run_batch, self.log, self.clock = policy, kube, run_batch, log, clock
        self.mode = mode
        self._interrupted = threading.Event()

    # -- control -------------------------------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Start no further batch; nodes waiting for jobs back out, nodes being changed finish (SIGINT)."""
        if not self._interrupted.is_set():
            self.log("interrupted: letting the nodes in flight reach a safe state (no new batch starts)")
        self._interrupted.set()

    @property
    def interrupted(self) -> bool:
        """Whether :meth:`interrupt` was called."""
        return self._interrupted.is_set()

    def _sleep(self, seconds: float) -> None:
        self._interrupted.wait(seconds)

    # -- the run ---------------------------------------------------------------------------------------------------

    def run(self, targets: Iterable[RolloutNode], group_sizes: Mapping[str, int] | None = None,
            failed_before: Iterable[RolloutNode] = ()) -> Report:
        """Roll ``targets`` (in inventory order) as the mode says; ``failed_before`` are nodes a previous run
        failed and this one does not retry: they count against their group's ``max_unavailable``."""
        started = self.clock()
        targets, failed_before = list(targets), list(failed_before)
        report = Report({t.name: Outcome(t.name) for t in targets})
        for t in failed_before:
            report.outcomes[t.name] = Outcome(t.name, "skipped", t.skipped_because)
        if self.mode == "finish":
            self._finish_all(targets, report)
        else:
            sizes = dict(group_sizes or Counter(t.group for t in [*targets, *failed_before]))
            failed = Counter(t.group for t in failed_before)
            quiet, waiting = split(targets)
            by_name = {t.name: t for t in targets}
            if self.mode == "prepare":
                self._prepare_quiet(quiet, report)
            else:
                self._quiet_batch(quiet, by_name, report)
            self._disruptive_batches(waiting, by_name, report, sizes, failed)
        report.seconds = self.clock() - started
        return report

    def _prepare_quiet(self, quiet: list[RolloutNode], report: Report) -> None:
        """``prepare``: nodes whose changes disrupt nothing need no safety steps; the operator's deploy takes them."""
        for t in quiet:
            report.outcomes[t.name] = Outcome(t.name, "prepared", "its changes disrupt nothing: no cordon needed")

    def _quiet_batch(self, quiet: list[RolloutNode], by_name: Mapping[str, RolloutNode], report: Report) -> None:
        """``run``: batch 0, every node whose changes disrupt nothing, at once and in service."""
        if quiet and not self.interrupted:
            report.batches.append((0, tuple(t.name for t in quiet)))
            self._run(0, [t.name for t in quiet], by_name, report.outcomes, quiet=True)

    def _disruptive_batches(self, waiting: list[RolloutNode], by_name: Mapping[str, RolloutNode], report: Report,
                            sizes: Mapping[str, int], failed: Counter[str]) -> None:
        """The batches :func:`gpu_provision.rollout.batches.next_batch` gives, each with the failures so far, until
        none is left, none can start or the run is interrupted; ``prepare`` takes only the first."""
        outcomes, policy = report.outcomes, self.policy
        number = 0
        while waiting and not self.interrupted:
            batch, blocked = next_batch(waiting, policy.max_parallel, policy.max_unavailable, sizes, failed)
            if not batch:
                report.stopped = blocked
                for t in waiting:
                    outcomes[t.name].reason = blocked
                break
            number += 1
            report.batches.append((number, tuple(t.name for t in batch)))
            self._run(number, [t.name for t in batch], by_name, outcomes, quiet=False)
            waiting = [t for t in waiting if t not in batch]
            failed.update(t.group for t in batch if outcomes[t.name].result == "failed")
            if self.mode == "prepare":
                for t in waiting:
                    outcomes[t.name].reason = "prepare takes one batch: finish this one first"
                break
        if self.interrupted:
            report.interrupted = True
            for t in waiting:
                if outcomes[t.name].result == "not-started":
                    outcomes[t.name].reason = "interrupted before its batch"

    def _finish_all(self, targets: list[RolloutNode], report: Report) -> None:
        """``finish``: every node whose change was made (state ``apply-required`` or later), all at once."""
        ready = [t for t in targets if t.previous is not None and t.previous.state in CHANGING]
        for t in targets:
            if t not in ready:
                state = t.previous.state if t.previous else "never rolled"
                report.outcomes[t.name] = Outcome(t.name, "skipped", f"not prepared ({state})")
        if ready and not self.interrupted:
            report.batches.append((1, tuple(t.name for t in ready)))
            self._run(1, [t.name for t in ready], {t.name: t for t in ready}, report.outcomes, quiet=False)

    def _run(self, number: int, names: list[str], by_name: Mapping[str, RolloutNode], outcomes: dict[str, Outcome],
             quiet: bool) -> None:
        self.log(f"batch {number}: {', '.join(names)}" + (" (changes that disrupt nothing)" if quiet else ""))

        def work(name: str, ops: NodeOps) -> Outcome:
            target, outcome = by_name[name], outcomes[name]
            outcome.batch = number
            begun = self.clock()
            if quiet:
                self._quiet(target, ops, outcome)
            else:
                self._roll(target, ops, outcome)
            outcome.seconds = self.clock() - begun
            return outcome

        results = self.run_batch(names, work)
        for name in names:
            got = results.get(name)
            if got is not None and got is not outcomes[name]:  # not reached: the runner's own outcome
                got.batch = number
                outcomes[name] = got

    # -- one node --------------------------------------------------------------------------------------------------

    def _quiet(self, target: RolloutNode, ops: NodeOps, outcome: Outcome) -> None:
        """A node whose changes disrupt nothing: its deploy and verification, in service throughout."""
        try:
            reason = ops.change() or ops.verify()
        except Exception as exc:  # a lost connection, an API error: reported, never raised past the batch
            reason = f"{type(exc).__name__}: {exc}"
        outcome.result, outcome.reason = ("failed", reason) if reason else ("done", "")
        self.log(f"{target.name}: {outcome.result}" + (f": {reason}" if reason else ""))

    def _set(self, target: RolloutNode, ops: NodeOps, outcome: Outcome, state: str, reason: str = "",
             keep_cordoned: bool = False) -> None:
        now = self.clock()
        record = NodeProgress(state, reason, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)), keep_cordoned)
        if target.kubernetes and self.kube is not None:
            self.kube.record(target.name, record)
        else:
            ops.record(record)
        outcome.states.append((state, now))
        self.log(f"{target.name}: {state}" + (f": {reason}" if reason else ""))

    def _roll(self, target: RolloutNode, ops: NodeOps, outcome: Outcome) -> None:
        keep = bool(target.previous and target.previous.keep_cordoned)
        unavailable_from: float | None = None
        try:
            if self.mode == "finish":
                self._after_change(target, ops, outcome, keep)
                return
            self._set(target, ops, outcome, "upgrade-required", "; ".join(target.changes[:3]), keep)
            if target.kubernetes and self.kube is not None:
                self._set(target, ops, outcome, "cordon-required", keep_cordoned=keep)
                unavailable_from = self.clock()
                already = self.kube.cordon(target.name)
                if already and not target.resumed:
                    keep = True
                    self._set(target, ops, outcome, "cordon-required", "the node was unschedulable before",
                              keep_cordoned=True)
                self._free_from_pods(target, ops, outcome, keep)
            else:
                unavailable_from = self._free_from_containers(target, ops, outcome)
            if unavailable_from is None:
                unavailable_from = self.clock()
            self._set(target, ops, outcome, "apply-required", keep_cordoned=keep)
            if self.mode == "prepare":
                outcome.result = "prepared"
                return
            reason = ops.change()
            if reason:
                raise Failed(f"the change failed: {reason}")
            self._after_change(target, ops, outcome, keep)
        except BackOut as exc:
            outcome.result, outcome.reason = "backed-out", str(exc)
            try:
                if target.kubernetes and self.kube is not None and not keep:
                    self.kube.uncordon(target.name)
                self._set(target, ops, outcome, "upgrade-required", str(exc), keep_cordoned=keep)
            except Exception as err:
                outcome.reason += f" (putting it back failed: {type(err).__name__}: {err})"
        except Exception as exc:
            reason = str(exc) if isinstance(exc, Failed) else f"{type(exc).__name__}: {exc}"
            outcome.result, outcome.reason = "failed", reason
            try:
                self._set(target, ops, outcome, FAILED, reason, keep_cordoned=keep)
            except Exception as err:
                outcome.reason += f" (recording it failed too: {type(err).__name__}: {err})"
        finally:
            if unavailable_from is not None:
                outcome.unavailable_s = self.clock() - unavailable_from

    def _after_change(self, target: RolloutNode, ops: NodeOps, outcome: Outcome, keep: bool) -> None:
        """Verification, then uncordon only when it passed: ``upgrade-done``."""
        self._set(target, ops, outcome, "validation-required", keep_cordoned=keep)
        reason = ops.verify()
        if reason:
            raise Failed(f"verification failed: {reason}")
        if target.kubernetes and self.kube is not None:
            self._set(target, ops, outcome, "uncordon-required", keep_cordoned=keep)
            if not keep:
                self.kube.uncordon(target.name)
        self._set(target, ops, outcome, DONE)
        outcome.result = "done"

    def _check_interrupt(self, target: RolloutNode) -> None:
        if self.interrupted and (target.previous is None or target.previous.state not in CHANGING):
            raise BackOut("interrupted before any change; run again to resume")

    def _deadline(self, timeout: int) -> float | None:
        return None if timeout <= 0 else self.clock() + timeout

    def _free_from_pods(self, target: RolloutNode, ops: NodeOps, outcome: Outcome, keep: bool) -> None:
        """Wait for the GPU jobs, then evict the GPU pods left, then drain if allowed; Failed when pods stay."""
        assert self.kube is not None
        policy, name = self.policy, target.name
        self._set(target, ops, outcome, "wait-for-jobs-required", keep_cordoned=keep)
        deadline = self._deadline(policy.wait_timeout)
        while True:
            jobs = gpu_pods.jobs(self.kube.pods(name), policy.pod_selector)
            if not jobs:
                break
            self._check_interrupt(target)
            if deadline is not None and self.clock() >= deadline:
                self.log(f"{name}: {len(jobs)} GPU job(s) still running after {policy.wait_timeout}s")
                break
            self._sleep(policy.poll)
        if not gpu_pods.holding(self.kube.pods(name)):
            return
        self._set(target, ops, outcome, "pod-deletion-required", keep_cordoned=keep)
        deadline = self._deadline(policy.deletion_timeout)
        why: dict[str, str] = {}
        while True:
            holding = gpu_pods.holding(self.kube.pods(name))
            if not holding:
                return
            why = {}
            for pod in holding:
                if (pod.get("metadata") or {}).get("deletionTimestamp"):
                    why[gpu_pods.ref(pod)] = "terminating"
                    continue
                refusal = gpu_pods.eviction_refusal(pod, policy.deletion_force, policy.deletion_empty_dir)
                blocked = refusal or self.kube.evict(pod)
                if blocked:
                    why[gpu_pods.ref(pod)] = blocked
            self._check_interrupt(target)
            rules_only = all(gpu_pods.eviction_refusal(p, policy.deletion_force, policy.deletion_empty_dir)
                             for p in holding)
            if rules_only or (deadline is not None and self.clock() >= deadline):
                break
            self._sleep(min(policy.poll, 5.0))
        left = "; ".join(f"{ref}: {text}" for ref, text in why.items()) or "GPU pods still on the node"
        if not policy.drain_enable:
            raise Failed(f"GPU pods not evicted (drain.enable is off): {left}")
        self._set(target, ops, outcome, "drain-required", left, keep_cordoned=keep)
        error = self.kube.drain(name, policy.drain_timeout, policy.drain_force, policy.drain_empty_dir)
        if error:
            raise Failed(f"drain failed: {error}")
        holding = gpu_pods.holding(self.kube.pods(name))
        if holding:
            raise Failed(f"GPU pods still on the node after the drain: {', '.join(map(gpu_pods.ref, holding))}")

    def _free_from_containers(self, target: RolloutNode, ops: NodeOps, outcome: Outcome) -> float | None:
        """Nodes outside Kubernetes: refuse, wait for or stop the GPU containers; when the node stops serving."""
        policy = self.policy
        containers = ops.gpu_containers()
        if not containers:
            return None
        listed = ", ".join(c.describe() for c in containers)
        if policy.gpu_containers == "refuse":
            raise Failed(f"GPU containers are running ({listed}); rollout.gpu_containers is refuse")
        if policy.gpu_containers == "wait":
            self._set(target, ops, outcome, "wait-for-jobs-required", listed)
            deadline = self._deadline(policy.wait_timeout)
            while containers:
                self._check_interrupt(target)
                if deadline is not None and self.clock() >= deadline:
                    raise Failed(f"GPU containers still running after {policy.wait_timeout}s: "
                                 f"{', '.join(c.describe() for c in containers)}")
                self._sleep(policy.poll)
                containers = ops.gpu_containers()
            return None
        self._set(target, ops, outcome, "pod-deletion-required", listed)
        began = self.clock()
        for container in containers:
            ops.stop_container(container)
        left = ops.gpu_containers()
        if left:
            raise Failed(f"GPU containers still running after stopping them: {', '.join(c.describe() for c in left)}")
        return began


@contextlib.contextmanager
def interrupt_on_sigint(rollout: RolloutRun) -> Iterator[None]:
    """While the block runs, SIGINT (Ctrl-C) calls :meth:`RolloutRun.interrupt` instead of raising
    KeyboardInterrupt, so nodes in flight reach a safe state; the previous handler is restored after."""
    previous = signal.getsignal(signal.SIGINT)

    def handler(signum: int, frame: Any) -> None:
        rollout.interrupt()

    signal.signal(signal.SIGINT, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
