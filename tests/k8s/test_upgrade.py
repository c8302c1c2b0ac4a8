"""A member's Kubernetes moved to the file's version in kubeadm's order (operations.kubernetes.upgrade), each step
decided from the node as the steps before left it, and the vendor facts each step carries (packages.json)."""

from __future__ import annotations

from typing import Any

import pytest
from fakehost import FakeHost, run_op

from gpu_provision.desired import PackageWant
from gpu_provision.node.probe import kubernetes as probe_section
from gpu_provision.operations.kubernetes import upgrade
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages import kubernetes as stage

#: What the vendors document (packages.json source kubeadm-upgrade): kubeadm's non-interactive flag, the command on
#: every node but the first control plane, the restart after kubelet's upgrade, kubelet's path in its unit.
VENDOR = {
    "first_control_plane": "kubeadm upgrade apply --yes v{version}",
    "other_nodes": "kubeadm upgrade node",
    "kubelet_restart": "systemctl daemon-reload && systemctl restart kubelet",
    "kubelet_binary": "/usr/bin/kubelet",
}


def member(kubelet: str | None, *, control_plane: bool = False, api: str | None = None, **more: Any) -> dict:
    packages = {"kubelet": {"version": kubelet, "held": True}} if kubelet else {}
    packages["kubeadm"] = {"version": kubelet, "held": True} if kubelet else {"version": None, "held": False}
    section = {"admin_conf": control_plane, "kubelet_conf": True, "api": None, "api_error": None, **more}
    if api:
        section["api"] = {"cluster_version": api, "nodes": {}, "objects": {}, "daemonsets": []}
    return {"packages": {"manager": "apt", "packages": packages}, "kubernetes": section}


@pytest.fixture(autouse=True)
def _no_pyinfra_state(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.operations import files
    monkeypatch.setattr(files, "changed_paths", lambda _host: set())
    monkeypatch.setattr(upgrade, "changed_paths", lambda _host: set())


def test_the_steps_are_the_vendors() -> None:
    data = package_data()["kubernetes"]["upgrade"]
    assert data["source"] in package_data()["sources"]
    assert {k: data[k] for k in VENDOR} == VENDOR
    assert upgrade.apply_command("1.36.4") == "kubeadm upgrade apply --yes v1.36.4"


def test_the_control_plane_is_upgraded_only_where_it_runs_another_version() -> None:
    older = FakeHost(member("1.36.3-1.1", control_plane=True, api="v1.36.3"), name="cp-01")
    (command,) = run_op(upgrade.control_plane, older, version="1.36.4", first_control_plane="cp-01")
    assert command.startswith("kubeadm upgrade apply --yes v1.36.4 > /var/log/gpu-provision-kubeadm-upgrade.log")
    assert "tail -n 20" in command  # a failure shows kubeadm's last lines
    # A patch back is the same step (kubeadm's policy allows it).
    newer = FakeHost(member("1.36.4-1.1", control_plane=True, api="v1.36.4"), name="cp-01")
    assert run_op(upgrade.control_plane, newer, version="1.36.3", first_control_plane="cp-01")[0].startswith(
        "kubeadm upgrade apply --yes v1.36.3 ")
    there = FakeHost(member("1.36.4-1.1", control_plane=True, api="v1.36.4"), name="cp-01")
    assert run_op(upgrade.control_plane, there, version="1.36.4", first_control_plane="cp-01") == []
    assert there.noops == ["control plane runs v1.36.4"]
    worker = FakeHost(member("1.36.3-1.1"), name="gpu-01")
    assert run_op(upgrade.control_plane, worker, version="1.36.4", first_control_plane="cp-01") == []
    fresh = FakeHost({"kubernetes": {"admin_conf": False, "kubelet_conf": False}}, name="cp-01")
    assert run_op(upgrade.control_plane, fresh, version="1.36.4", first_control_plane="cp-01") == []
    assert fresh.noops == ["no cluster yet: kubeadm init makes it at the file's version"]


def test_an_api_that_does_not_answer_fails_the_step_with_its_error() -> None:
    down = FakeHost(member("1.36.3-1.1", control_plane=True, api_error="connection refused"), executing=True,
                    name="cp-01")
    (command,) = run_op(upgrade.control_plane, down, version="1.36.4", first_control_plane="cp-01")
    assert "connection refused" in str(command)


def test_other_members_take_the_new_configuration_until_their_kubelet_is_there() -> None:
    behind = FakeHost(member("1.36.3-1.1"), name="gpu-01")
    (command,) = run_op(upgrade.node, behind, version="1.36.4", first_control_plane="cp-01")
    assert command.startswith("kubeadm upgrade node > /var/log/gpu-provision-kubeadm-upgrade.log 2>&1")
    for host in (FakeHost(member("1.36.4-1.1"), name="gpu-01"),  # there already
                 FakeHost({"packages": {"manager": "apt", "packages": {}},  # not joined: kubeadm join does it
                           "kubernetes": {"admin_conf": False, "kubelet_conf": False}}, name="gpu-01"),
                 FakeHost(member("1.36.3-1.1", control_plane=True), name="cp-01")):  # apply did this one
        assert run_op(upgrade.node, host, version="1.36.4", first_control_plane="cp-01") == []


def test_kubeadm_moves_first_only_on_a_member_that_upgrades() -> None:
    want = PackageWant("kubeadm", "1.36.4", held=True)
    behind = FakeHost(member("1.36.3-1.1"), name="gpu-01")
    commands = run_op(upgrade.kubeadm_first, behind, want=want)
    assert any("install 'kubeadm=1.36.4-*'" in c for c in commands)
    assert not any("kubelet" in c for c in commands)  # kubelet and kubectl only after kubeadm upgrade node
    assert commands[-1] == "apt-mark hold kubeadm"
    fresh = FakeHost({"packages": {"manager": "apt", "packages": {}},
                      "kubernetes": {"admin_conf": False, "kubelet_conf": False}}, name="gpu-01")
    assert run_op(upgrade.kubeadm_first, fresh, want=want) == []
    assert fresh.noops == ["no member's upgrade waits on kubeadm"]


def test_kubelet_is_restarted_only_while_it_runs_a_replaced_binary() -> None:
    stale = FakeHost(member("1.36.4-1.1", kubelet_restart_due=True))
    assert run_op(upgrade.kubelet_restarted, stale) == ["systemctl daemon-reload && systemctl restart kubelet"]
    for due in (False, None):
        assert run_op(upgrade.kubelet_restarted, FakeHost(member("1.36.4-1.1", kubelet_restart_due=due))) == []


def test_the_probe_compares_the_binary_with_the_running_process(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Any) -> None:
    binary = tmp_path / "kubelet"
    binary.write_text("")
    changed = binary.stat().st_ctime
    boot = 1_000_000

    def show(started_at: float, pid: int = 4242):
        mono = int((started_at - boot) * 1e6)
        return lambda argv, **_: (0, f"MainPID={pid}\nExecMainStartTimestampMonotonic={mono}\n")

    monkeypatch.setattr(probe_section, "_boot_time", lambda: boot)
    monkeypatch.setattr(probe_section._command, "run", show(changed - 60))
    assert probe_section._kubelet_restart_due(str(binary)) is True
    monkeypatch.setattr(probe_section._command, "run", show(changed + 5))
    assert probe_section._kubelet_restart_due(str(binary)) is False
    monkeypatch.setattr(probe_section._command, "run", show(changed - 60, pid=0))  # not running
    assert probe_section._kubelet_restart_due(str(binary)) is None
    monkeypatch.setattr(probe_section._command, "run", show(changed - 60))
    assert probe_section._kubelet_restart_due(str(tmp_path / "absent")) is None


def test_drift_names_a_kubelet_on_a_replaced_binary(example) -> None:
    from gpu_provision.state import NodeStateData

    node = example.node("h200-01")
    raw = member("1.36.4-1.1", kubelet_restart_due=True)
    raw["system"] = {"swaps": [], "sysctls": dict(stage.SYSCTLS)}
    found = [d for d in stage.extra_differences(node, example, NodeStateData(raw)) if d.kind == "kubelet-restart"]
    assert [(d.item, d.actual) for d in found] == [("/usr/bin/kubelet", "replaced since kubelet started")]
