"""The node's run lock, its node-side program run for real on a scratch lock file: take, renew, refuse naming the
holder, take over a stale lock (lease run out, or the holder's process gone on this controller), release."""

from __future__ import annotations

import json
import socket
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from fakehost import FakeHost, run_op

from gpu_provision.operations import lock


class LockHost(FakeHost):
    """A fake host that runs shell commands here, as the operation at execution time would on the node."""

    def __init__(self, name: str = "node-1") -> None:
        super().__init__({}, executing=True, name=name)
        self.executing_op_hash = "op"
        self.arguments: list[dict[str, Any]] = []
        # pyinfra's per-host operation data, as the connector arguments are read from it (State.ops)
        self.state.ops = {self: {"op": SimpleNamespace(
            global_arguments={"_sudo": True, "_timeout": 30, "name": "not a connector argument"})}}

    def run_shell_command(self, command: Any, **kwargs: Any) -> tuple[bool, Any]:
        self.arguments.append(kwargs)
        done = subprocess.run(["sh", "-c", command.get_raw_value()], capture_output=True, text=True, check=False)
        return done.returncode == 0, SimpleNamespace(stdout_lines=done.stdout.splitlines(),
                                                     stderr_lines=done.stderr.splitlines())


def _take(host: LockHost, path: Path) -> list[Any]:
    return run_op(lock.run_lock, host, "preflight", path=str(path))


def test_first_run_takes_the_lock_and_a_second_stops_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "state" / "run.lock"
    first, second = LockHost(), LockHost()
    assert _take(first, path) == []
    held = json.loads(path.read_text())
    me = lock.this_run(first)
    assert held["run_id"] == me.run_id and held["controller"] == socket.gethostname() and held["pid"] == me.pid
    assert held["started"] == me.started
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    (refused,) = _take(second, path)
    assert refused.endswith("exit 1")
    assert f"held by run {me.run_id} from {me.controller} (pid {me.pid}) since {me.started}" in refused
    assert "stopping before any change" in refused
    assert json.loads(path.read_text())["run_id"] == me.run_id
    # The node-side program ran with the operation's connector arguments only (sudo for a non-root login).
    assert first.arguments[0] == {"print_output": False, "print_input": False, "_sudo": True, "_timeout": 30}


def test_renewal_by_the_holder_moves_its_lease(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    host = LockHost()
    _take(host, path)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "renewed": data["renewed"] - 100}))
    assert run_op(lock.run_lock, host, "driver", path=str(path)) == []
    assert json.loads(path.read_text())["renewed"] > data["renewed"] - 50


def test_a_lock_whose_lease_ran_out_is_taken_over_with_a_warning(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"controller": "elsewhere", "pid": 1, "started": "2026-11-30T01:00:00Z",
                                "run_id": "old", "renewed": time.time() - lock.LEASE_S - 5}))
    host = LockHost()
    assert _take(host, path) == []
    assert json.loads(path.read_text())["run_id"] == lock.this_run(host).run_id
    assert host.logs == [f"took over the run lock {path} from run old from elsewhere (pid 1) since "
                         "2026-11-30T01:00:00Z (its lease ran out)"]


def test_a_lock_of_a_gone_process_on_this_controller_is_taken_over(tmp_path: Path) -> None:
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    path = tmp_path / "run.lock"
    path.write_text(json.dumps({"controller": socket.gethostname(), "pid": int(gone), "started": "t",
                                "run_id": "crashed", "renewed": time.time()}))
    host = LockHost()
    assert _take(host, path) == []
    assert json.loads(path.read_text())["run_id"] == lock.this_run(host).run_id
    assert host.logs and host.logs[0].endswith("(its process is gone)")
    # A live process on another controller cannot be checked from here: its lock holds until the lease runs out.
    path.write_text(json.dumps({"controller": "elsewhere", "pid": int(gone), "started": "t", "run_id": "live",
                                "renewed": time.time()}))
    assert _take(LockHost(), path)[0].endswith("exit 1")


def test_release_removes_only_the_holders_lock(tmp_path: Path) -> None:
    path = tmp_path / "run.lock"
    holder, other = LockHost(), LockHost()
    _take(holder, path)
    _take(other, path)
    assert run_op(lock.run_unlock, other, path=str(path)) == [] and path.exists()
    assert run_op(lock.run_unlock, holder, path=str(path)) == [] and not path.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.lock.guard"]


def test_a_failed_node_releases_its_lock_after_its_last_retry(tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "run.lock"
    host = LockHost()
    _take(host, path)
    handler = lock.ReleaseOnFailure()
    released: list[Any] = []
    monkeypatch.setattr(lock, "release", lambda target, op_hash=None, path=lock.LOCK_PATH: released.append(target))
    handler.operation_host_error(host.state, host, "op", retry_count=0, max_retries=1)
    assert released == []
    handler.operation_host_error(host.state, host, "op", retry_count=1, max_retries=1)
    assert released == [host]
    state = SimpleNamespace(callback_handlers=[], add_callback_handler=lambda h: state.callback_handlers.append(h))
    lock.release_on_failure(state)
    lock.release_on_failure(state)
    assert len(state.callback_handlers) == 1


def test_planning_takes_no_lock(tmp_path: Path) -> None:
    host = LockHost()
    host.executing_op_hash = None
    assert _take(host, tmp_path / "run.lock") == [] and not (tmp_path / "run.lock").exists()


def test_a_lock_that_cannot_be_taken_names_the_command_its_status_and_tail(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    (refused,) = _take(LockHost(), blocker / "run.lock")
    assert "cannot take the run lock" in refused and "python3 -c " in refused
    assert "exited 1: " in refused and "File exists" in refused
