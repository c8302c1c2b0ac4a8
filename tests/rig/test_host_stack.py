"""The host stack on rig nodes through real pyinfra runs: converge, no change, repair hand changes, GPU in a container.

Stand-ins (see rig/gpu_provision_rig/standins/): the NVIDIA driver, kernel modules and container toolkit packages
come from the rig's signed mirror and behave as documented without hardware; ``/lib/modules/<kernel>/build`` is
the stand-in for kernel headers (rig nodes run the host's kernel, which has none); the test removes it to show a
node without headers stopped by preflight, and puts it back.
Docker is Debian's ``docker.io`` through the rig's apt proxy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nodehost
import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision.stages.pipeline import HOST_STACK
from gpu_provision_rig.config import SUDO_USER, RigNode
from gpu_provision_rig.mirror import build_mirror

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "rig" / "clusters" / "host-stack.yaml"
GPU_NODE = RigNode("rigtesths1", "127.0.10.71", gpu_model="H200", gpu_count=2)
PLAIN_NODE = RigNode("rigtesths2", "127.0.10.72")
CONTAINERD_NODE = RigNode("rigtesths3", "127.0.10.73", gpu_model="H200", gpu_count=1)
RIG_NODES = [GPU_NODE, PLAIN_NODE, CONTAINERD_NODE]
DEPLOY = "from gpu_provision.stages.pipeline import HOST_STACK, gpu_node\n\ngpu_node(stages=HOST_STACK)\n"
HEADERS = "mkdir -p /lib/modules/$(uname -r)/build"
NO_HEADERS = "rm -rf /lib/modules/$(uname -r)/build"
IMAGE = ("set -e; rm -rf /tmp/img; mkdir -p /tmp/img/bin; cp /bin/busybox /tmp/img/bin/busybox; "
         "tar -C /tmp/img -c . | docker import - rig/busybox:1")
node_host = nodehost.node_host  # the fixture, by name
HELD = ("nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-container-toolkit",
        "nvidia-container-toolkit-base", "libnvidia-container-tools", "libnvidia-container1")


@pytest.fixture(scope="module")
def cluster_file(rig, rig_nodes, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """The cluster file with the rig's key and known_hosts; the nodes start fresh once per module."""
    doc = yaml.safe_load(CLUSTER.read_text())
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts))
    doc["cluster"]["controller_dirs"] = controller_dirs(rig)
    path = tmp_path_factory.mktemp("host-stack") / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    for node in rig_nodes:
        rig.reset_node(node.name)
    return path


@pytest.fixture
def drift(cluster_file):  # type: ignore[no-untyped-def]
    """Runs ``gpu-provision drift --json`` for the host-stack stages against the module's cluster file (or the one
    given); returns (exit status, {node: differences})."""

    def run(path: Path = cluster_file) -> tuple[int, dict[str, list[dict[str, object]]]]:
        argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--cluster", str(path), "--json",
                *(arg for stage in HOST_STACK for arg in ("--stage", stage)), str(REPO / "inventory.py")]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
        report = json.loads(proc.stdout)
        return proc.returncode, {n["name"]: n["differences"] for n in report["nodes"]}

    return run


@pytest.fixture
def deployment(cluster_file, pyinfra, monkeypatch):  # type: ignore[no-untyped-def]
    """Runs ``pyinfra -y inventory.py <host-stack deploy>`` with the rig cluster file."""
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster_file))
    deploy = pyinfra.deploy(DEPLOY, name="host_stack.py")
    return lambda: pyinfra.run(REPO / "inventory.py", deploy, timeout=900)


def test_preflight_stops_only_the_node_without_kernel_headers(deployment, ssh, node_host):  # type: ignore[no-untyped-def]
    for node in (GPU_NODE, CONTAINERD_NODE):
        assert ssh(node, NO_HEADERS).returncode == 0
    result = deployment()
    assert result.returncode != 0, result.output
    gpu = node_host(GPU_NODE)
    kernel = gpu.check_output("uname -r")
    assert (f"gpu-provision: preflight failed: no headers for the running kernel {kernel} and no package "
            f"linux-headers-{kernel}") in result.output
    # Nothing was installed on the node that failed; the other node got its container runtime.
    assert not gpu.package("nvidia-driver").is_installed and gpu.run("dpkg-query -W nvidia-driver").rc != 0
    assert node_host(PLAIN_NODE).service("docker").is_running


def test_converge_then_no_change(deployment, drift, ssh, node_host):  # type: ignore[no-untyped-def]
    for node in (GPU_NODE, CONTAINERD_NODE):
        assert ssh(node, HEADERS).returncode == 0
    first = deployment()
    assert first.returncode == 0, first.output[-6000:]
    gpu, containerd = node_host(GPU_NODE), node_host(CONTAINERD_NODE)
    held = set(gpu.check_output("apt-mark showhold").split())
    assert set(HELD) <= held
    assert all(gpu.package(name).is_installed for name in HELD)
    assert gpu.package("nvidia-driver").version == "580.159.04-1"
    # NVIDIA's pinning package of the file's driver branch, its pin file beside the deploy's own preferences.
    assert gpu.package("nvidia-driver-pinning-580").is_installed
    assert "Pin: version 580.*\nPin-Priority: 1000" in gpu.file(
        "/etc/apt/preferences.d/nvidia-driver-pin").content_string
    assert gpu.package("nvidia-container-toolkit").version == "1.17.8-1"
    daemon = json.loads(gpu.file("/etc/docker/daemon.json").content_string)
    assert daemon["default-runtime"] == "nvidia" and daemon["default-shm-size"] == "1g"
    assert daemon["exec-opts"] == ["native.cgroupdriver=systemd"]
    assert daemon["log-opts"] == {"max-size": "100m", "max-file": "3"}
    cdi = gpu.file("/etc/cdi/nvidia.yaml")
    assert cdi.is_file and cdi.size > 0 and gpu.file("/dev/char/195:0").is_symlink
    group = gpu.group("gpu")
    assert group.exists
    gid = group.gid
    assert gpu.file("/etc/modprobe.d/gpu-provision-nvidia.conf").content_string.endswith(
        f"NVreg_DeviceFileGID={gid} NVreg_DeviceFileMode=432\n")
    device = gpu.file("/dev/nvidia0")
    assert (device.gid, device.mode) == (gid, 0o660)
    assert "Signed-By: /etc/apt/keyrings/cuda.gpg" in gpu.file("/etc/apt/sources.list.d/cuda.sources").content_string

    # containerd as it runs: runc on systemd cgroups, nvidia the default runtime, Debian's own settings kept.
    dump = containerd.check_output("containerd config dump")
    runc = dump.split('[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]')[1].split("[")[0]
    assert "SystemdCgroup = true" in runc
    assert 'default_runtime_name = "nvidia"' in dump and 'bin_dir = "/usr/lib/cni"' in dump
    assert containerd.file("/etc/containerd/config.toml.gpu-provision.bak").is_file

    second = deployment()
    assert second.returncode == 0, second.output[-6000:]
    totals = second.totals()
    assert (totals["success"], totals["error"]) == (0, 0), second.output[-6000:]
    # The drift check reads the same wants: a node the deploy leaves alone is in sync.
    assert drift() == (0, {GPU_NODE.name: [], PLAIN_NODE.name: [], CONTAINERD_NODE.name: []})


def test_hand_changes_are_repaired_exactly(deployment, drift, ssh, node_host):  # type: ignore[no-untyped-def]
    gpu = node_host(GPU_NODE)
    daemon = json.loads(gpu.file("/etc/docker/daemon.json").content_string)
    daemon["log-opts"]["max-size"] = "1g"
    daemon["registry-mirrors"] = ["http://10.77.0.1:5000"]
    edited = json.dumps(daemon, indent=4)
    assert ssh(GPU_NODE, f"printf '%s' '{edited}' > /etc/docker/daemon.json && apt-mark unhold nvidia-driver"
               ).returncode == 0
    started = gpu.check_output("systemctl show -p ActiveEnterTimestampMonotonic docker")
    status, found = drift()
    assert status == 1 and not found[PLAIN_NODE.name] and not found[CONTAINERD_NODE.name]
    assert sorted((d["kind"], d["item"]) for d in found[GPU_NODE.name]) == [
        ("file", "/etc/docker/daemon.json"), ("package-hold", "nvidia-driver")]

    repair = deployment()
    assert repair.returncode == 0, repair.output[-6000:]
    repaired = json.loads(gpu.file("/etc/docker/daemon.json").content_string)
    assert repaired["registry-mirrors"] == ["http://10.77.0.1:5000"]
    assert repaired["log-opts"]["max-size"] == "100m" and repaired["default-runtime"] == "nvidia"
    assert gpu.file("/etc/docker/daemon.json.gpu-provision.bak").content_string == edited
    assert "nvidia-driver" in gpu.check_output("apt-mark showhold").split()
    assert gpu.check_output("systemctl show -p ActiveEnterTimestampMonotonic docker") != started
    # Exactly those two things changed: the daemon.json merge (and Docker's restart) and the hold.
    changed = [line for line in repair.host_lines(GPU_NODE.name) if line.endswith("Success")]
    assert len(changed) == 3, repair.output[-6000:]

    again = deployment()
    assert (again.returncode, again.totals()["success"]) == (0, 0), again.output[-6000:]


def test_container_through_the_nvidia_runtime_sees_the_gpu(deployment, ssh):  # type: ignore[no-untyped-def]
    install = ssh(GPU_NODE, "DEBIAN_FRONTEND=noninteractive apt-get install -y -q busybox-static && " + IMAGE)
    assert install.returncode == 0, install.stderr[-2000:]
    run = ssh(GPU_NODE, "docker run --rm -e NVIDIA_VISIBLE_DEVICES=0 rig/busybox:1 /bin/busybox ls /dev")
    assert run.returncode == 0, run.stderr
    listed = run.stdout.split()
    # nvidia is Docker's default runtime: no --runtime flag needed; only the asked-for GPU is visible.
    assert "nvidia0" in listed and "nvidiactl" in listed and "nvidia1" not in listed


TOOLKIT = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
           "libnvidia-container1")


def write_moved(doc: dict, path: Path, login: str, monkeypatch) -> Path:  # type: ignore[no-untyped-def]
    """The changed cluster file, logging in as ``login``, made the one the deploy and the CLI read."""
    doc["cluster"]["ssh"]["user"] = login
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(path))
    return path


def rollout_json(tmp_path: Path, *action: str, status: int = 0) -> dict:
    """``gpu-provision rollout [ACTION] inventory.py --json`` over the host-stack stages, which must exit with
    ``status`` (``plan`` exits 1 when it plans changes, as drift does); its JSON report."""
    env = {**os.environ, "GPU_PROVISION_STAGES": ",".join(HOST_STACK)}
    options = [] if action else ["--poll", "1", "--report-dir", str(tmp_path / "reports")]
    proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "rollout", *action, str(REPO / "inventory.py"),
                           "--json", *options], capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert proc.returncode == status, (proc.stdout + proc.stderr)[-6000:]
    return json.loads(proc.stdout)


def test_a_lower_toolkit_rolls_back_and_forward_held(rig, cluster_file, pyinfra, monkeypatch, drift, node_host,
                                                   tmp_path):  # type: ignore[no-untyped-def]
    """1.17.8 -> 1.17.7 -> 1.17.8 (both published: NVIDIA's CHANGELOG, v1.17.7 of 2025-05-13): the four held packages
    move together, down through ``gpu-provision rollout`` as root and back through plain pyinfra as the sudo user;
    the runtime stays registered with Docker and containerd, and drift then finds nothing. A missed package would
    fail apt: the stand-in toolkit depends on its base at exactly its own version, as the real one does."""
    build_mirror(rig.paths.mirror)  # a mirror served since before the stand-ins changed is brought up to date
    doc = yaml.safe_load(cluster_file.read_text())
    for version, login, way in (("1.17.7", "root", "rollout"), ("1.17.8", SUDO_USER, "pyinfra")):
        doc["defaults"]["toolkit"]["version"] = version
        moved = write_moved(doc, tmp_path / f"cluster-{version}.yaml", login, monkeypatch)
        if way == "rollout":
            results = {n["name"]: (n["result"], n["reason"]) for n in rollout_json(tmp_path)["nodes"]}
            # A toolkit change disrupts nothing (its hook runs when a container starts): each node with the toolkit
            # is changed and verified in service; the node without GPUs has nothing to change.
            assert results[GPU_NODE.name] == results[CONTAINERD_NODE.name] == ("done", None), results
            assert results[PLAIN_NODE.name] == ("done", "nothing to change"), results
        else:
            result = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="host_stack.py"), timeout=900)
            assert result.returncode == 0, result.output[-6000:]
        for node in (GPU_NODE, CONTAINERD_NODE):
            host = node_host(node)
            assert {name: host.package(name).version for name in TOOLKIT} == dict.fromkeys(TOOLKIT, f"{version}-1")
            assert set(TOOLKIT) <= set(host.check_output("apt-mark showhold").split())
            assert host.check_output("nvidia-ctk --version").startswith(
                f"NVIDIA Container Toolkit CLI version {version}")
        daemon = json.loads(node_host(GPU_NODE).file("/etc/docker/daemon.json").content_string)
        assert daemon["default-runtime"] == "nvidia"
        assert 'default_runtime_name = "nvidia"' in node_host(CONTAINERD_NODE).check_output("containerd config dump")
        assert drift(moved) == (0, {GPU_NODE.name: [], PLAIN_NODE.name: [], CONTAINERD_NODE.name: []})


DOCKER_CE = ("docker-ce", "docker-ce-cli")
DOCKER_MIRROR = "http://10.77.0.1:8080/docker/linux/{os}"


def test_docker_from_docker_s_repository_replaces_docker_io_and_rolls_both_ways_held(
        rig, cluster_file, pyinfra, monkeypatch, drift, node_host, ssh, tmp_path):  # type: ignore[no-untyped-def]
    """The GPU node moves from Debian's docker.io to Docker's own repository (the rig's stand-in, laid out as
    download.docker.com is: ``deb URL bookworm stable``, epoch-5 versions, containerd.io with the CRI plugin
    disabled in the config.toml it ships), 28.5.2 through plain pyinfra as root; then down to 28.5.1 and up again
    through ``gpu-provision rollout``, and down once more through plain pyinfra, as root and as the sudo user by
    turns. Each time docker-ce and docker-ce-cli are held at the file's version,
    docker.io is gone (Docker's packages conflict with it), nvidia stays Docker's default runtime, a container sees
    its GPU, and drift finds nothing. The containerd node moves from Debian's containerd to containerd.io 1.7.28
    (held) in the same first run, and its CRI plugin stays enabled with nvidia the default runtime."""
    build_mirror(rig.paths.mirror)
    for node in (GPU_NODE, CONTAINERD_NODE):  # when run on its own
        assert ssh(node, HEADERS).returncode == 0
    doc = yaml.safe_load(cluster_file.read_text())
    doc["cluster"]["mirrors"]["docker"] = {"url": DOCKER_MIRROR, "key_url": DOCKER_MIRROR + "/gpg"}
    gpu_doc = next(n for n in doc["nodes"] if n["name"] == GPU_NODE.name)
    containerd_doc = next(n for n in doc["nodes"] if n["name"] == CONTAINERD_NODE.name)
    containerd_doc["container_runtime"] = {"kind": "containerd", "docker_source": "docker", "version": "1.7.28"}
    gpu, containerd = node_host(GPU_NODE), node_host(CONTAINERD_NODE)
    steps = (("28.5.2", "root", "pyinfra"), ("28.5.1", SUDO_USER, "rollout"), ("28.5.2", "root", "rollout"),
             ("28.5.1", SUDO_USER, "pyinfra"))
    for step, (version, login, way) in enumerate(steps):
        gpu_doc["container_runtime"] = {"docker_source": "docker", "version": version}
        moved = write_moved(doc, tmp_path / f"cluster-docker-{step}.yaml", login, monkeypatch)
        if way == "rollout":
            plan = {n["name"]: n for n in rollout_json(tmp_path, "plan", status=1)["nodes"]}
            # A lower version is planned as a higher one is: Docker's restart, both packages named.
            assert plan[GPU_NODE.name]["disruption"] == "runtime-restart", plan[GPU_NODE.name]
            assert {(c["kind"], c["item"], c["expected"]) for c in plan[GPU_NODE.name]["changes"]} >= {
                ("package", name, f"5:{version}-1~debian.12~bookworm") for name in DOCKER_CE}, plan[GPU_NODE.name]
            results = {n["name"]: (n["result"], n["reason"]) for n in rollout_json(tmp_path)["nodes"]}
            assert results[GPU_NODE.name] == ("done", None), results
            assert results[PLAIN_NODE.name] == results[CONTAINERD_NODE.name] == ("done", "nothing to change"), results
        else:
            result = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="host_stack.py"), timeout=900)
            assert result.returncode == 0, result.output[-6000:]
        full = f"5:{version}-1~debian.12~bookworm"
        assert {name: gpu.package(name).version for name in DOCKER_CE} == dict.fromkeys(DOCKER_CE, full)
        assert set(DOCKER_CE) <= set(gpu.check_output("apt-mark showhold").split())
        assert gpu.package("containerd.io").is_installed
        assert not gpu.package("docker.io").is_installed and not gpu.package("containerd").is_installed
        sources = gpu.file("/etc/apt/sources.list.d/docker.sources").content_string
        assert "Suites: bookworm\n" in sources and "Components: stable\n" in sources, sources
        assert json.loads(gpu.file("/etc/docker/daemon.json").content_string)["default-runtime"] == "nvidia"
        assert gpu.service("docker").is_running and gpu.service("containerd").is_running
        image = ssh(GPU_NODE, "docker image inspect rig/busybox:1 >/dev/null 2>&1 || (DEBIAN_FRONTEND=noninteractive "
                              "apt-get install -y -q busybox-static && " + IMAGE + ")")
        assert image.returncode == 0, image.stderr[-2000:]
        run = ssh(GPU_NODE, "docker run --rm -e NVIDIA_VISIBLE_DEVICES=0 rig/busybox:1 /bin/busybox ls /dev")
        assert run.returncode == 0, run.stderr
        assert "nvidia0" in run.stdout.split() and "nvidia1" not in run.stdout.split()
        assert containerd.package("containerd.io").version == "1.7.28-1~debian.12~bookworm"
        assert "containerd.io" in containerd.check_output("apt-mark showhold").split()
        dump = containerd.check_output("containerd config dump")
        assert 'default_runtime_name = "nvidia"' in dump and '"cri"' not in dump.split("[")[0], dump[:2000]
        assert drift(moved) == (0, {GPU_NODE.name: [], PLAIN_NODE.name: [], CONTAINERD_NODE.name: []})
