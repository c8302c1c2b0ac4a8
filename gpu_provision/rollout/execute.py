"""The rollout over SSH: the engine (:mod:`.engine`) wired to the fleet runner, the nodes' deploy and kubectl.

* Kubernetes: ``kubectl --kubeconfig=/etc/kubernetes/admin.conf`` on the cluster file's first control-plane node,
  one command per call through :func:`gpu_provision.fleet.run_fleet` on an inventory of its own (so its connection
  never meets the nodes being changed), one call at a time.
* Nodes: each batch is one fleet run over its nodes; each node's work runs in its own greenlet on its own
  connection: the state file, GPU containers, the GPU clients (the units :mod:`gpu_provision.node.mig.holders`
  names) stopped around the change, the node's deploy (every stage but ``verify``, through
  :meth:`gpu_provision.fleet.Reached.apply`, which reboots the node when its driver needs it and the kernel guard
  allows it), then the ``verify`` stage as the verification phase.
* What to roll: drift's differences per node (:func:`gpu_provision.rollout.plan.plan_rollout`) and each node's
  recorded state, so a re-run skips done nodes, resumes nodes left in progress and retries failed ones only when
  asked.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyinfra.api import Inventory
from pyinfra.context import ctx_host, ctx_state

from gpu_provision.errors import GpuProvisionError
from gpu_provision.fleet import FleetSettings, Reached, load_inventory, run_fleet
from gpu_provision.node.mig.holders import MODE_HOLDERS, holding, start_again_command, states_command
from gpu_provision.operations.commands import connector_arguments
from gpu_provision.operations.reboot import reboot_and_wait
from gpu_provision.operations.remote import HostCommand, run_on_host
from gpu_provision.rollout.containers import LIST_COMMAND, Container, parse_listing
from gpu_provision.rollout.engine import Mode, NodeOps, Outcome, Policy, Report, RolloutNode, RolloutRun
from gpu_provision.rollout.kubectl import KubectlApi
from gpu_provision.rollout.plan import RolloutPlan, group_sizes, targets_of
from gpu_provision.rollout.progress import (
    IN_PROGRESS,
    STATE_FILE,
    NodeProgress,
    progress_from_file,
    progress_from_node,
)
from gpu_provision.spec.model import Cluster

KUBECONFIG = "/etc/kubernetes/admin.conf"
#: kubectl's words when the API server does not answer; such calls are retried for API_RETRY_S seconds.
API_DOWN = "The connection to the server"
API_RETRY_S = 120.0
#: Seconds a batch's nodes wait for the control plane's connection before they fail.
CONTROL_PLANE_WAIT_S = 120.0
#: Stages the change runs by default; ``verify`` is the verification phase after it.
CHANGE_STAGES = ("preflight", "driver", "runtime", "toolkit", "permissions", "mig", "kubernetes")
#: Never stopped on a control-plane node: its kubelet runs the API server's static pods.
CONTROL_PLANE_KEEPS = ("kubelet.service",)


def policy_of(cluster: Cluster, max_parallel: int | None = None,
              max_unavailable: int | str | None = None, poll: float = 5.0) -> Policy:
    """The engine's policy from the cluster file's ``rollout`` settings and the command line's overrides."""
    r = cluster.rollout
    return Policy(max_parallel=r.max_parallel if max_parallel is None else max_parallel,
                  max_unavailable=r.max_unavailable if max_unavailable is None else max_unavailable,
                  wait_timeout=r.wait_for_jobs.timeout, pod_selector=r.wait_for_jobs.pod_selector,
                  deletion_timeout=r.pod_deletion.timeout, deletion_force=r.pod_deletion.force,
                  deletion_empty_dir=r.pod_deletion.delete_empty_dir, drain_enable=r.drain.enable,
                  drain_timeout=r.drain.timeout, drain_force=r.drain.force,
                  drain_empty_dir=r.drain.delete_empty_dir, gpu_containers=r.gpu_containers, poll=poll)


def _run(reached: Reached, command: str, stdin: str | None = None) -> HostCommand:
    """One shell command on a reached host with the host's connector arguments (sudo, its password and user when
    the login is not root)."""
    host = reached.host
    with ctx_state.use(reached.state), ctx_host.use(host):
        arguments = {k: v for k, v in connector_arguments(reached.state, host, None).items()
                     if k not in ("_stdin", "_timeout")}
        return run_on_host(host, command, arguments, stdin=stdin)


class HostKubectl:
    """``kubectl`` on the control-plane node of the fleet run in progress (its connection, set by :class:`Fleet`),
    one call at a time.

    pyinfra keeps the running State in one process-wide context, so two fleet runs at once would mix their
    operations: kubectl therefore rides on the batch's own run instead of a run of its own. While the API server
    does not answer (a control plane rebooting with its change), a call is retried for up to
    :data:`API_RETRY_S` seconds.
    """

    def __init__(self, control_plane: str) -> None:
        self.control_plane = control_plane
        self.reached: Reached | None = None
        self.lock = threading.Lock()
        self.calls = 0

    def __call__(self, args: list[str], stdin: str | None = None) -> tuple[int, str, str]:
        """Run ``kubectl ARGS``; exit status 255 with the reason when the control plane is not connected."""
        command = f"kubectl --kubeconfig={KUBECONFIG} " + " ".join(shlex.quote(a) for a in args)
        deadline = time.monotonic() + API_RETRY_S
        while True:
            if self.reached is None:
                return 255, "", f"control plane {self.control_plane} is not connected"
            with self.lock:
                self.calls += 1
                ran = _run(self.reached, command, stdin)
            if ran.ok or API_DOWN not in ran.stderr or time.monotonic() >= deadline:
                status = ran.exit_status if ran.exit_status is not None else (0 if ran.ok else 255)
                return status, ran.stdout, ran.stderr if ran.ok else ran.failure
            time.sleep(2)


@dataclass
class RemoteNode:
    """:class:`gpu_provision.rollout.engine.NodeOps` on one reached node."""

    reached: Reached
    control_plane: bool = False
    report_dir: str | None = None
    stages: tuple[str, ...] = CHANGE_STAGES

    def recorded(self) -> NodeProgress | None:
        """The state file, None when there is none."""
        ran = _run(self.reached, f"cat {STATE_FILE} 2>/dev/null || true")
        return progress_from_file(ran.stdout) if ran.ok and ran.stdout.strip() else None

    def record(self, record: NodeProgress) -> None:
        """Write the state file atomically (a temporary file in the same directory, synced, renamed)."""
        folder = STATE_FILE.rsplit("/", 1)[0]
        ran = _run(self.reached, f"umask 022 && mkdir -p {folder} && cat > {STATE_FILE}.tmp && "
                                        f"sync {STATE_FILE}.tmp && mv -f {STATE_FILE}.tmp {STATE_FILE}",
                          stdin=json.dumps(record.to_json()) + "\n")
        if not ran.ok:
            raise GpuProvisionError(f"cannot write {STATE_FILE}: {ran.failure}")

    def gpu_containers(self) -> list[Container]:
        """GPU containers running through docker or ctr."""
        ran = _run(self.reached, LIST_COMMAND)
        if not ran.ok:
            raise GpuProvisionError(f"cannot list the containers: {ran.failure}")
        return parse_listing(ran.stdout)

    def stop_container(self, container: Container) -> None:
        """Stop one container as its runtime does."""
        ran = _run(self.reached, container.stop_command())
        if not ran.ok:
            raise GpuProvisionError(f"cannot stop {container.describe()}: {ran.failure}")

    def _holders(self) -> list[str]:
        units = sorted(MODE_HOLDERS)
        held = holding(dict(zip(units, _run(self.reached, states_command(units)).stdout.split(), strict=False)))
        keep = CONTROL_PLANE_KEEPS if self.control_plane else ()
        return [u for u in MODE_HOLDERS if u in held and u not in keep]

    def change(self) -> str | None:
        """Stop the GPU clients, run the deploy's stages but verify on this node (rebooting before it when a
        reboot is pending and the kernel guard allows it, and after it when the change needs one or the guard
        allows it only then), start the clients again."""
        from gpu_provision.stages.pipeline import gpu_node

        stopped = self._holders()
        if stopped:
            ran = _run(self.reached, "systemctl stop " + " ".join(stopped))
            if not ran.ok:
                return f"cannot stop the GPU clients {', '.join(stopped)}: {ran.failure}"
        reason = self._reboot_when_needed(before_change=True)
        if reason is None:
            try:
                _, ok = self.reached.apply(gpu_node, stages=list(self.stages), report_dir=None)
            except Exception as exc:  # pyinfra raises for a host it lost
                ok, reason = False, f"{type(exc).__name__}: {exc}"
            else:
                reason = None if ok else self._deploy_failure()
        if reason is None:
            reason = self._reboot_when_needed()
        if stopped:
            # Started again unless the change already did (or a reboot did, for enabled units).
            _run(self.reached, start_again_command(stopped))
        return reason

    def _deploy_failure(self) -> str:
        """``the deploy failed at OPERATION: COMMAND exited N: last lines`` (as the fleet's command log told it)."""
        log = self.reached.log
        at = f" at {log.failed_operation}" if log.failed_operation else ""
        return f"the deploy failed{at}: {log.last_failure or 'see its output'}"

    def _reboot_when_needed(self, before_change: bool = False) -> str | None:
        """Reboot the node when its driver needs it (the driver stage's own reason, read now), the file allows it
        (``driver.reboot: allowed``) and the kernel guard does; None when done or not needed, else why not
        (:func:`gpu_provision.stages.driver.reboot_step`: before the change, a guard refusal waits for it).

        The deploy decides its reboot from what it read before changing anything, so a driver it upgrades is
        loaded only at a later reboot: the rollout takes that reboot here, while the node is out of service.
        """
        from gpu_provision.facts.state import invalidate, node_state
        from gpu_provision.inventory import cluster_for, node_for
        from gpu_provision.stages import driver

        if "driver" not in self.stages:
            return None
        host = self.reached.host
        with ctx_state.use(self.reached.state), ctx_host.use(host):
            node, cluster = node_for(host), cluster_for(host)
            if not driver.managed(node):
                return None
            invalidate(host)
            state = node_state(host, driver.request(node, cluster))
        step = driver.reboot_step(node, state, before_change=before_change)
        if step.reboot is None:
            return step.refused
        return reboot(self.reached, step.reboot)

    def verify(self) -> str | None:
        """The verification phase: the ``verify`` stage's report; None when the node passed."""
        from gpu_provision.verify.collect import verify_host

        report = verify_host(self.reached, report_dir=self.report_dir)
        if report is None or report.get("status") == "pass":
            return None
        failed = next((c for c in report.get("checks", []) if c.get("status") == "fail"), None)
        if failed:
            return f"{failed.get('id')}: {failed.get('reason')}"
        return str(report.get("error") or f"status {report.get('status')}")


def reboot(reached: Reached, why: str) -> str | None:
    """Reboot a reached node and wait until it is back and booted; None when it is, else why not
    (:func:`gpu_provision.operations.reboot.reboot_and_wait`, the deploy's own reboot)."""
    return reboot_and_wait(reached.host, why, lambda command: _run(reached, command))


def control_plane_of(cluster: Cluster, inventory: Inventory) -> str | None:
    """The first control-plane node of the cluster file that the inventory has, None when Kubernetes is off."""
    if not cluster.kubernetes.enabled:
        return None
    names = {h.name for h in inventory}
    for node in cluster.nodes:
        if node.role == "control-plane" and node.name in names:
            return node.name
    raise GpuProvisionError("kubernetes is enabled but the inventory has no control-plane node to run kubectl on")


class Fleet:
    """The rollout's view of the fleet: the node inventory, kubectl on a control plane, and the batch runner."""

    def __init__(self, inventory_path: str, cluster: Cluster, settings: FleetSettings,
                 report_dir: str | None = "reports/verify", stages: Iterable[str] = CHANGE_STAGES) -> None:
        self.inventory = load_inventory(inventory_path)
        self.stages = tuple(s for s in stages if s != "verify")
        self.cluster = cluster
        self.settings = settings
        self.report_dir = report_dir
        control_plane = control_plane_of(cluster, self.inventory)
        self.kubectl = HostKubectl(control_plane) if control_plane else None
        self.kube = KubectlApi(self.kubectl) if self.kubectl else None

    def node_settings(self, names: Iterable[str]) -> FleetSettings:
        """The runner's settings for a batch: those nodes, no bound on a command (a deploy may reboot)."""
        return FleetSettings(self.settings.parallel, self.settings.connect_timeout, None, tuple(names))

    def on_control_plane(self, func: Callable[[], Any]) -> Any:
        """``func()`` with kubectl connected (a fleet run over the control plane alone); ``func()`` alone outside
        Kubernetes."""
        kubectl = self.kubectl
        if kubectl is None:
            return func()

        def connected(reached: Reached) -> Any:
            kubectl.reached = reached
            try:
                return func()
            finally:
                kubectl.reached = None

        run = run_fleet(self.inventory, connected, self.node_settings([kubectl.control_plane]))
        result = run.hosts[0]
        if result.unreached is not None:
            raise GpuProvisionError(f"control plane {kubectl.control_plane}: {result.unreached}")
        return result.value

    def run_batch(self, names: list[str], work: Callable[[str, NodeOps], Outcome]) -> Mapping[str, Outcome]:
        """One fleet run over ``names`` (and the control plane, for kubectl), each node's ``work`` on its own
        connection."""
        roles = {n.name: n.role for n in self.cluster.nodes}
        kubectl = self.kubectl
        control_plane = kubectl.control_plane if kubectl else None
        hosts = list(names) + ([control_plane] if control_plane and control_plane not in names else [])
        connected, finished = threading.Event(), threading.Event()

        def progress(done: int, failed: int, total: int) -> None:
            # Every node finished (or was not reached): the control plane's connection may go.
            if done + failed >= len(names):
                finished.set()

        def one(reached: Reached) -> Outcome | None:
            name = reached.host.name
            if kubectl is not None and name == control_plane:
                kubectl.reached = reached
                connected.set()
                if name not in names:
                    finished.wait()
                    return None
            if kubectl is not None and not connected.wait(CONTROL_PLANE_WAIT_S):
                return Outcome(name, "failed", f"control plane {control_plane} not reached: kubectl cannot run")
            return work(name, RemoteNode(reached, roles.get(name) == "control-plane", self.report_dir, self.stages))

        try:
            run = run_fleet(self.inventory, one, self.node_settings(hosts), progress=progress)
        finally:
            if kubectl is not None:
                kubectl.reached = None
        return {r.name: r.value if r.value is not None else Outcome(r.name, "failed", r.unreached or "not reached")
                for r in run.hosts if r.name in names}

    def recorded(self, names: Iterable[str],
                 node_objects: list[dict[str, Any]] | None = None) -> dict[str, NodeProgress | None]:
        """Each node's recorded state: Node labels for Kubernetes nodes, the state file for the others.

        + node_objects: the Node objects when the caller has read them already (else they are read here)
        """
        names = list(names)
        out: dict[str, NodeProgress | None] = {}
        if self.kube is not None:
            if node_objects is None:
                node_objects = self.on_control_plane(self.kube.nodes)
            nodes = {n["metadata"]["name"]: n for n in node_objects}
            for name in names:
                out[name] = progress_from_node(nodes[name]) if name in nodes else None
            return out

        def read(reached: Reached) -> NodeProgress | None:
            return RemoteNode(reached).recorded()

        run = run_fleet(self.inventory, read, FleetSettings(self.settings.parallel, self.settings.connect_timeout,
                                                            self.settings.command_timeout, tuple(names)))
        for result in run.hosts:
            if result.unreached is not None:
                out[result.name] = NodeProgress("unknown", result.unreached)
            else:
                out[result.name] = result.value
        return out


#: How a node whose recorded state could not be read is reported.
UNREAD = "state not read"


def finish_targets(cluster: Cluster, names: Iterable[str], recorded: Mapping[str, NodeProgress | None]) -> list[RolloutNode]:
    """``finish``: the nodes a previous ``prepare`` (or run) left in progress, whatever drift says now."""
    by_name = {n.name: n for n in cluster.nodes}
    out = []
    for name in names:
        previous, node = recorded.get(name), by_name.get(name)
        if node is not None and previous is not None and previous.state in IN_PROGRESS:
            out.append(RolloutNode(name, "gpu-idle", node.group or "", node.role == "control-plane",
                              cluster.kubernetes.enabled, previous=previous))
    return out


def labels_left_to_the_control_plane(cluster: Cluster, names: Iterable[str], control_plane: str,
                                     node_objects: Iterable[dict[str, Any]]) -> list[str]:
    """One warning per node among ``names`` whose Kubernetes labels differ from the file's, when the run leaves out
    ``control_plane``: only the first control plane's deploy applies node labels and the device plugin's configs, so
    such a node's change (a MIG strategy change, say) cannot pass its verification until that node is rolled too."""
    names = set(names)
    if control_plane in names:
        return []
    from gpu_provision.k8s.nodes import labels

    have = {o["metadata"]["name"]: o["metadata"].get("labels") or {} for o in node_objects}
    out = []
    for node in cluster.nodes:
        if node.name not in names or node.name not in have:
            continue
        wrong = [f"{k}: {have[node.name].get(k, '(absent)')} -> {v}" for k, v in sorted(labels(node).items())
                 if have[node.name].get(k) != v]
        if wrong:
            out.append(f"warning: {node.name}'s labels differ from the file ({'; '.join(wrong)}) and only the "
                       f"first control plane {control_plane} applies them: add {control_plane} to --limit, or the "
                       f"node's verification fails")
    return out


def roll(fleet: Fleet, plan: RolloutPlan | None, policy: Policy, retry_failed: bool, log: Callable[[str], None],
         on_rollout: Callable[[RolloutRun], Any] | None = None, mode: Mode = "run",
         names: Iterable[str] = ()) -> Report:
    """Run the rollout the plan describes (``finish`` needs no plan: the nodes' recorded states say what is
    left); ``on_rollout`` receives the engine first (to hook SIGINT)."""
    names = [n.name for n in plan.nodes] if plan is not None else list(names)
    # The Node objects are read once: for the recorded states and for the labels a limited run leaves out.
    node_objects = fleet.on_control_plane(fleet.kube.nodes) if fleet.kube is not None else None
    recorded = fleet.recorded(names, node_objects)
    skipped: list[RolloutNode] = []
    if plan is None:
        roll_targets = finish_targets(fleet.cluster, names, recorded)
        skipped = [RolloutNode(n, "none", skip=f"{UNREAD}: {r.reason}") for n, r in recorded.items()
                   if r is not None and r.state == "unknown"]
    else:
        roll_targets, skipped = targets_of(plan, fleet.cluster, recorded, retry_failed)
    if node_objects is not None and fleet.kubectl is not None:
        for line in labels_left_to_the_control_plane(fleet.cluster, [t.name for t in roll_targets],
                                                     fleet.kubectl.control_plane, node_objects):
            log(line)
    rollout = RolloutRun(policy, fleet.kube, fleet.run_batch, log=log, mode=mode)
    if on_rollout is not None:
        on_rollout(rollout)
    report = rollout.run(roll_targets, group_sizes(fleet.cluster), skipped)
    for name in names if plan is not None else ():
        if name not in report.outcomes:
            report.outcomes[name] = Outcome(name, "done", "nothing to change")
    report.outcomes = {n: report.outcomes[n] for n in names if n in report.outcomes}
    report.settings = {"max_parallel": policy.max_parallel, "max_unavailable": policy.max_unavailable,
                       "retry_failed": retry_failed}
    return report
