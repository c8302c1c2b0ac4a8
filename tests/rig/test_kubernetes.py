"""The kubernetes stage over real SSH and pyinfra on rig nodes, against the stand-in Kubernetes packages.

Three Debian 12 nodes: two control planes and a worker with two simulated H200s. The stage installs kubelet,
kubeadm and kubectl 1.36.4-1.1 from the rig's signed pkgs.k8s.io-layout mirror, runs ``kubeadm init``, a token
join and a control-plane join with a certificate key,
applies a CNI manifest from a file, the device plugin, team and monitoring manifests, labels the worker, and a
second run changes nothing; once logging in as root and once as the rig's sudo user (``ops``, passwordless sudo),
whose ``kubeadm join`` and token commands must run through sudo as every other command does. A change of the file's
version then moves the running cluster by ``kubeadm upgrade``, up a patch and back (1.36.3 and 1.36.4, both in the
mirror). What the stand-ins cannot prove is listed in
``rig/gpu_provision_rig/standins/kubernetes/common/standin_api.py``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpu_provision_rig.config import BRIDGE_ADDRESS, SUDO_USER, RigNode
from gpu_provision_rig.mirror import build_mirror

pytestmark = [pytest.mark.rig, pytest.mark.slow]

CP = RigNode("k8s-cp", "127.0.10.21")
GPU = RigNode("k8s-gpu", "127.0.10.22", gpu_model="H200", gpu_count=2)
CP2 = RigNode("k8s-cp2", "127.0.10.23")
RIG_NODES = [CP, GPU, CP2]
REPO = Path(__file__).resolve().parents[2]
MIRROR = f"http://{BRIDGE_ADDRESS}:8080/kubernetes/core:/stable:/v1.36/deb/"
KUBECTL = "kubectl --kubeconfig=/etc/kubernetes/admin.conf"
TOKEN = re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b")

#: The rig's nodes cannot download flannel's manifest; the stand-in one has the same namespace and DaemonSet.
CNI = REPO / "rig/gpu_provision_rig/standins/kubernetes/common/cni-flannel-standin.json"

DEPLOY = REPO / "deploys" / "cluster.py"
STANDINS = REPO / "rig/gpu_provision_rig/standins/kubernetes"


def cluster_file(tmp_path: Path, rig, login: str = "root", allocation: str = "device-plugin",
                 version: str = "1.36.4") -> Path:
    """The rig's cluster file; under DRA the GPU node's GPUs are not shared (the DRA driver does no time-slicing
    configured this way)."""
    path = tmp_path / "cluster.yaml"
    sharing = "" if allocation == "dra" else "\n    sharing: {strategy: time-slicing, replicas: 2}"
    path.write_text(f"""\
version: v1
cluster:
  name: rig-k8s
  ssh: {{user: {login}, key: {rig.paths.client_key}, known_hosts: {rig.paths.known_hosts}}}
  controller_dirs: [{rig.paths.state}, {CNI.parent}]
  kubernetes:
    version: "{version}"
    gpu_allocation: {allocation}
    cni: flannel
    cni_manifest: {CNI}
    monitoring: {{prometheus_scrape_file: /etc/prometheus/gpu-scrape.yml}}
    teams:
      - {{name: vision, gpus: 1, users: [alice]}}
  mirrors:
    kubernetes: {{url: "{MIRROR}", key_url: "{MIRROR}Release.key"}}
    registry: registry.rig.invalid:5000
    cuda:
      url: "http://{BRIDGE_ADDRESS}:8080/cuda/{{distro}}/{{cuda_arch}}/"
      key_url: "http://{BRIDGE_ADDRESS}:8080/cuda/{{distro}}/{{cuda_arch}}/gpu-provision-rig.pub"
    package_proxy: "http://{BRIDGE_ADDRESS}:3142/"
defaults:
  driver: {{branch: "580", kernel_modules: auto, reboot: never}}
nodes:
  - {{name: {CP.name}, address: {CP.ssh_address}, role: control-plane}}
  - {{name: {CP2.name}, address: {CP2.ssh_address}, role: control-plane}}
  - name: {GPU.name}
    address: {GPU.ssh_address}
    gpus: {{model: H200, count: 2}}{sharing}
    labels: {{topology.kubernetes.io/zone: rig}}
    taints: ["nvidia.com/gpu=present:NoSchedule"]
""")
    return path


def run_pyinfra(cluster: Path, deploy: Path, workdir: Path, stages: str | None = None
                ) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "COLUMNS": "200",
           **({"GPU_PROVISION_STAGES": stages} if stages else {})}
    return subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(REPO / "inventory.py"), str(deploy)],
                          capture_output=True, text=True, timeout=540, cwd=workdir, env=env)


def drift(cluster: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster)}
    return subprocess.run([sys.executable, "-m", "gpu_provision.cli", "drift", str(REPO / "inventory.py"),
                           "--stage", "kubernetes"], capture_output=True, text=True, timeout=180, env=env)


def assert_converged(cluster: Path, workdir: Path) -> None:
    """Drift finds nothing and a second run of the Kubernetes stage changes nothing."""
    in_sync = drift(cluster)
    assert in_sync.returncode == 0, in_sync.stdout + in_sync.stderr
    second = run_pyinfra(cluster, DEPLOY, workdir)
    assert second.returncode == 0, second.stdout + second.stderr
    _, success, error, _ = totals(second.stdout + second.stderr)
    assert (success, error) == (0, 0), second.stdout


def install_driver(cluster: Path, workdir: Path) -> None:
    """The (stand-in) driver on the GPU node, as on a GPU node: the device plugin and the DRA plugin advertise the
    GPUs the driver's nvidia-smi lists, so the workload's pods fit only then."""
    driver = run_pyinfra(cluster, REPO / "deploys" / "gpu_node.py", workdir, stages="preflight,driver")
    assert driver.returncode == 0, driver.stdout + driver.stderr


def run_workload(cluster: Path, ssh, tmp_path: Path) -> tuple[int, dict[str, dict[str, Any]]]:
    """``gpu-provision verify --workload`` from this controller: exit status and the checks by id.

    kubectl here is the stand-in one (the package's script, run from the source tree) with the first control
    plane's admin.conf, which names the API on the rig's bridge: the rig's own network."""
    conf = tmp_path / "admin.conf"
    conf.write_text(ssh(CP, "cat /etc/kubernetes/admin.conf").stdout)
    (tmp_path / "bin").mkdir(exist_ok=True)
    shim = tmp_path / "bin" / "kubectl"
    shim.write_text(f"#!/bin/sh\nPYTHONPATH='{STANDINS / 'common'}' exec '{sys.executable}' "
                    f"'{STANDINS / 'kubectl/root/usr/bin/kubectl'}' \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    done = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "verify", "--cluster", str(cluster),
                           "--workload", "--kubeconfig", str(conf), "--workload-timeout", "120", "--json"],
                          capture_output=True, text=True, timeout=300, env=env)
    try:
        [report] = json.loads(done.stdout)
    except ValueError:
        raise AssertionError(done.stdout + done.stderr) from None
    assert report["node"] == GPU.name, report
    return done.returncode, {c["id"]: c for c in report["checks"]}


def assert_workload_ran(cluster: Path, ssh, tmp_path: Path) -> None:
    """The workload's pods were scheduled on the GPU node, ran the probe and saw a writable /dev/shm; CUDA fails
    there (no libcuda.so.1 on rig nodes), so the run's exit status is 1; and nothing it made is left."""
    code, checks = run_workload(cluster, ssh, tmp_path)
    for check in ("workload.pods.scheduled", "workload.pods.running", "workload.shm.size"):
        assert checks[check]["status"] == "pass", checks
    assert checks["workload.cuda.vector_add"]["status"] == "fail", checks
    assert "libcuda.so.1" in checks["workload.cuda.vector_add"]["reason"], checks
    assert code == 1
    # The run deletes without waiting (--wait=false): the kubelet stops the pods, then their claims go.
    deadline = time.monotonic() + 90
    while True:
        left = ssh(CP, f"{KUBECTL} get deployments,pods,resourceclaims -n gpu-provision -o name").stdout.split()
        if not left or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert left == [], left


def totals(output: str) -> tuple[int, int, int, int]:
    match = re.search(r"Grand total\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)", output)
    assert match, output
    return tuple(0 if v == "-" else int(v) for v in match.groups())  # type: ignore[return-value]


@pytest.mark.parametrize("login", ["root", SUDO_USER])
def test_cluster_converges_joins_and_stays_converged(rig, rig_nodes, ssh, reset_node, tmp_path, login):
    for node in RIG_NODES:
        reset_node(node.name)
    # A mirror served since before the stand-ins changed is brought up to date in place (cheap when current).
    build_mirror(rig.paths.mirror)
    cluster = cluster_file(tmp_path, rig, login)
    deploy = DEPLOY
    install_driver(cluster, tmp_path)

    first = run_pyinfra(cluster, deploy, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    # No bootstrap token reaches pyinfra's output or any file left on the controller.
    assert not TOKEN.search(first.stdout + first.stderr)
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert not TOKEN.search(path.read_text(errors="replace")), path

    # The driver stage holds its own packages too (nvidia-*): these are the Kubernetes ones.
    versions = ssh(GPU, "dpkg-query -W -f '${Package}=${Version}\\n' kubelet kubeadm kubectl cri-tools "
                        "kubernetes-cni; apt-mark showhold | grep -v '^nvidia-'")
    assert versions.stdout.split() == [
        "cri-tools=1.36.0-1.1", "kubeadm=1.36.4-1.1", "kubectl=1.36.4-1.1", "kubelet=1.36.4-1.1",
        "kubernetes-cni=1.5.1-1.1", "cri-tools", "kubeadm", "kubectl", "kubelet", "kubernetes-cni"], versions
    prereq = ssh(GPU, "cat /etc/modules-load.d/k8s.conf /etc/sysctl.d/99-kubernetes.conf; "
                      "sysctl -n net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables; "
                      "test -e /etc/kubernetes/kubelet.conf && echo joined; ls /run/gpu-provision 2>/dev/null | wc -l; "
                      "systemctl is-active kubelet")
    assert prereq.stdout.split() == ["overlay", "br_netfilter", "net.bridge.bridge-nf-call-iptables", "=", "1",
                                     "net.bridge.bridge-nf-call-ip6tables", "=", "1", "net.ipv4.ip_forward", "=",
                                     "1", "1", "1", "joined", "0", "active"], prereq

    nodes = json.loads(ssh(CP, f"{KUBECTL} get nodes -o json").stdout)["items"]
    by_name = {n["metadata"]["name"]: n for n in nodes}
    assert set(by_name) == {CP.name, GPU.name, CP2.name}
    assert "node-role.kubernetes.io/control-plane" in by_name[CP2.name]["metadata"]["labels"]
    joined_cp = ssh(CP2, "ls /etc/kubernetes/admin.conf /etc/kubernetes/kubelet.conf /etc/kubernetes/manifests; "
                         "grep -o 'advertise-address.endpoint: [0-9.]*' /etc/kubernetes/manifests/kube-apiserver.yaml")
    assert joined_cp.returncode == 0, joined_cp.stderr
    assert f"advertise-address.endpoint: {CP2.bridge_address}" in joined_cp.stdout
    gpu_labels = by_name[GPU.name]["metadata"]["labels"]
    assert gpu_labels["nvidia.com/gpu.product"] == "NVIDIA-H200"
    assert gpu_labels["nvidia.com/device-plugin.config"] == "time-slicing-2"
    assert gpu_labels["topology.kubernetes.io/zone"] == "rig"
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in by_name[GPU.name]["spec"]["taints"]
    assert by_name[GPU.name]["status"]["nodeInfo"]["kubeletVersion"] == "v1.36.4"

    daemonsets = ssh(CP, f"{KUBECTL} get daemonsets -A -o name").stdout.split()
    assert sorted(daemonsets) == ["daemonset.apps/dcgm-exporter", "daemonset.apps/gpu-feature-discovery",
                                  "daemonset.apps/kube-flannel-ds", "daemonset.apps/nvidia-device-plugin"]
    flannel = json.loads(ssh(CP, f"{KUBECTL} get ds kube-flannel-ds -n kube-flannel -o json").stdout)
    assert flannel["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "registry.rig.invalid:5000/flannel/flannel:v0.26.4"
    quota = json.loads(ssh(CP, f"{KUBECTL} get resourcequota gpu-quota -n vision -o json").stdout)
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "1"}
    assert "job_name: dcgm-exporter" in ssh(CP, "cat /etc/prometheus/gpu-scrape.yml").stdout

    assert_converged(cluster, tmp_path)

    # Drift made behind the tool's back is reported (pyinfra --dry and gpu-provision drift agree), then converged.
    assert ssh(CP, f"{KUBECTL} label node {GPU.name} --overwrite nvidia.com/gpu.product=other").returncode == 0
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "COLUMNS": "200"}
    dry = subprocess.run([sys.executable, "-m", "pyinfra", "--dry", str(REPO / "inventory.py"), str(deploy)],
                         capture_output=True, text=True, timeout=540, cwd=tmp_path, env=env)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    changes = [line.strip() for line in dry.stderr.splitlines()
               if "Kubernetes |" in line and not re.search(r"\s-\s+-\s*$", line)]
    assert len(changes) == 1 and changes[0].startswith("Kubernetes | Node labels and taints"), dry.stderr
    assert f"1 ({CP.name})" in changes[0]
    drifted = drift(cluster)
    assert drifted.returncode == 1, drifted.stdout + drifted.stderr
    assert "nvidia.com/gpu.product" in drifted.stdout
    third = run_pyinfra(cluster, deploy, tmp_path)
    assert third.returncode == 0, third.stdout + third.stderr
    labels = json.loads(ssh(CP, f"{KUBECTL} get node {GPU.name} -o json").stdout)["metadata"]["labels"]
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H200"

    assert_workload_ran(cluster, ssh, tmp_path)


def test_dra_cluster_converges_lists_its_gpus_and_runs_the_workload(rig, rig_nodes, ssh, reset_node, tmp_path):
    """``gpu_allocation: dra`` through the sudo user: the DRA driver's objects instead of the device plugin, the
    GPU node's ResourceSlice listing both GPUs, no drift, a second run changing nothing, and the workload getting a
    GPU through a ResourceClaim."""
    for node in RIG_NODES:
        reset_node(node.name)
    build_mirror(rig.paths.mirror)
    cluster = cluster_file(tmp_path, rig, SUDO_USER, allocation="dra")
    install_driver(cluster, tmp_path)
    first = run_pyinfra(cluster, DEPLOY, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr

    classes = ssh(CP, f"{KUBECTL} get deviceclasses -o name").stdout.split()
    assert {"deviceclass.resource.k8s.io/gpu.nvidia.com", "deviceclass.resource.k8s.io/mig.nvidia.com"} <= set(classes)
    daemonsets = ssh(CP, f"{KUBECTL} get daemonsets -A -o name").stdout.split()
    assert "daemonset.apps/dra-driver-nvidia-gpu-kubelet-plugin" in daemonsets
    assert "daemonset.apps/nvidia-device-plugin" not in daemonsets
    templates = ssh(CP, f"{KUBECTL} get resourceclaimtemplates -n vision -o name").stdout.split()
    assert templates == ["resourceclaimtemplate.resource.k8s.io/gpu"], templates

    deadline = time.monotonic() + 60
    devices: list[str] = []
    while time.monotonic() < deadline:
        slices = json.loads(ssh(CP, f"{KUBECTL} get resourceslices --field-selector spec.nodeName={GPU.name} "
                                    "-o json").stdout)["items"]
        devices = sorted(d["name"] for s in slices for d in s["spec"]["devices"])
        if devices:
            break
        time.sleep(2)
    assert devices == ["gpu-0", "gpu-1"], devices
    [published] = slices
    assert published["spec"]["pool"] == {"name": GPU.name, "generation": 1, "resourceSliceCount": 1}

    assert_converged(cluster, tmp_path)

    assert_workload_ran(cluster, ssh, tmp_path)
    # The claims went with the pods; the node's GPUs are free again for the next claim.
    claims = ssh(CP, f"{KUBECTL} get resourceclaims -A -o name").stdout.split()
    assert claims == [], claims


def versions_everywhere(ssh) -> dict[str, Any]:
    """What each place says the Kubernetes version is: the cluster's (kubeadm-config), each control plane's static
    pods, each node's kubelet as the API reports it, and each node's packages."""
    config = json.loads(ssh(CP, f"{KUBECTL} get configmap kubeadm-config -n kube-system -o json").stdout)
    nodes = json.loads(ssh(CP, f"{KUBECTL} get nodes -o json").stdout)["items"]
    return {
        "cluster": json.loads(config["data"]["ClusterConfiguration"])["kubernetesVersion"],
        "static_pods": {n.name: sorted(set(ssh(n, "grep -ho 'image: .*' /etc/kubernetes/manifests/*.yaml | "
                                                  "sed 's/.*://'").stdout.split())) for n in (CP, CP2)},
        "kubelets": {n["metadata"]["name"]: n["status"]["nodeInfo"]["kubeletVersion"] for n in nodes},
        "packages": {n.name: ssh(n, "dpkg-query -W -f '${Package}=${Version} ' kubeadm kubectl kubelet; "
                                    "apt-mark showhold | grep -xcE 'kube(adm|ctl|let)'").stdout.split()
                     for n in RIG_NODES},
    }


def wait_for_kubelets(ssh, version: str) -> dict[str, Any]:
    """The versions, once every kubelet reports ``version`` (a restarted kubelet registers again), or after 90 s."""
    deadline = time.monotonic() + 90
    while True:
        found = versions_everywhere(ssh)
        if set(found["kubelets"].values()) == {version} or time.monotonic() > deadline:
            return found
        time.sleep(2)


def test_a_version_change_moves_the_cluster_by_kubeadm_upgrade_and_back(rig, rig_nodes, ssh, reset_node, tmp_path):
    """1.36.3 -> 1.36.4 -> 1.36.3 (both published patches, packages.json ``kubeadm-upgrade``) by plain pyinfra:
    kubeadm first, ``kubeadm upgrade apply`` on the first control plane, ``kubeadm upgrade node`` on the others,
    then kubelet and kubectl held at the new version and each kubelet restarted, since the package does not restart
    it; the cluster, both control planes' static pods and every kubelet then run the file's version, drift finds
    nothing and a second run changes nothing. Up as root, back as the sudo user (``ops``), so each login runs every
    step. A minor downgrade is refused before anything changes."""
    for node in RIG_NODES:
        reset_node(node.name)
    build_mirror(rig.paths.mirror)
    first = run_pyinfra(cluster_file(tmp_path, rig, SUDO_USER, version="1.36.3"), DEPLOY, tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    before = wait_for_kubelets(ssh, "v1.36.3")
    assert before["cluster"] == "v1.36.3" and set(before["kubelets"].values()) == {"v1.36.3"}, before

    for version, login in (("1.36.4", "root"), ("1.36.3", SUDO_USER)):
        cluster = cluster_file(tmp_path, rig, login, version=version)
        moved = run_pyinfra(cluster, DEPLOY, tmp_path)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        found = wait_for_kubelets(ssh, f"v{version}")
        assert found["cluster"] == f"v{version}", found
        assert found["static_pods"] == {CP.name: [f"v{version}"], CP2.name: [f"v{version}"]}, found
        assert found["kubelets"] == {n.name: f"v{version}" for n in RIG_NODES}, found
        packages = [f"kubeadm={version}-1.1", f"kubectl={version}-1.1", f"kubelet={version}-1.1", "3"]
        assert found["packages"] == {n.name: packages for n in RIG_NODES}, found
        # kubeadm's own words, in the log the step keeps: apply on the first control plane, node on the others.
        applied = ssh(CP, "cat /var/log/gpu-provision-kubeadm-upgrade.log").stdout
        assert f'A control plane node of your cluster was upgraded to "v{version}"' in applied, applied
        for node in (CP2, GPU):
            log = ssh(node, "cat /var/log/gpu-provision-kubeadm-upgrade.log").stdout
            assert "The configuration for this node was successfully upgraded!" in log, (node.name, log)
        # Each kubelet runs the binary its package installed (restarted after the package, which does not).
        for node in RIG_NODES:
            started = ssh(node, "systemctl show -p ExecMainStartTimestampMonotonic --value kubelet; "
                                "cut -d' ' -f1 /proc/uptime; stat -c %Z /usr/bin/kubelet; date +%s")
            start_us, uptime, changed, now = started.stdout.split()
            assert float(now) - float(uptime) + int(start_us) / 1e6 >= int(changed) - 1, (node.name, started.stdout)
        assert_converged(cluster, tmp_path)

    # A minor back is refused before anything changes: the cluster stays at 1.36.3.
    refused = run_pyinfra(cluster_file(tmp_path, rig, "root", version="1.35.9"), DEPLOY, tmp_path)
    assert refused.returncode != 0
    assert "kubeadm upgrades a cluster one minor at a time and does not take it back" in refused.stdout + \
        refused.stderr, refused.stdout + refused.stderr
    assert versions_everywhere(ssh)["cluster"] == "v1.36.3"
