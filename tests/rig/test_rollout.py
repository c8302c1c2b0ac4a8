"""``gpu-provision rollout`` on the rig: a driver change and a MIG layout change rolled across four GPU nodes of a
Kubernetes cluster, each node with a GPU job (a pod holding its GPU), two nodes at a time.

Five Debian 12 nodes: a control plane without GPUs and four workers with one simulated H200 each, provisioned with
driver 580.126.09 and MIG layout A by the deploy (stages preflight, driver, permissions, mig, kubernetes; Docker and
the toolkit are left out to keep the rig light, so the verification's container checks are skipped). The stand-in
kubelet runs each job pod as a process under ``gpu-sim hold`` (``nvidia-smi`` lists it; the MIG applier refuses to
change a GPU it holds), and the stand-in API server answers evictions as Kubernetes does, PodDisruptionBudgets
included. What the stand-ins cannot prove is listed in
``rig/gpu_provision_rig/standins/kubernetes/common/standin_api.py``.

1. Driver 580.126.09 → 580.159.04 with ``max_parallel: 2``: two batches of two; jobs are waited for, one that
   outlives ``wait_for_jobs.timeout`` is evicted; each node is rebooted by its deploy, verified, then uncordoned.
2. MIG layout A → B with ``--max-unavailable 1`` and a PodDisruptionBudget that forbids evicting the first node's
   serving pod (the injected failure): that node fails and stays cordoned, the rollout stops, ``rollout status``
   shows it, a re-run skips it; once the budget is gone, ``--retry-failed`` resumes it first and rolls the rest.
3. The rollback: driver 580.159.04 → 580.126.09 with a MIG change, rolled out as the upgrade was; and a driver
   taken down and up again on one node by plain pyinfra.
4. A Kubernetes version change (1.36.4 → 1.36.3 → 1.36.4): the control plane alone first (``kubeadm upgrade
   apply``), then the workers two at a time (``kubeadm upgrade node``), each kubelet at the new version.
5. A deploy step that fails on the node: the rollout's reason names the operation, the command, its exit status and
   the last lines it printed.
"""

from __future__ import annotations

import calendar
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from clusterdirs import controller_dirs

from gpu_provision_rig.config import BRIDGE_ADDRESS, RigNode
from gpu_provision_rig.mirror import build_mirror

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RIG_NODE_SHAPES = [(None, 0), ("H200", 1), ("H200", 1), ("H200", 1), ("H200", 1)]
K8S_MIRROR = f"http://{BRIDGE_ADDRESS}:8080/kubernetes/core:/stable:/v1.36/deb/"
CUDA_MIRROR = f"http://{BRIDGE_ADDRESS}:8080/cuda/{{distro}}/{{cuda_arch}}/"
CNI = REPO / "rig/gpu_provision_rig/standins/kubernetes/common/cni-flannel-standin.json"
KUBECTL = "kubectl --kubeconfig=/etc/kubernetes/admin.conf"
STAGES = "preflight,driver,permissions,mig,kubernetes"
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"
OLD, NEW = "580.126.09", "580.159.04"
A = {"3g.71gb": 2}
B = {"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1}
RUNS_FOR = "standin.gpu-provision.io/runs-for-seconds"
LABEL = "gpu-provision.io/rollout-state"
DONE_PATH = ["upgrade-required", "cordon-required", "wait-for-jobs-required", "apply-required",
             "validation-required", "uncordon-required", "upgrade-done"]


def cluster_doc(rig: Any, nodes: list[RigNode], driver: str, layout: dict[str, int],
                wait_timeout: int = 15, kubernetes: str = "1.36.4") -> dict[str, Any]:
    cp, *gpus = nodes
    return {
        "version": "v1",
        "cluster": {
            "name": "rig-rollout",
            "ssh": {"user": "root", "key": str(rig.paths.client_key), "known_hosts": str(rig.paths.known_hosts)},
            "controller_dirs": controller_dirs(rig),
            "kubernetes": {"version": kubernetes, "cni": "flannel", "cni_manifest": str(CNI)},
            "mirrors": {"cuda": {"url": CUDA_MIRROR, "key_url": CUDA_MIRROR + "gpu-provision-rig.pub"},
                        "kubernetes": {"url": K8S_MIRROR, "key_url": K8S_MIRROR + "Release.key"},
                        "registry": "registry.rig.invalid:5000",
                        "package_proxy": f"http://{BRIDGE_ADDRESS}:3142/"},
            "rollout": {"max_parallel": 2, "max_unavailable": 2, "wait_for_jobs": {"timeout": wait_timeout},
                        "pod_deletion": {"timeout": 10}},
        },
        "nodes": [{"name": cp.name, "address": cp.ssh_address, "role": "control-plane"}] + [
            {"name": n.name, "address": n.ssh_address, "gpus": {"model": "H200", "count": 1},
             "driver": {"branch": "580", "version": driver, "reboot": "allowed"}, "mig": {"layout": layout}}
            for n in gpus],
    }


class Site:
    """The module's cluster file and the commands the tests run against it."""

    def __init__(self, rig: Any, nodes: list[RigNode], ssh: Any, workdir: Path):
        self.rig, self.nodes, self.ssh, self.workdir = rig, nodes, ssh, workdir
        self.cp, self.gpus = nodes[0], nodes[1:]
        self.cluster = workdir / "cluster.json"
        self.env = {**os.environ, "GPU_PROVISION_CLUSTER": str(self.cluster), "GPU_PROVISION_STAGES": STAGES,
                    "COLUMNS": "200"}

    def write(self, driver: str, layout: dict[str, int], wait_timeout: int = 15, kubernetes: str = "1.36.4") -> None:
        self.cluster.write_text(json.dumps(cluster_doc(self.rig, self.nodes, driver, layout, wait_timeout,
                                                       kubernetes), indent=1))

    def pyinfra(self, *limit: str) -> subprocess.CompletedProcess[str]:
        """Plain ``pyinfra -y inventory.py deploys/gpu_node.py``, on the nodes named in ``limit`` alone if any."""
        limits = [arg for name in limit for arg in ("--limit", name)]
        return self.bounded([sys.executable, "-m", "pyinfra", "-y", *limits, str(REPO / "inventory.py"),
                             str(REPO / "deploys" / "gpu_node.py")])

    def bounded(self, argv: list[str]) -> subprocess.CompletedProcess[str]:
        """Run ``argv`` for at most 25 minutes; past that, fail with its output's tail and what each node was still
        running (a run that hangs says where)."""
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=1500, cwd=self.workdir,
                                  env=self.env)
        except subprocess.TimeoutExpired as timed_out:
            out = (timed_out.stdout or b"").decode(errors="replace") if isinstance(timed_out.stdout, bytes) \
                else (timed_out.stdout or "")
            busy = {n.name: self.ssh(n, "ps -eo etimes,args --sort=-etimes | head -25").stdout for n in self.nodes}
            raise AssertionError(f"{argv[2:4]} ran past 1500 s\n{out[-6000:]}\n"
                                 + "\n".join(f"--- {name}\n{ps}" for name, ps in busy.items())) from None

    def argv(self, *args: str) -> list[str]:
        """``rollout [ACTION] INVENTORY OPTIONS``: the action (if any) first, then the inventory, then options."""
        action = [a for a in args[:1] if not a.startswith("-")]
        return [sys.executable, "-m", "gpu_provision.cli", "rollout", *action, str(REPO / "inventory.py"),
                *args[len(action):], "--json", "--poll", "1", "--report-dir", str(self.workdir / "reports")]

    def rollout(self, *args: str) -> tuple[int, dict[str, Any], str]:
        proc = self.bounded(self.argv(*args))
        try:
            doc = json.loads(proc.stdout)
        except ValueError:
            doc = {}
        return proc.returncode, doc, proc.stdout + proc.stderr

    def kubectl(self, command: str) -> subprocess.CompletedProcess[str]:
        return self.ssh(self.cp, f"{KUBECTL} {command}")

    def apply(self, obj: dict[str, Any]) -> None:
        text = json.dumps(obj)
        assert "'" not in text
        done = self.ssh(self.cp, f"printf '%s' '{text}' > /tmp/obj.json && {KUBECTL} apply -f /tmp/obj.json")
        assert done.returncode == 0, done.stderr

    def nodes_json(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.kubectl("get nodes -o json").stdout)["items"]
        return {n["metadata"]["name"]: n for n in items}

    def pods(self) -> dict[str, dict[str, Any]]:
        items = json.loads(self.kubectl("get pods -A -o json").stdout)["items"]
        return {p["metadata"]["name"]: p for p in items}


def job(name: str, node: str, seconds: int, owner: str = "Job", labels: dict[str, str] | None = None) -> dict:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "labels": labels or {"app": "train"},
                         "annotations": {RUNS_FOR: str(seconds)},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": owner, "name": name,
                                              "uid": "0", "controller": True}]},
            "spec": {"nodeName": node, "restartPolicy": "Never",
                     "containers": [{"name": "train", "image": "registry.rig.invalid:5000/train:1",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}


def wait_running(site: Site, names: list[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        pods = site.pods()
        if all((pods.get(n, {}).get("status") or {}).get("phase") == "Running" for n in names):
            return
        time.sleep(1)
    raise AssertionError(f"pods not running: {names}: {site.pods()}")


def states(doc: dict[str, Any]) -> dict[str, list[tuple[str, float]]]:
    return {n["name"]: [(s["state"], s["at"]) for s in n["states"]] for n in doc["nodes"]}


def at(path: list[tuple[str, float]], state: str) -> float:
    return next(t for s, t in path if s == state)


def placed(ssh: Any, node: RigNode) -> list[str]:
    out = ssh(node, "nvidia-smi mig -lgi -i 0").stdout
    rows = []
    for line in out.splitlines():
        parts = line.strip("| ").split()
        if len(parts) == 6 and parts[1] == "MIG":
            rows.append(parts[2])
    return sorted(rows)


@pytest.fixture(scope="module")
def site(rig, rig_nodes, rig_ssh, tmp_path_factory) -> Site:  # type: ignore[no-untyped-def]
    """Five fresh nodes provisioned with driver 580.126.09 and MIG layout A (stages: :data:`STAGES`)."""
    build_mirror(rig.paths.mirror)  # the stand-ins of this checkout
    ssh = rig_ssh
    for node in rig_nodes:
        rig.reset_node(node.name)
    workdir = tmp_path_factory.mktemp("rollout")
    s = Site(rig, rig_nodes, ssh, workdir)
    for node in s.gpus:
        assert ssh(node, HEADERS).returncode == 0
    s.write(OLD, A)
    first = s.pyinfra()
    assert first.returncode == 0, (first.stdout + first.stderr)[-8000:]
    return s


def test_driver_change_rolls_two_at_a_time_waiting_for_jobs(site):
    g1, g2, g3, g4 = site.gpus
    for node in site.gpus:
        assert site.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.strip() == OLD
    # A job on every GPU node: three end by themselves, g4's outlives wait_for_jobs.timeout and is evicted.
    for node, seconds in ((g1, 8), (g2, 12), (g3, 10), (g4, 3600)):
        site.apply(job(f"job-{node.name}", node.name, seconds))
    wait_running(site, [f"job-{n.name}" for n in site.gpus])
    held = site.ssh(g4, "nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader").stdout
    assert "sleep" in held  # the job holds the GPU
    site.write(NEW, A)
    code, doc, output = site.rollout()
    assert code == 0, output[-8000:]
    assert doc["batches"] == [{"index": 1, "nodes": [g1.name, g2.name]}, {"index": 2, "nodes": [g3.name, g4.name]}]
    paths = states(doc)
    for node in (g1, g2, g3):
        assert [s for s, _ in paths[node.name]] == DONE_PATH, paths[node.name]
    assert [s for s, _ in paths[g4.name]] == DONE_PATH[:3] + ["pod-deletion-required"] + DONE_PATH[3:]
    # Never more than max_parallel nodes out of service at once.
    spans = [(at(paths[n.name], "cordon-required"), at(paths[n.name], "upgrade-done")) for n in site.gpus]
    assert max(sum(1 for a, b in spans if a <= t < b) for t, _ in spans) <= 2
    pods = site.pods()
    apt_times = {}
    for node in site.gpus:
        path = paths[node.name]
        assert at(path, "validation-required") < at(path, "uncordon-required")  # verified before uncordon
        report = json.loads((site.workdir / "reports" / f"{node.name}.json").read_text())
        assert report["status"] == "pass", report
        assert site.ssh(node, "dpkg-query -W -f '${Version}' nvidia-driver").stdout == f"{NEW}-1"
        assert site.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.strip() == NEW
        # When apt changed the driver on the node (dpkg's log, node clock = host clock).
        log = site.ssh(node, "grep ' upgrade nvidia-driver:' /var/log/dpkg.log | tail -1").stdout.split()
        apt_times[node.name] = calendar.timegm(time.strptime(" ".join(log[:2]), "%Y-%m-%d %H:%M:%S"))
        assert apt_times[node.name] >= int(at(path, "apply-required"))
    # The waited-for jobs ended before their node's driver changed; g4's job was evicted (gone).
    for node in (g1, g2, g3):
        finished = pods[f"job-{node.name}"]["status"]["containerStatuses"][0]["state"]["terminated"]
        assert finished["exitCode"] == 0
        ended = calendar.timegm(time.strptime(finished["finishedAt"], "%Y-%m-%dT%H:%M:%SZ"))
        assert ended <= apt_times[node.name]
    assert f"job-{g4.name}" not in pods
    for name, node in site.nodes_json().items():
        if name in {n.name for n in site.gpus}:
            assert node["metadata"]["labels"][LABEL] == "upgrade-done"
            assert not node["spec"].get("unschedulable")


def test_mig_change_stops_at_a_failure_and_a_rerun_resumes(site):
    g1, g2, g3, g4 = site.gpus
    # The injected failure: g1 serves a pod whose budget allows no disruption.
    site.apply(job(f"serve-{g1.name}", g1.name, 3600, owner="ReplicaSet", labels={"app": "serve"}))
    site.apply({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "serve", "namespace": "default"},
                "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "serve"}}}})
    try:
        wait_running(site, [f"serve-{g1.name}"])
        site.write(NEW, B)
        code, doc, output = site.rollout("--max-unavailable", "1")
        assert code == 1, output[-8000:]
        result = {n["name"]: n for n in doc["nodes"]}
        assert result[g1.name]["result"] == "failed"
        assert "PodDisruptionBudget" in result[g1.name]["reason"]
        assert [result[n.name]["result"] for n in (g2, g3, g4)] == ["not-started"] * 3
        assert "reach max_unavailable 1" in doc["stopped"]
        nodes = site.nodes_json()
        assert nodes[g1.name]["metadata"]["labels"][LABEL] == "upgrade-failed"
        assert nodes[g1.name]["spec"]["unschedulable"] is True
        assert "PodDisruptionBudget" in nodes[g1.name]["metadata"]["annotations"]["gpu-provision.io/rollout-reason"]
        for node in site.gpus:
            assert placed(site.ssh, node) == ["3g.71gb", "3g.71gb"]  # nothing changed anywhere
        status = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "rollout", "status",
                                 str(REPO / "inventory.py"), "--json"], capture_output=True, text=True, timeout=300,
                                cwd=site.workdir, env=site.env)
        assert status.returncode == 1, status.stdout + status.stderr
        rows = {r["name"]: r for r in json.loads(status.stdout)["nodes"]}
        assert rows[g1.name]["state"] == "upgrade-failed" and rows[g1.name]["cordoned"] is True
        assert rows[g2.name]["state"] == "upgrade-done"

        # Run again as is: the failed node is skipped and still counts, so nothing starts.
        code, doc, output = site.rollout("--max-unavailable", "1")
        assert code == 1, output[-8000:]
        result = {n["name"]: n for n in doc["nodes"]}
        assert result[g1.name]["result"] == "skipped" and "--retry-failed" in result[g1.name]["reason"]
        assert doc["batches"] == []

        # The budget removed (the cause fixed) and a short job on each other node: --retry-failed resumes g1 first.
        assert site.kubectl("delete pdb serve -n default").returncode == 0
        for node in (g2, g3, g4):
            site.apply(job(f"mig-job-{node.name}", node.name, 6))
        wait_running(site, [f"mig-job-{n.name}" for n in (g2, g3, g4)])
        code, doc, output = site.rollout("--max-unavailable", "1", "--retry-failed")
        assert code == 0, output[-8000:]
        assert [b["nodes"] for b in doc["batches"]] == [[g1.name], [g2.name], [g3.name], [g4.name]]
        paths = states(doc)
        assert "pod-deletion-required" in [s for s, _ in paths[g1.name]]
        for node in site.gpus:
            assert [s for s, _ in paths[node.name]][-4:] == DONE_PATH[-4:]
            assert placed(site.ssh, node) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
        for name, node in site.nodes_json().items():
            if name in {n.name for n in site.gpus}:
                assert node["metadata"]["labels"][LABEL] == "upgrade-done"
                assert not node["spec"].get("unschedulable")
        # Nothing left to roll: a further run changes nothing.
        code, doc, output = site.rollout()
        assert code == 0 and doc["batches"] == [], output[-4000:]
    finally:
        # Gone also when an assertion above failed, so the next tests' evictions are not refused by it.
        site.kubectl("delete pdb serve -n default --ignore-not-found")


def test_ctrl_c_lets_the_nodes_in_flight_reach_a_safe_state_and_a_rerun_resumes(site):
    g1, g2, g3, g4 = site.gpus
    # g1's job never ends and the file waits without limit: g1 waits while g2 (same batch) is changed.
    site.apply(job(f"forever-{g1.name}", g1.name, 3600))
    wait_running(site, [f"forever-{g1.name}"])
    site.write(NEW, A, wait_timeout=0)
    proc = subprocess.Popen(site.argv(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=site.workdir, env=site.env)
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if line.startswith(f"{g2.name}: apply-required"):
            proc.send_signal(signal.SIGINT)
            break
    out, err = proc.communicate(timeout=900)
    assert proc.returncode == 1, "".join(seen) + err
    doc = json.loads(out)
    assert doc["interrupted"] is True
    result = {n["name"]: n for n in doc["nodes"]}
    assert result[g2.name]["result"] == "done"  # it was being changed: it finished and was verified
    assert result[g1.name]["result"] == "backed-out"
    assert [result[n.name]["result"] for n in (g3, g4)] == ["not-started"] * 2
    nodes = site.nodes_json()
    assert nodes[g1.name]["metadata"]["labels"][LABEL] == "upgrade-required"
    assert not nodes[g1.name]["spec"].get("unschedulable")  # back in service, unchanged
    assert placed(site.ssh, g1) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
    assert placed(site.ssh, g2) == ["3g.71gb", "3g.71gb"]
    # The job ends; the re-run resumes g1 first, then the nodes not started.
    assert site.kubectl(f"delete pod forever-{g1.name} -n default").returncode == 0
    code, doc, output = site.rollout()
    assert code == 0, output[-8000:]
    assert doc["batches"][0]["nodes"][0] == g1.name
    for node in site.gpus:
        assert placed(site.ssh, node) == ["3g.71gb", "3g.71gb"]


def test_prepare_then_pyinfra_then_finish(site):
    g1, g2, g3, g4 = site.gpus
    driver = site.ssh(g3, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.strip()
    now = placed(site.ssh, g3)
    target, wanted = (B, ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]) if now == ["3g.71gb", "3g.71gb"] else \
        (A, ["3g.71gb", "3g.71gb"])
    site.write(driver, target)
    batch = f"{g3.name},{g4.name}"
    code, doc, output = site.rollout("prepare", "--limit", batch)
    assert code == 0, output[-6000:]
    assert {n["name"]: n["result"] for n in doc["nodes"]} == {g3.name: "prepared", g4.name: "prepared"}
    nodes = site.nodes_json()
    for node in (g3, g4):
        assert nodes[node.name]["metadata"]["labels"][LABEL] == "apply-required"
        assert nodes[node.name]["spec"]["unschedulable"] is True
        assert placed(site.ssh, node) == now  # prepare changes nothing on the node
    # pyinfra's --limit takes one name (or pattern) per flag; the control plane sets the nodes' labels (the device
    # plugin's MIG strategy follows the layout).
    deploy = subprocess.run([sys.executable, "-m", "pyinfra", "-y", "--limit", g3.name, "--limit", g4.name,
                             "--limit", site.cp.name, str(REPO / "inventory.py"),
                             str(REPO / "deploys" / "gpu_node.py")], capture_output=True, text=True, timeout=900,
                            cwd=site.workdir, env=site.env)
    assert deploy.returncode == 0, (deploy.stdout + deploy.stderr)[-6000:]
    code, doc, output = site.rollout("finish", "--limit", batch)
    assert code == 0, output[-6000:]
    assert {n["name"]: n["result"] for n in doc["nodes"]} == {g3.name: "done", g4.name: "done"}
    nodes = site.nodes_json()
    for node in (g3, g4):
        assert placed(site.ssh, node) == wanted
        assert nodes[node.name]["metadata"]["labels"][LABEL] == "upgrade-done"
        assert not nodes[node.name]["spec"].get("unschedulable")
    assert nodes[g1.name]["metadata"]["labels"].get(LABEL) != "apply-required"  # outside the batch: untouched


def driver_of(site: Site, node: RigNode) -> tuple[str, str, bool]:
    """(the version nvidia-smi reports, nvidia-driver's package version, whether it is held) on ``node``."""
    smi = site.ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").stdout.strip()
    package = site.ssh(node, "dpkg-query -W -f '${Version}' nvidia-driver").stdout
    held = "nvidia-driver" in site.ssh(node, "apt-mark showhold").stdout.split()
    return smi, package, held


def pinning_of(site: Site, node: RigNode) -> tuple[list[str], str]:
    """The NVIDIA driver pinning packages installed on ``node`` and the version their pin file holds the driver to."""
    listed = site.ssh(node, "dpkg-query -W -f '${Package} ${db:Status-Abbrev}\\n' 'nvidia-driver-pinning-*'").stdout
    names = sorted(line.split()[0] for line in listed.splitlines() if line.split()[1:2] == ["ii"])
    pin = site.ssh(node, "sed -n 's/^Pin: version //p' /etc/apt/preferences.d/nvidia-driver-pin").stdout.strip()
    return names, pin


def test_rollback_rolls_out_as_the_upgrade_did(site):
    """A lower driver with a MIG change (580.159.04 → 580.126.09, layouts to B) rolls out as the upgrade did: the
    held packages are downgraded and held again, each node rebooted by its change, verified and uncordoned."""
    g1, g2, g3, g4 = site.gpus
    if any(driver_of(site, node)[0] != NEW for node in site.gpus):  # run on its own: up first, as the first test
        site.write(NEW, A)
        code, doc, output = site.rollout()
        assert code == 0, output[-8000:]
    for node in site.gpus:
        assert driver_of(site, node) == (NEW, f"{NEW}-1", True)
    site.write(OLD, B)
    code, doc, output = site.rollout()
    assert code == 0, output[-8000:]
    paths = states(doc)
    for node in site.gpus:
        assert [s for s, _ in paths[node.name]][-4:] == DONE_PATH[-4:]
        assert driver_of(site, node) == (OLD, f"{OLD}-1", True)
        # NVIDIA's pinning package of the newer version purged, the older version's in its place.
        assert pinning_of(site, node) == ([f"nvidia-driver-pinning-{OLD}"], f"{OLD}-*")
        assert placed(site.ssh, node) == ["1g.18gb", "1g.18gb", "2g.35gb", "3g.71gb"]
    for name, obj in site.nodes_json().items():
        if name != site.cp.name:
            assert obj["metadata"]["labels"][LABEL] == "upgrade-done" and not obj["spec"].get("unschedulable")


def test_plain_pyinfra_takes_the_driver_down_and_up_again(site):
    """Rollback without the rollout command: the file's other driver version through plain ``pyinfra inventory.py
    deploys/gpu_node.py`` on one node, then the first one again. Each way the held packages change version and are
    held again and the node's driver (after the deploy's reboot) reports the file's version; MIG is left as it is."""
    g1 = site.gpus[0]
    start = driver_of(site, g1)[0]
    layout = A if placed(site.ssh, g1) == ["3g.71gb", "3g.71gb"] else B
    before = placed(site.ssh, g1)
    for version in (OLD if start == NEW else NEW, start):
        site.write(version, layout)
        run = site.pyinfra(g1.name)
        assert run.returncode == 0, (run.stdout + run.stderr)[-8000:]
        assert driver_of(site, g1) == (version, f"{version}-1", True)
        assert pinning_of(site, g1) == ([f"nvidia-driver-pinning-{version}"], f"{version}-*")
        assert placed(site.ssh, g1) == before


def test_a_failing_step_says_which_command_failed_and_how(site):
    """A deploy step that fails on the node (apt cannot read a broken source list) fails the node's change with the
    operation, the command, its exit status and the last lines apt printed; the node stays cordoned, and once the cause
    is gone --retry-failed finishes it. The control plane is in the limit: the MIG strategy change needs its objects
    (the device plugin's ConfigMap and the node's config label), which only the first control plane applies."""
    g1 = site.gpus[0]
    limit = f"{site.cp.name},{g1.name}"
    broken = "/etc/apt/sources.list.d/broken-by-test.list"
    assert site.ssh(g1, f"echo 'this is no source line' > {broken}").returncode == 0
    try:
        site.write(NEW, B)
        code, doc, output = site.rollout("--limit", limit)
        assert code == 1, output[-8000:]
        reason = {n["name"]: n for n in doc["nodes"]}[g1.name]["reason"]
        assert reason.startswith("the change failed: the deploy failed at GPU node | NVIDIA driver | "), reason
        assert "apt-get" in reason and "exited 100" in reason, reason
        assert "broken-by-test.list" in reason, reason  # apt's own words about the file, from the output's tail
        assert "no message" not in reason
        obj = site.nodes_json()[g1.name]
        assert obj["metadata"]["labels"][LABEL] == "upgrade-failed" and obj["spec"]["unschedulable"] is True
    finally:
        site.ssh(g1, f"rm -f {broken}")
    code, doc, output = site.rollout("--limit", limit, "--retry-failed")
    assert code == 0, output[-8000:]
    assert driver_of(site, g1) == (NEW, f"{NEW}-1", True)


def test_a_kubernetes_version_rolls_the_control_plane_first_then_the_workers(site):
    """A patch back and forward again (1.36.4 → 1.36.3 → 1.36.4) through ``gpu-provision rollout``: kubelet's
    package changes class the nodes ``runtime-restart``, so the control plane goes alone in the first batch (its
    deploy runs ``kubeadm upgrade apply``) and the workers follow two at a time (``kubeadm upgrade node``); every
    node is cordoned, changed, verified and uncordoned, and ends with the cluster, its kubelet and its held packages
    at the file's version. The driver and the MIG layouts are left as they are."""
    driver = driver_of(site, site.gpus[0])[0]
    layout = A if placed(site.ssh, site.gpus[0]) == ["3g.71gb", "3g.71gb"] else B
    g1, g2, g3, g4 = site.gpus
    for version in ("1.36.3", "1.36.4"):
        site.write(driver, layout, kubernetes=version)
        code, doc, output = site.rollout()
        assert code == 0, output[-8000:]
        assert doc["batches"] == [{"index": 1, "nodes": [site.cp.name]}, {"index": 2, "nodes": [g1.name, g2.name]},
                                  {"index": 3, "nodes": [g3.name, g4.name]}], doc["batches"]
        for node in site.gpus:
            assert [s for s, _ in states(doc)[node.name]] == DONE_PATH, states(doc)[node.name]
        config = json.loads(site.kubectl("get configmap kubeadm-config -n kube-system -o json").stdout)
        assert json.loads(config["data"]["ClusterConfiguration"])["kubernetesVersion"] == f"v{version}"
        deadline = time.monotonic() + 60
        while True:  # each kubelet reports its version when it registers again after its restart
            nodes = site.nodes_json()
            kubelets = {name: obj["status"]["nodeInfo"]["kubeletVersion"] for name, obj in nodes.items()}
            if set(kubelets.values()) == {f"v{version}"} or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert kubelets == {n.name: f"v{version}" for n in site.nodes}, kubelets
        for node in site.nodes:
            held = site.ssh(node, "dpkg-query -W -f '${Version} ' kubeadm kubelet kubectl; apt-mark showhold | "
                                  "grep -xcE 'kube(adm|ctl|let)'").stdout.split()
            assert held == [f"{version}-1.1"] * 3 + ["3"], (node.name, held)
        for name, obj in nodes.items():
            assert not obj["spec"].get("unschedulable"), name
        assert driver_of(site, g1)[0] == driver
