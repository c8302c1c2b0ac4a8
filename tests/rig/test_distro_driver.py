"""``driver.install_method: distro`` with Debian's real NVIDIA packages on a rig node, built by real DKMS.

The node reaches Debian's archive only through the rig's apt proxy. Rig nodes run the host's kernel, for which
Debian has no headers, so the node gets a Debian kernel first, as a real node image has one: the driver stage then
builds for that installed kernel (the one the node would boot) and installs its headers, which is the documented
choice for a node whose running kernel is not installed on it.

Every test runs on a Debian 12 node and on a Debian 13 node (the rig runs both). The driver version is the one
Debian's archive holds for each (bookworm's security update 535.309.01-0+deb12u1, trixie's 550.163.01-2, read with
apt on 2026-12-02; gpu_provision/data/packages.json, source ``debian-archive``). A later update moves it: the test
then fails at the install, naming the version apt could not find.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import nodehost
import pytest
import yaml
from clusterdirs import controller_dirs
from realpackages import DKMS_MODULE, SKIP_UNLESS_ASKED, VERSIONS

from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS

#: The real-package tier (:mod:`realpackages`): Debian's archive through the rig's proxy and a real DKMS build, 10 to
#: 15 minutes on two cores.
pytestmark = [pytest.mark.rig, pytest.mark.slow, SKIP_UNLESS_ASKED]

REPO = Path(__file__).resolve().parents[2]
STAGES = ("preflight", "driver")
DEPLOY = f"from gpu_provision.stages.pipeline import gpu_node\n\ngpu_node(stages={STAGES!r})\n"
PACKAGES = ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "firmware-nvidia-gsp")
SOURCES = "/etc/apt/sources.list.d/gpu-provision-debian-nonfree.sources"
# A Debian kernel in the node image (no recommends: firmware and AppArmor are not what the test is about).
KERNEL_IMAGE = ("DEBIAN_FRONTEND=noninteractive apt-get -y -q install --no-install-recommends linux-image-amd64 "
                ">/tmp/kernel-image.log 2>&1 && linux-version list")
# The DKMS build's own duration: its make.log starts with the build's start date (second line) and was last written
# when the build ended.
BUILD_SECONDS = (f"f=$(find /var/lib/dkms/{DKMS_MODULE} -name make.log | head -1); [ -n \"$f\" ] && "
                 "echo $(( $(stat -c %Y \"$f\") - $(date -d \"$(sed -n 2p \"$f\")\" +%s) ))")
node_host = nodehost.node_host  # the fixture, by name


@pytest.fixture(scope="module", params=sorted(VERSIONS))
def node(session_rig, request):  # type: ignore[no-untyped-def]
    """The release's one node: a simulated A100, which both the 535 and the 550 branch support (the H200 needs 550)."""
    (found,) = session_rig.nodes_for([("A100-80GB", 1, request.param)])
    return found


@pytest.fixture(scope="module")
def version(node) -> str:  # type: ignore[no-untyped-def]
    """The driver version Debian's archive holds for the node's release."""
    return VERSIONS[node.suite]


@pytest.fixture(scope="module")
def kernel(rig, node, rig_ssh) -> str:  # type: ignore[no-untyped-def]
    """The node fresh, with Debian's kernel image installed; its version."""
    rig.reset_node(node.name)
    done = rig_ssh(node, "apt-get -q update >/dev/null && " + KERNEL_IMAGE, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr + rig_ssh(node, "tail -30 /tmp/kernel-image.log").stdout
    return done.stdout.split()[-1]


@pytest.fixture(scope="module")
def cluster_file(rig, node, version, tmp_path_factory) -> Path:  # type: ignore[no-untyped-def]
    """A cluster file with the one node: Debian's driver at the archive's version, proprietary modules (bookworm's
    open modules exist only at 535.261.03), no persistence daemon (no GPU answers it on a rig node)."""
    doc = {
        "version": "v1",
        "cluster": {"name": "rig-distro-driver", "kubernetes": {"enabled": False},
                    "mirrors": {"package_proxy": f"http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/"},
                    "ssh": {"user": "root", "key": str(rig.paths.client_key),
                            "known_hosts": str(rig.paths.known_hosts)},
                    "controller_dirs": controller_dirs(rig)},
        "nodes": [{"name": node.name, "address": node.ssh_address, "gpus": {"model": "A100-80GB", "count": 1},
                   "driver": {"install_method": "distro", "version": version, "kernel_modules": "proprietary",
                              "persistenced": False, "reboot": "never"}}],
    }
    path = tmp_path_factory.mktemp("distro-driver") / "cluster.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def deployment(cluster_file, pyinfra, monkeypatch):  # type: ignore[no-untyped-def]
    """Runs ``pyinfra -y inventory.py <preflight, driver>`` with the cluster file."""
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(cluster_file))
    deploy = pyinfra.deploy(DEPLOY, name="distro_driver.py")
    return lambda: pyinfra.run(REPO / "inventory.py", deploy, timeout=1800)


def drift(cluster_file: Path) -> tuple[int, dict[str, list[dict[str, object]]]]:
    """``gpu-provision drift --json`` for the two stages: exit status and the differences per node."""
    argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--cluster", str(cluster_file), "--json",
            *(arg for stage in STAGES for arg in ("--stage", stage)), str(REPO / "inventory.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, cwd=REPO)
    report = json.loads(proc.stdout)
    return proc.returncode, {n["name"]: n["differences"] for n in report["nodes"]}


def test_debian_driver_is_built_by_dkms_held_and_stays_converged(  # type: ignore[no-untyped-def]
        kernel, node, version, deployment, cluster_file, node_host, rig_ssh, record_property):
    host = node_host(node)
    own_sources = host.check_output("sha256sum /etc/apt/sources.list")
    started = time.monotonic()
    first = deployment()
    converge_s = time.monotonic() - started
    assert first.returncode == 0, first.output[-8000:]

    held = set(host.check_output("apt-mark showhold").split())
    for name in PACKAGES:
        assert host.package(name).version.startswith(version + "-"), name
        assert name in held, name
    assert host.package(f"linux-headers-{kernel}").is_installed
    assert not host.package("nvidia-driver").is_installed  # the headless set, without recommends
    status = host.check_output("dkms status")
    assert f"{DKMS_MODULE}/{version}, {kernel}, x86_64: installed" in status, status
    assert host.run(f"ls /lib/modules/{kernel}/updates/dkms/{DKMS_MODULE}.ko*").rc == 0
    sources = host.file(SOURCES).content_string
    assert "Components: contrib non-free non-free-firmware" in sources
    assert "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" in sources
    assert host.check_output("sha256sum /etc/apt/sources.list") == own_sources
    build_s = rig_ssh(node, BUILD_SECONDS).stdout.strip() or None

    started = time.monotonic()
    second = deployment()
    second_s = time.monotonic() - started
    assert second.returncode == 0, second.output[-8000:]
    totals = second.totals()
    assert (totals["success"], totals["error"]) == (0, 0), second.output[-8000:]
    assert drift(cluster_file) == (0, {node.name: []})

    timings = {"suite": node.suite, "kernel": kernel, "converge_s": round(converge_s, 1), "dkms_build_s": build_s,
               "second_run_s": round(second_s, 1)}
    record_property("timings", timings)
    print(f"\ndistro driver timings: {json.dumps(timings)}")
