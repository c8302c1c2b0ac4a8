"""``rollout``: plan a rolling change, run it, or show where each node stands.

    gpu-provision rollout [run|plan|status] [INVENTORY] [--cluster FILE] [--limit NODE]... [--max-parallel N]
                          [--max-unavailable N|P%] [--retry-failed] [--json]

``plan`` compares every node with the cluster file (one probe per node, as ``drift``), classes each change by what
it disrupts, reads each node's recorded state and shows the batches the run would take; nothing is changed. ``run`` (the default) carries the plan out: changes that
disrupt nothing on every node at once, the others in batches with each node cordoned, its GPU jobs waited for,
its GPU pods evicted (or drained), its deploy run (a reboot when needed and allowed), verified and uncordoned only
when verification passed; each node's state is recorded as the ``gpu-provision.io/rollout-state`` label (or a
state file outside Kubernetes). Ctrl-C lets the nodes in flight reach a safe state and stops. ``status`` shows the
recorded states. See docs/rollout.md.

Exit status: plan: 0 nothing to roll, 1 changes planned; run: 0 every node done, 1 a node failed or nodes were
left (stopped at max_unavailable, interrupted); status: 0 every node done or untouched, 1 a node failed or is in
progress; 2 in every action: a node not reached or not fully compared, or a bad cluster file.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from gpu_provision.commands.args import add_command, add_fleet_options, emit, progress, say, use_cluster
from gpu_provision.startup import fleet_process

ACTIONS = ("run", "plan", "status", "prepare", "finish")

if TYPE_CHECKING:
    from gpu_provision.rollout.engine import Mode


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rollout`` command."""
    p = add_command(
        sub, "rollout", "roll a change across the fleet in batches: cordon, wait for GPU jobs, evict, change, "
        "verify, uncordon (plan: show the batches; status: recorded states)",
        "run (the default): compare every node with the cluster file, change the nodes whose changes disrupt "
        "nothing all at once, and the others in batches of at most max_parallel nodes and max_unavailable nodes "
        "of a node group, each cordoned, its GPU jobs waited for (rollout.wait_for_jobs), its GPU pods evicted "
        "through the Eviction API (PodDisruptionBudgets respected) or drained, its deploy run (rebooting when "
        "needed and allowed by driver.reboot and the kernel guard), verified, and uncordoned only when "
        "verification passed. A failed node stays cordoned with the reason; once failed nodes reach "
        "max_unavailable the rollout stops; running it again resumes (--retry-failed retries failed nodes). "
        "plan: the changes, their classes (none, runtime-restart, gpu-idle, reboot) and the batches, nothing "
        "changed. status: each node's recorded state (label gpu-provision.io/rollout-state, or "
        "/var/lib/gpu-provision/rollout-state.json outside Kubernetes).",
        ["gpu-provision rollout plan --cluster site/cluster.yaml",
         "gpu-provision rollout --cluster site/cluster.yaml --max-parallel 2 --max-unavailable 50%",
         "gpu-provision rollout run inventory.py --limit gpu-01,gpu-02 --retry-failed",
         "gpu-provision rollout status --cluster site/cluster.yaml --json"],
        findings="changes planned; a node failed or left; a node failed or in progress",
        errors="a node not reached or not fully compared, or a bad cluster file")
    p.add_argument("action", nargs="?", default="run", metavar="{run,plan,status,prepare,finish}",
                   help="run (default): carry the rollout out; plan: show it; status: the recorded states; "
                        "prepare: one batch up to apply-required (cordoned, jobs waited for, pods evicted) for "
                        "operators who then run the deploy with pyinfra; finish: verify those nodes and uncordon "
                        "the ones that pass")
    add_fleet_options(p, "seconds each remote command may run (default: the node's ssh.probe_timeout for the "
                         "probe and ssh.command_timeout for its change)")
    p.add_argument("--max-parallel", type=int, default=None, metavar="N",
                   help="nodes changed at once (default: the cluster file's rollout.max_parallel)")
    p.add_argument("--max-unavailable", default=None, metavar="N|P%",
                   help="nodes of a node group down at once, a count or a percentage (default: the cluster "
                        "file's rollout.max_unavailable)")
    p.add_argument("--retry-failed", action="store_true",
                   help="roll nodes an earlier run left in upgrade-failed again (default: skip them; they still "
                        "count against max_unavailable)")
    p.add_argument("--stage", action="append", default=None, metavar="STAGE",
                   help="roll only this stage's changes (repeatable; default: GPU_PROVISION_STAGES, else every "
                        "stage); verification always follows")
    p.add_argument("--poll", type=float, default=5.0, metavar="SECONDS",
                   help="seconds between two looks at the pods or containers a node waits for (default: 5)")
    p.add_argument("--report-dir", default="reports/verify",
                   help="where each node's verification report is kept (default: %(default)s)")
    # None until read: ``rollout INVENTORY`` and ``rollout ACTION INVENTORY`` are told apart by it.
    p.set_defaults(handler=run, inventory=None)


def _action(args: argparse.Namespace) -> str:
    """The action, with ``rollout INVENTORY`` read as ``rollout run INVENTORY``."""
    from gpu_provision.errors import GpuProvisionError

    action = str(args.action)
    if action not in ACTIONS:
        if args.inventory is not None:
            raise GpuProvisionError(f"rollout: unknown action {action!r} (actions: {', '.join(ACTIONS)})")
        args.inventory, action = action, "run"
    if args.inventory is None:
        args.inventory = "inventory.py"
    return action


def run(args: argparse.Namespace) -> int:
    """Plan, run or show the rollout; returns the exit status."""
    with fleet_process():
        from gpu_provision.drift import check_fleet, load_stages
        from gpu_provision.errors import GpuProvisionError
        from gpu_provision.fleet import load_inventory, settings_from
        from gpu_provision.inventory import cluster_for
        from gpu_provision.rollout.batches import parse_max_unavailable
        from gpu_provision.rollout.plan import plan_rollout
        from gpu_provision.stages.pipeline import chosen_stages

    action = _action(args)
    stages = [s for s in chosen_stages(args.stage) if s != "verify"]
    if args.max_parallel is not None and args.max_parallel < 1:
        raise GpuProvisionError(f"--max-parallel: expected at least 1, got {args.max_parallel}")
    if args.poll <= 0:
        raise GpuProvisionError(f"--poll: expected more than 0 seconds, got {args.poll}")
    unavailable = None if args.max_unavailable is None else parse_max_unavailable(args.max_unavailable)
    use_cluster(args)
    settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout, args.limit)
    inventory = load_inventory(args.inventory)
    hosts = list(inventory)
    if not hosts:
        raise GpuProvisionError(f"{args.inventory}: the inventory has no hosts")
    cluster = cluster_for(hosts[0])
    if action == "status":
        return _status(args, cluster, settings)
    if action == "finish":
        return _roll(args, cluster, settings, None, unavailable, stages, "finish")
    report = check_fleet(inventory, load_stages(stages), settings, progress=progress())
    if action == "plan":
        plan = plan_rollout(report, cluster, args.max_parallel, unavailable, _recorded(args, cluster, settings, report),
                            args.retry_failed)
        emit(args, plan.to_json(), plan.render)
        return plan.exit_status
    plan = plan_rollout(report, cluster, args.max_parallel, unavailable)
    return _roll(args, cluster, settings, plan, unavailable, stages, "prepare" if action == "prepare" else "run")


def _roll(args: argparse.Namespace, cluster, settings, plan, unavailable,  # type: ignore[no-untyped-def]
          stages: list[str], mode: Mode) -> int:
    """Carry the plan out with SIGINT turned into a safe stop."""
    import contextlib

    from gpu_provision.fleet import chosen_hosts
    from gpu_provision.rollout.engine import interrupt_on_sigint
    from gpu_provision.rollout.execute import Fleet, policy_of, roll

    fleet = Fleet(args.inventory, cluster, settings, report_dir=args.report_dir, stages=stages)
    policy = policy_of(cluster, args.max_parallel, unavailable, poll=args.poll)
    with contextlib.ExitStack() as stack:
        report = roll(fleet, plan, policy, args.retry_failed, log=say,
                      on_rollout=lambda r: stack.enter_context(interrupt_on_sigint(r)), mode=mode,
                      names=[h.name for h in chosen_hosts(fleet.inventory, settings.limit)])
    emit(args, report.to_json(), report.render)
    from gpu_provision.rollout.execute import UNREAD

    unread = any(o.result == "skipped" and o.reason.startswith(UNREAD) for o in report.outcomes.values())
    if unread or (plan is not None and any(n.status in ("not-checked", "error") for n in plan.nodes)):
        return 2
    return report.exit_status


def _recorded(args: argparse.Namespace, cluster, settings, report):  # type: ignore[no-untyped-def]
    """The recorded rollout states of the nodes drift compared, read as the run reads them, so the plan's batches
    are the run's (done nodes left, nodes in progress first, failed nodes counting against their group)."""
    from gpu_provision.rollout.execute import Fleet

    # A node not fully compared is not rolled whatever its record says: it is not asked again (and with no node
    # left, nothing is asked: an empty --limit would mean every host).
    names = [n.name for n in report.nodes if n.status in ("in-sync", "drift")]
    return Fleet(args.inventory, cluster, settings, report_dir=None).recorded(names) if names else {}


def _status(args: argparse.Namespace, cluster, settings) -> int:  # type: ignore[no-untyped-def]
    """Each node's recorded rollout state."""
    from gpu_provision.fleet import chosen_hosts
    from gpu_provision.rollout.execute import Fleet
    from gpu_provision.rollout.status import status_doc, status_exit, status_text

    fleet = Fleet(args.inventory, cluster, settings, report_dir=None)
    names = [h.name for h in chosen_hosts(fleet.inventory, settings.limit)]
    kube = fleet.kube
    nodes = {n["metadata"]["name"]: n for n in fleet.on_control_plane(kube.nodes)} if kube else {}
    recorded = fleet.recorded(names)
    doc = status_doc(names, recorded, nodes)
    emit(args, doc, lambda: status_text(doc))
    return status_exit(doc)
