"""``gpu-provision drift`` over real SSH against a rig node: in sync after converging, then exactly the hand-made
changes (a managed file edited, a package unheld, a member removed), one remote command per check; the real
stages on a fresh node cost the same single command whatever how many of them are compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drift_samples import write_cluster

from gpu_provision_rig.config import RigNode
from gpu_provision_rig.lifecycle import Rig, missing_requirements

pytestmark = pytest.mark.rig

ROOT = Path(__file__).resolve().parents[2]
NODE = RigNode("drift1", "127.0.10.121")
CONF = "/etc/gpu-provision-drift-test.conf"
CONF_TEXT = "managed = yes\n"

STAGE = '''\
"""Drift test stage: a held package, a managed file, a running service, a group member."""
from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, request_for

NAME = "rigtest"
SUDO_VERSION = {version!r}


def wants(node, cluster, state):
    return [PackageWant("sudo", SUDO_VERSION, held=True), FileWant({conf!r}, content={text!r}),
            UnitWant("ssh.service"), GroupWant("drift-test", ("nobody",))]


def request(node, cluster):
    return request_for(wants(node, cluster, None))
'''

CONVERGE = (f"printf %s '{CONF_TEXT}' > {CONF} && chmod 0644 {CONF} && apt-mark hold sudo >/dev/null && "
            "(getent group drift-test >/dev/null || groupadd drift-test) && usermod -a -G drift-test nobody")


@pytest.fixture(scope="module")
def rig() -> Iterator[Rig]:
    """The rig with the drift test node up; afterwards the rig is taken down if nothing else was running, else
    only the drift node is powered off."""
    missing = missing_requirements()
    if missing:
        pytest.skip(f"the rig cannot run here: missing {', '.join(missing)}")
    the_rig = Rig()
    others_running = any(s.state != "stopped" for s in the_rig.status() if s.name != NODE.name)
    the_rig.up([NODE])
    yield the_rig
    if others_running:
        the_rig.kill_node(NODE.name)
    else:
        the_rig.down()


@pytest.fixture
def cluster(rig: Rig, tmp_path: Path) -> Path:
    """A cluster file naming the drift node with the rig's key and known_hosts."""
    path = write_cluster(tmp_path / "cluster.yaml", [{"name": NODE.name, "address": NODE.ssh_address}], 10)
    doc = json.loads(path.read_text())
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts),
                                 strict_host_key_checking=True)
    doc["cluster"]["controller_dirs"] = [str(rig.paths.state)]  # the key and known_hosts live there
    path.write_text(json.dumps(doc))
    return path


def node_sh(rig: Rig, script: str) -> str:
    done = rig.node_exec(NODE.name, ["sh", "-c", script], timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def drift(cluster: Path, *args: str, pythonpath: Path | None = None) -> tuple[int, dict[str, Any]]:
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", "inventory.py", "--cluster",
                           str(cluster), "--json", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_hand_made_changes_are_reported_exactly(rig: Rig, cluster: Path, tmp_path: Path):
    version = node_sh(rig, "dpkg-query -W -f '${Version}' sudo")
    package = tmp_path / "rigcheck"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "stage.py").write_text(STAGE.format(version=version, conf=CONF, text=CONF_TEXT))
    node_sh(rig, CONVERGE)

    status, report = drift(cluster, "--stage", "rigcheck.stage", pythonpath=tmp_path)
    node = report["nodes"][0]
    assert (status, node["status"], node["differences"], node["commands"]) == (0, "in-sync", [], 1)

    node_sh(rig, f"echo 'managed = no' > {CONF} && apt-mark unhold sudo >/dev/null && gpasswd -d nobody drift-test")
    try:
        status, report = drift(cluster, "--stage", "rigcheck.stage", pythonpath=tmp_path)
    finally:
        node_sh(rig, CONVERGE)
    node = report["nodes"][0]
    assert status == 1
    assert node["status"] == "drift"
    assert node["commands"] == 1
    found = sorted((d["kind"], d["item"], d["expected"], d["actual"]) for d in node["differences"])
    assert [f[:2] for f in found] == [("file", CONF), ("group-members", "drift-test"), ("package-hold", "sudo")]
    assert found[1][2:] == (["nobody"], [])
    assert found[2][2:] == ("held", "not held")


def test_real_stages_cost_one_command_however_many_are_compared(rig: Rig, cluster: Path):
    # A fresh Debian node is far from a GPU node: every stage finds drift, from the same single probe.
    counts = {}
    for stages in (["--stage", "runtime"], []):
        status, report = drift(cluster, *stages)
        node = report["nodes"][0]
        assert node["status"] in ("drift", "error"), node
        assert status in (1, 2)
        assert node["differences"], node
        counts[len(report["stages"])] = node["commands"]
    assert set(counts.values()) == {1}, counts
    assert max(counts) > 1
