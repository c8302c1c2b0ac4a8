"""The conformance suite (``pytest --pyargs gpu_provision.conformance``) against a converged rig node.

The node is brought to the host stack (driver, Docker, toolkit, device permissions) by a real pyinfra run; the suite
then runs in a child pytest over real SSH (testinfra's ``ssh://`` backend, the rig's key and known_hosts, strict
checking), once as root and once as the sudo user ``ops`` with ``--sudo``, and passes. After a hand change on the
node (a device file's mode, the driver's hold) it fails naming exactly those two things; after the deploy runs again
it passes. Stand-ins: the NVIDIA packages and GPUs are the rig's (see rig/gpu_provision_rig/standins/).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision_rig.config import SUDO_USER, RigNode

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BASE_CLUSTER = REPO / "tests" / "rig" / "clusters" / "host-stack.yaml"
NODE = RigNode("rigtestcf1", "127.0.10.87", gpu_model="H200", gpu_count=1)
RIG_NODES = [NODE]
DEPLOY = "from gpu_provision.stages.pipeline import HOST_STACK, gpu_node\n\ngpu_node(stages=HOST_STACK)\n"
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"
#: What a conforming host-stack node gives: every test passes but those with nothing to check in this file.
PASSING = {"stage-driver", "stage-runtime", "stage-toolkit", "stage-permissions", "device_files", "nvidia_runtime"}
SKIPPED = {"stage-mig", "stage-kubernetes"}


@pytest.fixture(scope="module")
def cluster_file(rig, rig_nodes, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The host-stack cluster file with this module's one GPU node and the rig's key; the node starts fresh."""
    doc = yaml.safe_load(BASE_CLUSTER.read_text())
    doc["cluster"]["name"] = "rig-conformance"
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts))
    doc["cluster"]["controller_dirs"] = controller_dirs(rig)
    doc["nodes"] = [{"name": NODE.name, "address": NODE.ssh_address,
                     "gpus": {"model": NODE.gpu_model, "count": NODE.gpu_count}}]
    path = tmp_path_factory.mktemp("conformance") / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    rig.reset_node(NODE.name)
    return path


@pytest.fixture(scope="module")
def converge(cluster_file, rig, tmp_path_factory):  # type: ignore[no-untyped-def]
    """Runs the host-stack deploy on the node (``pyinfra -y inventory.py DEPLOY``); returns (exit status, output)."""
    workdir = tmp_path_factory.mktemp("deploy")
    deploy = workdir / "host_stack.py"
    deploy.write_text(DEPLOY)
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster_file), "COLUMNS": "200"}

    def run() -> tuple[int, str]:
        proc = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(REPO / "inventory.py"), str(deploy)],
                              capture_output=True, text=True, timeout=900, cwd=workdir, env=env)
        return proc.returncode, proc.stdout + proc.stderr

    return run


@pytest.fixture(scope="module")
def converged(converge, rig_ssh):  # type: ignore[no-untyped-def]
    """The node at the cluster file's host stack (kernel headers' stand-in in place first)."""
    assert rig_ssh(NODE, HEADERS).returncode == 0
    status, output = converge()
    assert status == 0, output[-6000:]
    return NODE


@pytest.fixture
def conformance(cluster_file, rig, tmp_path):  # type: ignore[no-untyped-def]
    """Runs the suite in a child pytest against the node as ``user`` (``--sudo`` when asked); returns its exit
    status and ``{test: (outcome, message)}`` from its JUnit report (tests named ``stage-driver``, ``device_files``)."""

    def run(user: str = "root", sudo: bool = False) -> tuple[int, dict[str, tuple[str, str]]]:
        report = tmp_path / f"conformance-{user}.xml"
        # testinfra's ssh backend takes client options from --ssh-config (its --ssh-extra-args never reaches it).
        config = tmp_path / "ssh_config"
        config.write_text(f"Host {NODE.ssh_address}\n  UserKnownHostsFile {rig.paths.known_hosts}\n"
                          "  StrictHostKeyChecking yes\n  BatchMode yes\n  IdentitiesOnly yes\n")
        argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "gpu_provision.conformance.plugin",
                "--pyargs", "gpu_provision.conformance", "--cluster", str(cluster_file),
                f"--hosts=ssh://{user}@{NODE.ssh_address}", f"--ssh-identity-file={rig.paths.client_key}",
                f"--ssh-config={config}", f"--junitxml={report}", *(["--sudo"] if sudo else [])]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        assert report.exists(), proc.stdout[-4000:] + proc.stderr[-4000:]
        return proc.returncode, outcomes(report)

    return run


def outcomes(report: Path) -> dict[str, tuple[str, str]]:
    """Each test of a JUnit report by short name (``test_stage[ssh://...-driver]`` -> ``stage-driver``)."""
    out = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name", "")
        match = re.fullmatch(r"test_(\w+)\[(.*)\]", name)
        assert match, name
        short = match.group(1) + ("-" + match.group(2).rsplit("-", 1)[1] if match.group(1) == "stage" else "")
        found = [(child.tag, child.get("message") or "") for child in case if child.tag in ("failure", "error",
                                                                                             "skipped")]
        out[short] = found[0] if found else ("passed", "")
    return out


def passed(results: dict[str, tuple[str, str]]) -> set[str]:
    return {name for name, (outcome, _) in results.items() if outcome == "passed"}


def skipped(results: dict[str, tuple[str, str]]) -> set[str]:
    return {name for name, (outcome, _) in results.items() if outcome == "skipped"}


def test_a_converged_node_conforms_as_root(converged, conformance):  # type: ignore[no-untyped-def]
    status, results = conformance()
    assert (status, passed(results), skipped(results)) == (0, PASSING, SKIPPED), results
    assert results["stage-mig"][1].endswith(f"the cluster file gives node {NODE.name} nothing in stage mig")


def test_a_converged_node_conforms_through_sudo(converged, conformance):  # type: ignore[no-untyped-def]
    status, results = conformance(user=SUDO_USER, sudo=True)
    assert (status, passed(results), skipped(results)) == (0, PASSING, SKIPPED), results


def test_the_suite_fails_on_a_changed_node_and_passes_after_the_deploy(  # type: ignore[no-untyped-def]
        converged, conformance, converge, ssh):
    gid = ssh(NODE, "getent group gpu | cut -d: -f3").stdout.strip()
    assert gid.isdigit()
    changed = ssh(NODE, "chmod 0666 /dev/nvidia0 && apt-mark unhold nvidia-driver")
    assert changed.returncode == 0, changed.stderr

    status, results = conformance(user=SUDO_USER, sudo=True)
    assert status == 1 and passed(results) == PASSING - {"stage-driver", "device_files"}, results
    outcome, message = results["stage-driver"]
    assert outcome == "failure" and message.endswith(
        f"node {NODE.name}, stage driver: 1 problem(s)\n  package nvidia-driver: expected held, found not held"), message
    outcome, message = results["device_files"]
    assert outcome == "failure" and message.endswith(
        f"node {NODE.name}, device files: 1 problem(s)\n"
        f"  device /dev/nvidia0: expected uid 0 gid {gid} mode 0660, found uid 0 gid {gid} mode 0666"), message

    status, output = converge()
    assert status == 0, output[-6000:]
    status, results = conformance()
    assert (status, passed(results), skipped(results)) == (0, PASSING, SKIPPED), results
