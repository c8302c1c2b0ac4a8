"""The rollout's state machine and batches against a fake cluster (tests/rollout/rollout_fakes.py): fast, no SSH."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from rollout_fakes import FakeKube, FakeNode, gpu_pod, thread_batches

from gpu_provision.rollout.containers import Container
from gpu_provision.rollout.engine import Policy, RolloutNode, RolloutRun, interrupt_on_sigint
from gpu_provision.rollout.progress import NodeProgress

NAMES = ["gpu-01", "gpu-02", "gpu-03", "gpu-04"]
FULL = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "apply-required", "validation-required",
        "uncordon-required", "upgrade-done"]


def setup(names=NAMES, kube=True, **node_kwargs):
    cluster = FakeKube(names) if kube else None
    log: list[tuple[str, str]] = []
    lock = threading.Lock()
    nodes = {n: FakeNode(n, cluster, log, lock, **node_kwargs.get(n, {})) for n in names}
    return cluster, nodes, log


def targets(names=NAMES, kube=True, disruption="gpu-idle", previous=None, group=""):
    previous = previous or {}
    return [RolloutNode(n, disruption, group=group, kubernetes=kube, changes=("package nvidia-driver",),
                   previous=previous.get(n)) for n in names]


def policy(**kw):
    return Policy(**{"max_parallel": 2, "max_unavailable": 2, "poll": 0.001, **kw})


def test_jobs_are_waited_for_and_nodes_roll_two_at_a_time_through_every_state():
    cluster, nodes, log = setup()
    for i, name in enumerate(NAMES):
        cluster.all_pods.append(gpu_pod(f"job-{i}", name, runs=3 + i))
    run_batch = thread_batches(nodes)
    report = RolloutRun(policy(), cluster, run_batch).run(targets())
    assert run_batch.batches == [["gpu-01", "gpu-02"], ["gpu-03", "gpu-04"]]
    assert report.exit_status == 0, report.render()
    for name in NAMES:
        assert cluster.history[name] == FULL
        assert nodes[name].changed == 1
        assert nodes[name].changed_with_gpu_pods == []  # no node changed while its job ran
        assert not cluster.unschedulable(name)
        assert report.outcomes[name].result == "done"
        assert report.outcomes[name].unavailable_s >= 0
    assert cluster.evictions == []  # the jobs finished by themselves
    # The second batch starts only when the first is verified and back in service.
    order = [(n, what) for n, what in log if what == "verify" or what == "change"]
    first_batch_done = max(i for i, (n, w) in enumerate(order) if n in NAMES[:2] and w == "verify")
    second_batch_start = min(i for i, (n, w) in enumerate(order) if n in NAMES[2:] and w == "change")
    assert first_batch_done < second_batch_start


def test_pods_left_after_the_wait_are_evicted_through_the_eviction_api():
    cluster, nodes, _ = setup(NAMES[:1])
    cluster.all_pods.append(gpu_pod("long", "gpu-01"))  # never finishes by itself
    report = RolloutRun(policy(wait_timeout=1, poll=0.01), cluster, thread_batches(nodes)).run(targets(NAMES[:1]))
    assert report.outcomes["gpu-01"].result == "done", report.render()
    assert cluster.evictions == [("default", "long")]
    assert cluster.history["gpu-01"] == FULL[:3] + ["pod-deletion-required"] + FULL[3:]
    assert nodes["gpu-01"].changed_with_gpu_pods == []


def test_a_disruption_budget_that_forbids_eviction_fails_the_node_and_stops_at_max_unavailable():
    cluster, nodes, _ = setup()
    cluster.all_pods.append(gpu_pod("guarded", "gpu-01", labels={"app": "serve"}))
    cluster.pdbs.append({"selector": {"app": "serve"}, "minAvailable": 1})
    report = RolloutRun(policy(max_parallel=1, max_unavailable=1, wait_timeout=1, deletion_timeout=1, poll=0.05),
                     cluster, thread_batches(nodes)).run(targets())
    first = report.outcomes["gpu-01"]
    assert first.result == "failed"
    assert "PodDisruptionBudget" in first.reason and "drain.enable is off" in first.reason
    assert cluster.history["gpu-01"][-1] == "upgrade-failed"
    assert cluster.nodes["gpu-01"]["metadata"]["annotations"]["gpu-provision.io/rollout-reason"] == first.reason
    assert cluster.unschedulable("gpu-01")  # a failed node stays cordoned
    assert nodes["gpu-01"].changed == 0
    assert cluster.all_pods  # the budget was respected
    for name in NAMES[1:]:
        assert report.outcomes[name].result == "not-started"
        assert nodes[name].changed == 0 and cluster.history[name] == []
    assert "reach max_unavailable 1" in report.stopped
    assert report.exit_status == 1


def test_drain_runs_when_enabled_and_pod_deletion_did_not_empty_the_node():
    cluster, nodes, _ = setup(NAMES[:1])
    cluster.all_pods.append(gpu_pod("guarded", "gpu-01", labels={"app": "serve"}))
    cluster.pdbs.append({"selector": {"app": "serve"}, "minAvailable": 1})
    # The drain itself is refused by the same budget: the node fails with the drain's reason.
    report = RolloutRun(policy(wait_timeout=1, deletion_timeout=1, drain_enable=True, poll=0.05), cluster,
                     thread_batches(nodes)).run(targets(NAMES[:1]))
    assert cluster.drained == ["gpu-01"]
    assert cluster.history["gpu-01"][-2:] == ["drain-required", "upgrade-failed"]
    assert report.outcomes["gpu-01"].reason.startswith("drain failed")
    cluster.pdbs.clear()
    cluster.history["gpu-01"].clear()
    retried = RolloutRun(policy(wait_timeout=1, deletion_timeout=1, drain_enable=True, poll=0.05), cluster,
                      thread_batches(nodes)).run(targets(NAMES[:1], previous={"gpu-01": cluster.recorded("gpu-01")}))
    assert retried.outcomes["gpu-01"].result == "done"
    assert nodes["gpu-01"].changed == 1 and nodes["gpu-01"].changed_with_gpu_pods == []


@pytest.mark.parametrize("force", [False, True])
def test_a_bare_gpu_pod_is_evicted_only_with_force(force):
    cluster, nodes, _ = setup(NAMES[:1])
    cluster.all_pods.append(gpu_pod("bare", "gpu-01", owner=None))
    report = RolloutRun(policy(wait_timeout=1, deletion_force=force, poll=0.01), cluster,
                     thread_batches(nodes)).run(targets(NAMES[:1]))
    if force:
        assert report.outcomes["gpu-01"].result == "done"
        assert cluster.evictions == [("default", "bare")]
    else:
        assert report.outcomes["gpu-01"].result == "failed"
        assert "no controller manages it" in report.outcomes["gpu-01"].reason
        assert cluster.evictions == [] and nodes["gpu-01"].changed == 0


def test_empty_dir_pods_need_delete_empty_dir():
    cluster, nodes, _ = setup(NAMES[:1])
    cluster.all_pods.append(gpu_pod("scratch", "gpu-01", empty_dir=True))
    report = RolloutRun(policy(wait_timeout=1, poll=0.01), cluster, thread_batches(nodes)).run(targets(NAMES[:1]))
    assert "emptyDir" in report.outcomes["gpu-01"].reason
    report = RolloutRun(policy(wait_timeout=1, deletion_empty_dir=True, poll=0.01), cluster,
                     thread_batches(nodes)).run(targets(NAMES[:1], previous={"gpu-01": cluster.recorded("gpu-01")}))
    assert report.outcomes["gpu-01"].result == "done"


def test_a_node_that_fails_verification_stays_cordoned_with_the_reason():
    cluster, nodes, _ = setup(NAMES[:2], **{"gpu-02": {"verify_fails": "driver: 580.126.09 loaded"}})
    report = RolloutRun(policy(), cluster, thread_batches(nodes)).run(targets(NAMES[:2]))
    assert report.outcomes["gpu-01"].result == "done"
    assert report.outcomes["gpu-02"].result == "failed"
    assert cluster.history["gpu-02"][-2:] == ["validation-required", "upgrade-failed"]
    assert cluster.unschedulable("gpu-02") and not cluster.unschedulable("gpu-01")
    assert "580.126.09" in cluster.recorded("gpu-02").reason


def test_an_injected_failure_stops_the_rollout_and_a_rerun_resumes_without_redoing_done_nodes():
    cluster, nodes, _ = setup(**{"gpu-02": {"change_fails": "apt-get exited 100"}})
    first = RolloutRun(policy(max_unavailable=1, max_parallel=2), cluster, thread_batches(nodes)).run(targets())
    assert [first.outcomes[n].result for n in NAMES] == ["done", "failed", "not-started", "not-started"]
    assert cluster.unschedulable("gpu-02")
    # Re-run: done nodes have nothing left to change (not targets); the failed one is skipped but still counts.
    previous = {n: cluster.recorded(n) for n in NAMES}
    skipped = [t for t in targets(previous=previous) if t.name == "gpu-02"]
    rest = [t for t in targets(previous=previous) if t.name in ("gpu-03", "gpu-04")]
    again = RolloutRun(policy(max_unavailable=1), cluster, thread_batches(nodes)).run(rest, failed_before=skipped)
    assert again.outcomes["gpu-02"].result == "skipped" and "--retry-failed" in again.outcomes["gpu-02"].reason
    assert again.outcomes["gpu-03"].result == "not-started" and again.stopped
    # Retrying it once fixed: it resumes first, then the others go.
    nodes["gpu-02"].change_fails = None
    retry = RolloutRun(policy(max_unavailable=1), cluster, thread_batches(nodes)).run(
        [*skipped, *rest])
    assert [retry.outcomes[n].result for n in ("gpu-02", "gpu-03", "gpu-04")] == ["done"] * 3
    assert retry.batches[0] == (1, ("gpu-02",))
    assert nodes["gpu-01"].changed == 1 and nodes["gpu-02"].changed == 2
    assert not any(cluster.unschedulable(n) for n in NAMES)


def test_a_node_left_mid_change_is_resumed_first_and_keeps_an_operator_cordon():
    cluster, nodes, _ = setup(NAMES[:2])
    cluster.cordon("gpu-02")
    left = NodeProgress("validation-required", keep_cordoned=True)
    ts = [RolloutNode("gpu-01", "gpu-idle", kubernetes=True), RolloutNode("gpu-02", "none", kubernetes=True, previous=left)]
    run_batch = thread_batches(nodes)
    report = RolloutRun(policy(max_parallel=1), cluster, run_batch).run(ts)
    assert run_batch.batches == [["gpu-02"], ["gpu-01"]]
    assert report.exit_status == 0
    assert cluster.unschedulable("gpu-02")  # it was unschedulable before the rollout: left so
    assert not cluster.unschedulable("gpu-01")


def test_a_node_already_cordoned_by_an_operator_is_not_uncordoned():
    cluster, nodes, _ = setup(NAMES[:1])
    cluster.cordon("gpu-01")
    report = RolloutRun(policy(), cluster, thread_batches(nodes)).run(targets(NAMES[:1]))
    assert report.outcomes["gpu-01"].result == "done"
    assert cluster.unschedulable("gpu-01")


def test_changes_that_disrupt_nothing_go_everywhere_at_once_without_cordon():
    cluster, nodes, _ = setup()
    run_batch = thread_batches(nodes)
    report = RolloutRun(policy(max_parallel=1), cluster, run_batch).run(targets(disruption="none"))
    assert run_batch.batches == [NAMES]
    assert report.batches == [(0, tuple(NAMES))]
    assert all(cluster.history[n] == [] and nodes[n].changed == 1 for n in NAMES)


def test_an_unreachable_node_fails_and_counts_against_max_unavailable():
    cluster, nodes, _ = setup()
    report = RolloutRun(policy(max_parallel=1, max_unavailable=1), cluster,
                     thread_batches(nodes, unreachable=frozenset({"gpu-01"}))).run(targets())
    assert report.outcomes["gpu-01"].result == "failed" and "unreachable" in report.outcomes["gpu-01"].reason
    assert all(report.outcomes[n].result == "not-started" for n in NAMES[1:])


def test_percent_budgets_are_per_node_group():
    cluster, nodes, _ = setup()
    ts = [RolloutNode(n, "gpu-idle", group="a" if i < 2 else "b", kubernetes=True) for i, n in enumerate(NAMES)]
    run_batch = thread_batches(nodes)
    RolloutRun(policy(max_parallel=4, max_unavailable="50%"), cluster, run_batch).run(ts)
    assert run_batch.batches == [["gpu-01", "gpu-03"], ["gpu-02", "gpu-04"]]


def test_interrupt_lets_a_changing_node_finish_and_backs_out_a_waiting_one():
    cluster, nodes, _ = setup()
    cluster.all_pods.append(gpu_pod("forever", "gpu-01"))  # gpu-01 waits without limit
    holder: dict[str, RolloutRun] = {}
    nodes["gpu-02"].change_hook = lambda: holder["r"].interrupt()
    rollout = holder["r"] = RolloutRun(policy(), cluster, thread_batches(nodes))
    report = rollout.run(targets())
    assert report.interrupted
    assert report.outcomes["gpu-02"].result == "done"  # it was being changed: it finished, verified, uncordoned
    assert report.outcomes["gpu-01"].result == "backed-out"
    assert cluster.history["gpu-01"][-1] == "upgrade-required" and not cluster.unschedulable("gpu-01")
    assert nodes["gpu-01"].changed == 0
    assert [report.outcomes[n].result for n in NAMES[2:]] == ["not-started", "not-started"]
    assert report.exit_status == 1


def test_sigint_stops_after_the_nodes_in_flight_reach_a_safe_state():
    cluster, nodes, _ = setup()
    cluster.all_pods.append(gpu_pod("forever", "gpu-01"))
    nodes["gpu-02"].change_hook = lambda: os.kill(os.getpid(), signal.SIGINT)
    rollout = RolloutRun(policy(), cluster, thread_batches(nodes))
    before = signal.getsignal(signal.SIGINT)
    with interrupt_on_sigint(rollout):
        report = rollout.run(targets())
    assert signal.getsignal(signal.SIGINT) is before
    assert report.interrupted
    assert report.outcomes["gpu-02"].result == "done"
    assert report.outcomes["gpu-01"].result == "backed-out" and not cluster.unschedulable("gpu-01")
    assert all(nodes[n].changed == 0 for n in NAMES[2:])


def containers(*ids):
    return [Container("docker", i, f"trainer-{i}", "a GPU device request") for i in ids]


def test_outside_kubernetes_gpu_containers_are_refused_by_default():
    _, nodes, _ = setup(NAMES[:1], kube=False, **{"gpu-01": {"containers": containers("c1")}})
    report = RolloutRun(policy(), None, thread_batches(nodes)).run(targets(NAMES[:1], kube=False))
    assert report.outcomes["gpu-01"].result == "failed"
    assert "trainer-c1" in report.outcomes["gpu-01"].reason and "refuse" in report.outcomes["gpu-01"].reason
    assert nodes["gpu-01"].changed == 0
    assert nodes["gpu-01"].file_history == ["upgrade-required", "upgrade-failed"]


def test_outside_kubernetes_stop_stops_the_containers_before_the_change():
    _, nodes, _ = setup(NAMES[:1], kube=False, **{"gpu-01": {"containers": containers("c1", "c2")}})
    report = RolloutRun(policy(gpu_containers="stop"), None, thread_batches(nodes)).run(targets(NAMES[:1], kube=False))
    assert report.outcomes["gpu-01"].result == "done"
    assert nodes["gpu-01"].stopped == ["c1", "c2"] and nodes["gpu-01"].changed_with_gpu_pods == []
    assert nodes["gpu-01"].file_history == ["upgrade-required", "pod-deletion-required", "apply-required",
                                            "validation-required", "upgrade-done"]


def test_outside_kubernetes_wait_waits_for_the_containers_to_end():
    _, nodes, _ = setup(NAMES[:1], kube=False, **{"gpu-01": {"containers": containers("c1")}})
    node = nodes["gpu-01"]
    looks = {"n": 0}
    real = node.gpu_containers

    def ending() -> list[Container]:
        looks["n"] += 1
        if looks["n"] == 3:
            node.containers.clear()
        return real()

    node.gpu_containers = ending  # type: ignore[method-assign]
    report = RolloutRun(policy(gpu_containers="wait"), None, thread_batches(nodes)).run(targets(NAMES[:1], kube=False))
    assert report.outcomes["gpu-01"].result == "done"
    assert looks["n"] >= 3 and node.stopped == [] and node.changed_with_gpu_pods == []
    assert "wait-for-jobs-required" in node.file_history


def test_prepare_takes_one_batch_to_apply_required_and_finish_verifies_and_uncordons():
    cluster, nodes, _ = setup(**{"gpu-02": {"verify_fails": "gpu.driver_version: 580.126.09"}})
    prepared = RolloutRun(policy(), cluster, thread_batches(nodes), mode="prepare").run(targets())
    assert [prepared.outcomes[n].result for n in NAMES] == ["prepared", "prepared", "not-started", "not-started"]
    assert "finish this one first" in prepared.outcomes["gpu-03"].reason
    assert prepared.exit_status == 1
    for name in NAMES[:2]:
        assert cluster.history[name] == FULL[:4] and cluster.unschedulable(name)
        assert nodes[name].changed == 0  # the operator runs the deploy
    finishing = [RolloutNode(n, "gpu-idle", kubernetes=True, previous=cluster.recorded(n)) for n in NAMES
                 if cluster.recorded(n)]
    finished = RolloutRun(policy(), cluster, thread_batches(nodes), mode="finish").run(finishing)
    assert finished.outcomes["gpu-01"].result == "done" and not cluster.unschedulable("gpu-01")
    assert cluster.history["gpu-01"][-3:] == FULL[-3:]
    assert finished.outcomes["gpu-02"].result == "failed" and cluster.unschedulable("gpu-02")
    assert all(nodes[n].changed == 0 for n in NAMES)
