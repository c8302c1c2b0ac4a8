"""The whole pipeline on three rig nodes, once logging in as root and once as the sudo user ``ops``.

The nodes are those of the demo (``inventory/rig.yaml``): a control plane, a node with two simulated H200s (GPU 0
with a mixed MIG layout) and one with a time-sliced L40S. ``pyinfra inventory.py deploys/gpu_node.py`` converges
them (host stack, MIG, ``kubeadm init`` and joins, verification), a second run changes nothing,
``gpu-provision verify`` and ``drift`` pass, a hand change is reported by drift and repaired, a MIG layout change is
applied and survives a reboot. As ``ops`` every command runs through sudo (``_sudo``, set by the inventory for a
login user other than root); as ``opspw`` sudo asks for a password, given through pyinfra's own ``_sudo_password``
data in ``group_data/all.py`` next to the cluster file, which the fleet commands read as ``pyinfra`` does.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterdirs import controller_dirs
from test_mig import placed, reboot

from gpu_provision.fleet import SUDO_PASSWORD_NEEDED
from gpu_provision_rig.config import PASSWORD_SUDO_USER, SUDO_PASSWORD, SUDO_USER, RigNode

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CP = RigNode("pl-cp", "127.0.10.41")
MIG = RigNode("pl-mig", "127.0.10.42", gpu_model="H200", gpu_count=2)
TS = RigNode("pl-ts", "127.0.10.43", gpu_model="L40S", gpu_count=1)
RIG_NODES = [CP, MIG, TS]
NAMES = {"rig-cp": CP, "rig-mig": MIG, "rig-ts": TS}
KUBECTL = "kubectl --kubeconfig=/etc/kubernetes/admin.conf"
A_PLACED = ["2g.35gb@0:2", "1g.18gb@2:1", "1g.18gb@3:1", "3g.71gb@4:4"]
B_PLACED = ["3g.71gb@0:4", "3g.71gb@4:4"]


def cluster_doc(rig: Any, login: str, gpu0: dict[str, int] | None = None,
                mig_driver: dict[str, str] | None = None) -> dict[str, Any]:
    """``inventory/rig.yaml`` on this module's nodes, logging in as ``login`` with the rig's key; ``gpu0`` another
    layout for the MIG node's GPU 0, ``mig_driver`` driver settings of the MIG node's own."""
    doc = yaml.safe_load((REPO / "inventory" / "rig.yaml").read_text())
    cluster = doc["cluster"]
    cluster["ssh"].update(user=login, key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts))
    cluster["controller_dirs"] = controller_dirs(rig)
    cluster["kubernetes"]["cni_manifest"] = str(
        REPO / "rig/gpu_provision_rig/standins/kubernetes/common/cni-flannel-standin.json")
    cluster["kubernetes"]["control_plane_endpoint"] = f"{CP.bridge_address}:6443"
    for node in doc["nodes"]:
        rig_node = NAMES[node["name"]]
        node.update(name=rig_node.name, address=rig_node.ssh_address)
        if gpu0 is not None and rig_node is MIG:
            node["mig"]["gpus"]["0"]["layout"] = gpu0
        if mig_driver is not None and rig_node is MIG:
            node["driver"] = dict(mig_driver)
    return doc


class Site:
    """A directory with the cluster file (and ``group_data/`` when a sudo password is given), where pyinfra and
    the fleet commands run as a user would run them."""

    def __init__(self, rig: Any, workdir: Path, login: str, sudo_password: str | None = None):
        self.rig, self.workdir, self.login = rig, workdir, login
        self.cluster = workdir / "cluster.yaml"
        self.write()
        if sudo_password is not None:  # pyinfra's own mechanism: data, here the all group's in group_data/
            (workdir / "group_data").mkdir(exist_ok=True)
            (workdir / "group_data" / "all.py").write_text(f"_sudo_password = {sudo_password!r}\n")

    def write(self, gpu0: dict[str, int] | None = None, mig_driver: dict[str, str] | None = None) -> None:
        """(Re)write the cluster file, optionally with another layout for the MIG node's GPU 0 or driver settings
        of the MIG node's own."""
        self.cluster.write_text(yaml.safe_dump(cluster_doc(self.rig, self.login, gpu0, mig_driver),
                                               sort_keys=False))

    def _env(self) -> dict[str, str]:
        return {**os.environ, "GPU_PROVISION_CLUSTER": str(self.cluster), "COLUMNS": "200"}

    def pyinfra(self, *extra: str) -> subprocess.CompletedProcess[str]:
        """``pyinfra -y inventory.py deploys/gpu_node.py`` (every stage)."""
        return subprocess.run([sys.executable, "-m", "pyinfra", "-y", *extra, str(REPO / "inventory.py"),
                               str(REPO / "deploys" / "gpu_node.py")], capture_output=True, text=True,
                              timeout=900, cwd=self.workdir, env=self._env())

    def gp(self, *args: str) -> subprocess.CompletedProcess[str]:
        """``gpu-provision ARGS... inventory.py``."""
        return subprocess.run([sys.executable, "-m", "gpu_provision.cli", *args, str(REPO / "inventory.py")],
                              capture_output=True, text=True, timeout=600, cwd=self.workdir, env=self._env())


def totals(output: str) -> tuple[int, int, int, int]:
    """``(hosts, success, error, no change)`` of pyinfra's grand total."""
    match = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert match, output[-6000:]
    return tuple(0 if v == "-" else int(v) for v in match.groups())  # type: ignore[return-value]


def changed_rows(output: str) -> list[str]:
    """Rows of pyinfra's results table whose Success column is not ``-``."""
    table = output.split("--> Results:", 1)[-1].splitlines()
    return [row.strip() for row in table if "|" in row and row.split()[-3] != "-"]


@pytest.fixture(scope="module", params=["root", SUDO_USER, PASSWORD_SUDO_USER])
def site(request: pytest.FixtureRequest, rig, rig_nodes, tmp_path_factory) -> Site:  # type: ignore[no-untyped-def]
    """Fresh nodes, converged by the first test, logging in as root, as ``ops`` (sudo without a password) or as
    ``opspw`` (its sudo password given as pyinfra data)."""
    for node in rig_nodes:
        rig.reset_node(node.name)
    password = SUDO_PASSWORD if request.param == PASSWORD_SUDO_USER else None
    return Site(rig, tmp_path_factory.mktemp(f"pipeline-{request.param}"), request.param, password)


@pytest.fixture
def as_root(ssh) -> Callable[[RigNode, str], subprocess.CompletedProcess[str]]:  # type: ignore[no-untyped-def]
    """Look at a node as root (the tests' own view, whatever the pipeline logs in as)."""
    return lambda node, command: ssh(node, command)


def test_converge_then_nothing_changes(site, as_root):  # type: ignore[no-untyped-def]
    first = site.pyinfra()
    out = first.stdout + first.stderr
    assert first.returncode == 0, out[-8000:]
    assert totals(out)[2] == 0, out[-8000:]
    # Through sudo, files are root's; the login user never owns what the pipeline wrote.
    owners = as_root(MIG, "stat -c '%U' /etc/docker/daemon.json /etc/gpu-provision/mig-layout.yaml "
                          "/etc/kubernetes/kubelet.conf").stdout.split()
    assert owners == ["root", "root", "root"]
    nodes = json.loads(as_root(CP, f"{KUBECTL} get nodes -o json").stdout)["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == sorted(n.name for n in RIG_NODES)
    assert placed(as_root, MIG, 0) == A_PLACED

    second = site.pyinfra()
    out = second.stdout + second.stderr
    assert second.returncode == 0, out[-8000:]
    assert changed_rows(out) == [], out[-8000:]


def test_verify_and_drift_pass(site):  # type: ignore[no-untyped-def]
    verify = site.gp("verify", "--json")
    assert verify.returncode == 0, verify.stdout[-6000:] + verify.stderr[-3000:]
    drift = site.gp("drift", "--json")
    assert drift.returncode == 0, drift.stdout[-6000:] + drift.stderr[-3000:]
    assert {n["name"]: n["differences"] for n in json.loads(drift.stdout)["nodes"]} == {
        n.name: [] for n in RIG_NODES}


def test_hand_change_reported_then_repaired(site, as_root):  # type: ignore[no-untyped-def]
    daemon = json.loads(as_root(MIG, "cat /etc/docker/daemon.json").stdout)
    daemon["default-runtime"] = "runc"
    assert as_root(MIG, f"printf '%s' '{json.dumps(daemon)}' > /etc/docker/daemon.json").returncode == 0
    drift = site.gp("drift", "--json")
    assert drift.returncode == 1, drift.stdout[-6000:] + drift.stderr[-3000:]
    found = {n["name"]: n["differences"] for n in json.loads(drift.stdout)["nodes"]}
    # Docker's default runtime is no longer nvidia: drift says so (the daemon.json content, the runtime in effect).
    assert found[MIG.name] and {d["kind"] for d in found[MIG.name]} <= {"file", "nvidia-runtime"}, found
    assert found[CP.name] == [] and found[TS.name] == []

    repair = site.pyinfra()
    assert repair.returncode == 0, (repair.stdout + repair.stderr)[-8000:]
    assert json.loads(as_root(MIG, "cat /etc/docker/daemon.json").stdout)["default-runtime"] == "nvidia"
    assert site.gp("drift").returncode == 0


def test_mig_change_applied_and_kept_across_a_reboot(site, rig, as_root):  # type: ignore[no-untyped-def]
    site.write(gpu0={"3g.71gb": 2})
    try:
        change = site.pyinfra()
        assert change.returncode == 0, (change.stdout + change.stderr)[-8000:]
        assert placed(as_root, MIG, 0) == B_PLACED
        reboot(rig, as_root, MIG)
        assert as_root(MIG, "systemctl is-system-running").stdout.strip() == "running"
        assert placed(as_root, MIG, 0) == B_PLACED
        again = site.pyinfra()
        out = again.stdout + again.stderr
        assert again.returncode == 0, out[-8000:]
        # Only the /dev/char links come back: on a real node the toolkit's udev rule makes them at boot, a rig node
        # has no udev (its /dev is nspawn's).
        assert [row.split("|")[-1].split("  ")[0].strip() for row in changed_rows(out)] in (
            [], ["Create /dev/char links for NVIDIA devices"]), out[-8000:]
    finally:
        site.write()


def test_a_driver_change_reboots_the_node_through_the_deploy(site, as_root):  # type: ignore[no-untyped-def]
    """Another driver version on the MIG node with ``driver.reboot: allowed``: the deploy installs it, reboots the
    node (through sudo for ``ops`` and ``opspw``), waits for the boot and carries on; the node then runs that
    version. Then back to the file's own version, the same way."""
    for version in ("580.126.09", "580.159.04"):
        site.write(mig_driver={"version": version, "reboot": "allowed"})
        boot = as_root(MIG, "cat /proc/sys/kernel/random/boot_id").stdout
        change = site.pyinfra("--limit", MIG.name)
        out = change.stdout + change.stderr
        assert change.returncode == 0, out[-8000:]
        assert "Reboot for the driver" in out and as_root(MIG, "cat /proc/sys/kernel/random/boot_id").stdout != boot
        smi = as_root(MIG, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.split()
        assert smi == [version, version]
        assert as_root(MIG, "dpkg-query -W -f '${Version}' nvidia-driver").stdout == f"{version}-1"
    site.write()


def test_password_sudo_without_the_password_is_refused(rig, rig_nodes, tmp_path):  # type: ignore[no-untyped-def]
    """``opspw`` without ``_sudo_password`` and without a terminal: every node is reported as not reached, saying
    how to give the password; no prompt, no traceback."""
    site = Site(rig, tmp_path, PASSWORD_SUDO_USER)
    drift = site.gp("drift", "--json")
    assert "Traceback" not in drift.stderr, drift.stderr[-3000:]
    report = json.loads(drift.stdout)
    assert drift.returncode == report["exit_status"] == 2, drift.stdout[-3000:]
    assert [(n["name"], n["status"], n["problems"]) for n in report["nodes"]] == [
        (n.name, "not-checked", [SUDO_PASSWORD_NEEDED]) for n in RIG_NODES], report
