"""How operations share one probe per phase and see each other's changes during execution."""

from __future__ import annotations

from fakehost import FakeHost, run_op

from gpu_provision.desired import FileWant, UnitWant
from gpu_provision.operations import commands, files, services
from gpu_provision.state import Request

DAEMON = "/etc/docker/daemon.json"


def test_prepare_reads_once_and_predicts_the_restart() -> None:
    host = FakeHost({"files": {}, "services": {"docker.service": {"loaded": True, "enabled": "enabled",
                                                                  "active": "active"}}})
    commands.use_request(host, Request(files={DAEMON}, contents={DAEMON}, units={"docker.service"}))
    assert run_op(files.wants, host, [FileWant(DAEMON, merge="json", keys={"a": 1})])
    assert run_op(services.wants, host, [UnitWant("docker.service", restart_on=(DAEMON,))]) == [
        "systemctl reset-failed docker.service 2>/dev/null; systemctl restart docker.service"]
    # Prepare time: nothing ran, so with the node's whole request registered the second operation is served from
    # the first one's answer.
    assert host.probes == 1


def test_execution_reprobes_after_a_change_only() -> None:
    host = FakeHost({"files": {}}, executing=True)
    run_op(files.wants, host, [FileWant("/etc/a", content="a\n")])
    run_op(files.wants, host, [FileWant("/etc/b", content="b\n")])
    assert host.probes == 2


def test_registered_request_is_read_by_the_first_operation() -> None:
    host = FakeHost({"files": {}}, executing=True)
    seen: list[Request] = []
    host.get_fact = lambda fact, arg, **bounds: (seen.append(Request.from_json(arg)), {"files": {}})[1]  # type: ignore[method-assign]
    commands.use_request(host, Request(packages={"docker.io"}, units={"docker.service"}))
    run_op(files.wants, host, [FileWant("/etc/a", content="a\n")])
    assert seen[0].packages == {"docker.io"} and "/etc/a" in seen[0].files


def test_guarded_command_runs_only_when_needed() -> None:
    request = Request(files={"/etc/cdi/nvidia.yaml"})
    missing = FakeHost({"files": {}})
    present = FakeHost({"files": {"/etc/cdi/nvidia.yaml": {"exists": True, "type": "file"}}})

    def needed(state):  # type: ignore[no-untyped-def]
        return None if state.file("/etc/cdi/nvidia.yaml").exists else "missing"

    args = ("nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml", needed, request, "CDI spec present")
    assert run_op(commands.guarded, missing, *args) == ["nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml"]
    assert run_op(commands.guarded, present, *args) == []
    assert present.noops == ["CDI spec present"]
