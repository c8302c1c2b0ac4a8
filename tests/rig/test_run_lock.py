"""Field conditions on a rig node through real pyinfra runs: two runs at once (one completes, the other stops before
changing anything, naming the holder), a stale lock taken over, and connections killed in the middle of atomic
writes (each file old or new, never partial, no temporary left)."""

from __future__ import annotations

import hashlib
import json
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision.operations.lock import LOCK_PATH
from gpu_provision_rig.config import RigNode

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "rig" / "clusters" / "host-stack.yaml"
NODE = RigNode("rigtestlock1", "127.0.10.81")
RIG_NODES = [NODE]
DEPLOY = "from gpu_provision.stages.pipeline import gpu_node\n\ngpu_node(stages={stages!r})\n"
FAULT_DIR = "/etc/gpu-provision-fault"
FAULT_FILES = 3
# Large enough that a transfer takes a while on loopback, so the kill lands in the middle of one.
FAULT_LINES = 1_500_000
FAULT_DEPLOY = f'''\
import os

from gpu_provision.desired import FileWant
from gpu_provision.operations import files

seed = os.environ["FAULT_SEED"]
for i in range({FAULT_FILES}):
    files.wants(name=f"Fault file {{i}}", wants=[FileWant(f"{FAULT_DIR}/{{i}}.conf", backup=False,
                                                           content=f"{{seed}}-{{i}}\\n" * {FAULT_LINES})])
'''


def _fault_digest(seed: str, i: int) -> str:
    return hashlib.sha256((f"{seed}-{i}\n" * FAULT_LINES).encode()).hexdigest()


@pytest.fixture(scope="module")
def cluster_file(rig, rig_nodes, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The host-stack cluster file narrowed to this module's GPU-less node, with the rig's key and known_hosts."""
    doc = yaml.safe_load(CLUSTER.read_text())
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts))
    doc["cluster"]["controller_dirs"] = controller_dirs(rig)
    doc["nodes"] = [{"name": NODE.name, "address": NODE.ssh_address}]
    doc.pop("groups", None)
    path = tmp_path_factory.mktemp("run-lock") / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    rig.reset_node(NODE.name)
    return path


@pytest.fixture
def deploy_file(cluster_file, pyinfra, monkeypatch):  # type: ignore[no-untyped-def]
    """A deploy running ``stages`` of the pipeline on the module's node (cluster file in the environment)."""
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster_file))
    return lambda stages, name="node.py": pyinfra.deploy(DEPLOY.format(stages=list(stages)), name=name)


def _lock(ssh) -> dict[str, object] | None:  # type: ignore[no-untyped-def]
    done = ssh(NODE, f"cat {LOCK_PATH}")
    return json.loads(done.stdout) if done.returncode == 0 else None


def test_second_run_at_once_stops_before_any_change_naming_the_holder(deploy_file, pyinfra, ssh):  # type: ignore[no-untyped-def]
    inventory = REPO / "inventory.py"
    first = pyinfra.start(inventory, deploy_file(["preflight", "runtime", "toolkit", "permissions"], "first.py"))
    try:
        deadline = time.monotonic() + 180
        while (held := _lock(ssh)) is None:
            assert first.poll() is None, first.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "the first run never took the lock"
            time.sleep(0.2)
        assert held["controller"] == socket.gethostname() and held["pid"] == first.pid
        second = pyinfra.run(inventory, deploy_file(["preflight", "runtime"], "second.py"), timeout=300)
        assert second.returncode != 0, second.output[-4000:]
        assert (f"{LOCK_PATH} is held by run {held['run_id']} from {held['controller']} (pid {first.pid}) "
                f"since {held['started']}: stopping before any change") in second.output
        # The second run failed at its first operation: nothing after it ran on the node.
        lines = [line for line in second.output.splitlines() if NODE.name in line or NODE.ssh_address in line]
        assert any("Error" in line for line in lines) and not any("Success" in line for line in lines), lines
        output, _ = first.communicate(timeout=900)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == 0, output[-6000:]
    assert "is held by run" not in output
    assert _lock(ssh) is None  # released by the first run's last operation


def test_stale_lock_of_a_gone_run_is_taken_over_with_a_warning(deploy_file, pyinfra, ssh):  # type: ignore[no-untyped-def]
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True).stdout.strip()
    stale = {"controller": socket.gethostname(), "pid": int(gone), "started": "2026-12-01T00:00:00Z",
             "run_id": "crashed-run", "renewed": 0}
    assert ssh(NODE, f"mkdir -p -m 0700 /var/lib/gpu-provision && echo '{json.dumps(stale)}' > {LOCK_PATH}"
               ).returncode == 0
    result = pyinfra.run(REPO / "inventory.py", deploy_file(["preflight"]), timeout=300)
    assert result.returncode == 0, result.output[-4000:]
    assert (f"took over the run lock {LOCK_PATH} from run crashed-run from {socket.gethostname()} (pid {gone}) "
            "since 2026-12-01T00:00:00Z") in result.output
    assert _lock(ssh) is None


def test_connection_killed_mid_write_leaves_each_file_old_or_new(rig_nodes, pyinfra, ssh, monkeypatch):  # type: ignore[no-untyped-def]
    inventory = pyinfra.inventory(rig_nodes)
    deploy = pyinfra.deploy(FAULT_DEPLOY, name="fault.py")
    monkeypatch.setenv("FAULT_SEED", "old")
    done = pyinfra.run(inventory, deploy, timeout=600)
    assert done.returncode == 0, done.output[-4000:]
    either = {i: {_fault_digest("old", i), _fault_digest("new", i)} for i in range(FAULT_FILES)}
    interrupted = 0
    for attempt, seed in enumerate(("new", "old", "new")):
        monkeypatch.setenv("FAULT_SEED", seed)
        run = pyinfra.start(inventory, deploy)
        try:
            deadline = time.monotonic() + 300
            # Kill the controller (its SSH connection goes with it) once a temporary file is being filled.
            while ssh(NODE, f"ls -A {FAULT_DIR} | grep -q '^\\.'").returncode != 0:
                if run.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            if run.poll() is None:
                run.send_signal(signal.SIGKILL)
                interrupted += 1
            run.wait()
        finally:
            if run.poll() is None:
                run.kill()
                run.wait()
        # The node's write sees the end of its input (or a hang-up), fails and removes its temporary.
        names = [f"{i}.conf" for i in range(FAULT_FILES)]
        deadline = time.monotonic() + 30
        while sorted(ssh(NODE, f"ls -A {FAULT_DIR}").stdout.split()) != names and time.monotonic() < deadline:
            time.sleep(0.5)
        sums = {path: digest for digest, path in
                (line.split() for line in ssh(NODE, f"sha256sum {FAULT_DIR}/*.conf").stdout.splitlines())}
        for i in range(FAULT_FILES):
            assert sums[f"{FAULT_DIR}/{i}.conf"] in either[i], f"attempt {attempt}: {i}.conf is partial"
        assert sorted(ssh(NODE, f"ls -A {FAULT_DIR}").stdout.split()) == names
    assert interrupted >= 1, "no run was caught in the middle of a write"
    # A run that is not interrupted brings every file to the new content.
    done = pyinfra.run(inventory, deploy, timeout=600)
    assert done.returncode == 0, done.output[-4000:]
    sums = ssh(NODE, f"sha256sum {FAULT_DIR}/*.conf").stdout
    assert all(_fault_digest("new", i) in sums for i in range(FAULT_FILES))
