"""The doctor's rig fault set: known faults injected on a converged rig node (one simulated H200, Docker, the
container toolkit, a device group with a user, Fabric Manager), each the way it shows on a real node, then
``gpu-provision diagnose --json`` through the CLI; the doctor must name the fault's rule and nothing else.

The node is converged once; every fault is undone by hand after its run (no reset between faults), and the last
test shows the node healthy again. Injections, and the stand-ins they go through
(rig/gpu_provision_rig/standins/README.md):

* CUDA too new for the driver: the configured image imported with ``NVIDIA_REQUIRE_CUDA=cuda>=13.2`` (driver: 13.0);
* driver/library mismatch: the stand-in module "loaded" at 580.126.09 (``nvidia-sim-load`` with another module
  version file) under the installed 580.159.04 userspace, as after a driver upgrade without a reboot;
* device permissions: the GPU user dropped from the device group (``gpasswd -d``) while the files stay 0660;
* nouveau: the GPU bound to nouveau in the node's PCI view (the ``driver`` link sysfs has) and the nvidia module
  not loaded; the rig's kernel has no ``/proc/modules``, so the PCI binding is the evidence here;
* pending kernel: a newer kernel installed (``/boot/vmlinuz-*``, ``/lib/modules/*``) with no NVIDIA modules;
* MIG mode pending: ``nvidia-smi -mig 1`` while a process holds the GPU;
* runtime not configured: the nvidia runtime removed from daemon.json and Docker restarted;
* Fabric Manager stopped: the unit stopped and the GPU's fabric registration left "In Progress" (what
  ``nvidia-smi -q`` shows on an NVSwitch system whose Fabric Manager is down, NVIDIA/NVSentinel#889), declared in the
  simulator's gpus.json;
* Xid events: records in the kernel's ``/dev/kmsg`` format read by the node's journald, so ``journalctl -k`` shows
  ``kernel: NVRM: Xid (PCI:0000:00:06): 79, ...`` lines as on a real node;
* a module refused for its signature: the kernel's record as Debian's kernels write it under Secure Boot
  ("Loading of module with unavailable key is rejected", seen in the rig's Secure Boot VMs,
  ``tests/rig/test_vm_secure_boot.py``), through the same ``/dev/kmsg`` stand-in;
* the declared state: ``/dev/nvidia0`` made 0666 where the file says 0660, group ``gpu``; no known fault names it
  (everyone may open the file), the bundle's verification report does.

The known-fault tests compare the known-fault findings; the declared-state findings a fault also brings (the
driver check after a userspace upgrade, the group's members after ``gpasswd -d``) are the declared-state rules'
business and are left aside there. The exit status counts every finding, so a converged node must have none of
either kind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterdirs import controller_dirs

from gpu_provision_rig.config import RigNode

pytestmark = [pytest.mark.rig, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "rig" / "clusters" / "host-stack.yaml"
RIG_NODE_SHAPES = [("H200", 1)]
DEPLOY = "from gpu_provision.stages.pipeline import HOST_STACK, gpu_node\n\ngpu_node(stages=HOST_STACK)\n"
USER = "alice"
#: The container image the cluster file names for GPU work (verify.container_image); absent until a test makes it.
IMAGE = "rig/train:v7"
#: The rig's first GPU: nvidia-smi's bus id, the sysfs address, and the Xid log's spelling.
BUS_ID, PCI_ADDRESS, XID_PCI = "00000000:00:06.0", "0000:00:06.0", "0000:00:06"
SIM_PCI = f"/etc/gpu-sim/pci-devices/{PCI_ADDRESS}"
#: An NVSwitch in the node's PCI view (an NVIDIA function of class 0x068000), so the driver stage's Fabric Manager,
#: forced on below, passes preflight's check against the bus.
NVSWITCH = ("d=/etc/gpu-sim/pci-devices/0000:00:1e.0 && mkdir -p $d && echo 0x10de > $d/vendor && "
            "echo 0x22a3 > $d/device && echo 0x068000 > $d/class")

#: The kernel log stand-in: a FIFO at /dev/kmsg held open by a unit that never reads it, then journald restarted so
#: it reads kernel records from there (without a reader, journald's own write-open of /dev/kmsg would block).
KMSG = ("mkfifo -m 0600 /dev/kmsg && systemd-run --quiet --unit=rig-kmsg sh -c 'exec sleep infinity <>/dev/kmsg' && "
        "for i in $(seq 100); do pid=$(systemctl show -p MainPID --value rig-kmsg); "
        "[ \"$(readlink /proc/$pid/fd/0)\" = /dev/kmsg ] && break; sleep 0.1; done && "
        "systemctl restart systemd-journald")


@pytest.fixture(scope="module")
def site(rig, rig_nodes, rig_ssh, tmp_path_factory) -> tuple[RigNode, Path]:  # type: ignore[no-untyped-def]
    """The node, fresh and converged with the host stack, and its cluster file."""
    node = rig_nodes[0]
    rig.reset_node(node.name)
    ssh = rig_ssh
    prepared = ssh(node, f"useradd -m {USER} && {NVSWITCH} && {KMSG}")
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    doc = yaml.safe_load(CLUSTER.read_text())
    doc["cluster"]["name"] = "rig-diagnose-faults"
    doc["cluster"]["ssh"].update(key=str(rig.paths.client_key), known_hosts=str(rig.paths.known_hosts))
    doc["cluster"]["controller_dirs"] = controller_dirs(rig)
    doc["defaults"]["permissions"]["users"] = [USER]
    doc["defaults"]["verify"] = {"container_image": IMAGE}
    doc["nodes"] = [{"name": node.name, "address": node.ssh_address, "gpus": {"model": "H200", "count": 1},
                     "driver": {"fabric_manager": True}}]
    work = tmp_path_factory.mktemp("diagnose-faults")
    cluster = work / "cluster.yaml"
    cluster.write_text(yaml.safe_dump(doc, sort_keys=False))
    (work / "deploy.py").write_text(DEPLOY)
    converge = subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(REPO / "inventory.py"), "deploy.py"],
                              capture_output=True, text=True, timeout=900, cwd=work,
                              env={**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "COLUMNS": "200"})
    assert converge.returncode == 0, (converge.stdout + converge.stderr)[-6000:]
    return node, cluster


@pytest.fixture
def ssh(rig_ssh, site):  # type: ignore[no-untyped-def]
    """A command on the converged node (never raises on failure)."""
    runner = rig_ssh
    return lambda command: runner(site[0], command)


@pytest.fixture
def diagnose(site, tmp_path):  # type: ignore[no-untyped-def]
    """Runs ``gpu-provision diagnose --json`` on the node; returns (exit status, [(rule, detail), ...]) of the
    known-fault rules, or with ``declared`` (exit status, [(rule, detail, fix), ...]) of every rule, the
    declared-state ones included."""
    node, cluster = site

    def run(declared: bool = False) -> tuple[int, list[Any]]:
        out = tmp_path / f"out-{time.monotonic_ns()}"
        proc = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "diagnose", str(REPO / "inventory.py"),
                               "--cluster", str(cluster), "--out", str(out), "--no-bug-report", "--json"],
                              capture_output=True, text=True, timeout=600, cwd=REPO)
        summary = json.loads(proc.stdout)
        [found] = summary["nodes"]
        assert found["node"] == node.name and found["error"] is None, proc.stdout + proc.stderr
        assert found["bundle"] == str(out / f"{node.name}.tar.gz")
        if declared:
            return proc.returncode, [(f["rule"], f["detail"], f["fix"]) for f in found["findings"]]
        return proc.returncode, [(f["rule"], f["detail"]) for f in found["findings"]
                                 if not f["rule"].startswith("declared-")]

    return run


@contextmanager
def injected(ssh: Any, inject: str, restore: str) -> Iterator[None]:
    """The fault ``inject`` makes, undone by ``restore`` afterwards whatever the test found."""
    made = ssh(inject)
    try:
        assert made.returncode == 0, made.stdout + made.stderr
        yield
    finally:
        undone = ssh(restore)
        assert undone.returncode == 0, undone.stdout + undone.stderr


def test_converged_node_raises_no_finding(diagnose):  # type: ignore[no-untyped-def]
    assert diagnose() == (0, [])


def test_image_built_for_a_newer_cuda_than_the_driver(ssh, diagnose):  # type: ignore[no-untyped-def]
    """The configured image declares CUDA 13.2 as NVIDIA's CUDA images do (``NVIDIA_REQUIRE_CUDA``); the driver
    supports CUDA 13.0."""
    inject = ("mkdir -p /root/empty-rootfs && tar -C /root/empty-rootfs -c . | docker import "
              "--change 'ENV CUDA_VERSION=13.2.0' --change 'ENV NVIDIA_REQUIRE_CUDA=cuda>=13.2' - " + IMAGE)
    with injected(ssh, inject, f"docker rmi {IMAGE}"):
        assert diagnose() == (1, [(
            "cuda-driver-insufficient", f"{IMAGE} needs CUDA 13.2; the driver supports CUDA 13.0")])


def test_userspace_upgraded_under_the_loaded_module(ssh, diagnose):  # type: ignore[no-untyped-def]
    inject = ("sed 's/580.159.04/580.126.09/' /usr/lib/gpu-sim/version > /root/module-580.126.09 && "
              "GPU_SIM_MODULE_VERSION_FILE=/root/module-580.126.09 /usr/lib/gpu-sim/nvidia-sim-load && "
              "{ nvidia-smi; test $? -eq 18; }")
    with injected(ssh, inject, "systemctl restart nvidia-sim-load && nvidia-smi -L"):
        assert diagnose() == (1, [(
            "driver-library-mismatch", "nvidia-smi printed: Failed to initialize NVML: Driver/library version "
            "mismatch (loaded kernel module 580.126.09, NVML library 580.159)")])


def test_gpu_user_not_in_the_device_group(ssh, diagnose):  # type: ignore[no-untyped-def]
    with injected(ssh, f"gpasswd -d {USER} gpu", f"gpasswd -a {USER} gpu"):
        assert diagnose() == (1, [(
            "nvml-permissions", f"user {USER} (groups: {USER}) cannot open /dev/nvidia0, /dev/nvidiactl "
            "(mode 0660, group gpu)")])


def test_nouveau_holds_the_gpu(ssh, diagnose):  # type: ignore[no-untyped-def]
    inject = (f"ln -s ../../../bus/pci/drivers/nouveau {SIM_PCI}/driver && systemctl stop nvidia-sim-load && "
              "{ nvidia-smi; test $? -eq 9; }")
    with injected(ssh, inject, f"rm {SIM_PCI}/driver && systemctl start nvidia-sim-load && nvidia-smi -L"):
        assert diagnose() == (1, [("nouveau-loaded", f"GPU {PCI_ADDRESS} is bound to nouveau")])


def test_newer_kernel_installed_without_nvidia_modules(ssh, diagnose):  # type: ignore[no-untyped-def]
    running = ssh("uname -r").stdout.strip()
    pending = f"{int(running.split('.')[0]) + 1}.0.0-1-amd64"
    inject = f"mkdir -p /lib/modules/{pending}/kernel && touch /boot/vmlinuz-{pending}"
    with injected(ssh, inject, f"rm -r /lib/modules/{pending} /boot/vmlinuz-{pending}"):
        assert diagnose() == (1, [(
            "reboot-pending", f"running kernel {running}, newest installed {pending} (no NVIDIA modules found for it)")])


def test_mig_mode_pending_behind_a_busy_gpu(ssh, diagnose):  # type: ignore[no-untyped-def]
    held = ssh("setsid gpu-sim hold --gpu 0 -- sleep 600 >/dev/null 2>&1 </dev/null & echo $!")
    pid = held.stdout.strip()
    assert pid.isdigit(), held.stdout + held.stderr
    inject = "sleep 1 && nvidia-smi -i 0 -mig 1 | grep -q 'pending enable state'"
    with injected(ssh, inject, f"kill {pid} && while kill -0 {pid} 2>/dev/null; do sleep 0.1; done && "
                               "nvidia-smi -i 0 -mig 0"):
        assert diagnose() == (1, [("mig-pending", f"GPU {BUS_ID}: MIG Disabled, pending Enabled")])


def test_docker_without_the_nvidia_runtime(ssh, diagnose):  # type: ignore[no-untyped-def]
    drop = ("import json; p = '/etc/docker/daemon.json'; d = json.load(open(p)); d.pop('runtimes'); "
            "d.pop('default-runtime'); open(p, 'w').write(json.dumps(d, indent=4))")
    inject = (f"cp -p /etc/docker/daemon.json /root/daemon.json.saved && python3 -c \"{drop}\" && "
              "systemctl restart docker && ! docker info --format '{{json .Runtimes}}' | grep -q nvidia")
    restore = ("cp -p /root/daemon.json.saved /etc/docker/daemon.json && systemctl restart docker && "
               "docker info --format '{{json .Runtimes}}' | grep -q nvidia")
    with injected(ssh, inject, restore):
        assert diagnose() == (1, [("runtime-not-configured", "docker: no 'nvidia' runtime in /etc/docker/daemon.json")])


def test_fabric_manager_stopped(ssh, diagnose):  # type: ignore[no-untyped-def]
    assert ssh("systemctl is-active nvidia-fabricmanager").stdout.strip() == "active"
    waiting = ("import json; p = '/etc/gpu-sim/gpus.json'; d = json.load(open(p)); "
               "d['gpus'][0]['fabric'] = {'state': 'In Progress', 'status': 'N/A'}; "
               "open(p, 'w').write(json.dumps(d, indent=2))")
    inject = (f"cp -p /etc/gpu-sim/gpus.json /root/gpus.json.saved && systemctl stop nvidia-fabricmanager && "
              f"python3 -c \"{waiting}\"")
    restore = "cp -p /root/gpus.json.saved /etc/gpu-sim/gpus.json && systemctl start nvidia-fabricmanager"
    with injected(ssh, inject, restore):
        assert diagnose() == (1, [("fabric-manager-down", f"GPU {BUS_ID}: fabric state In Progress, status N/A"),
                                  ("fabric-manager-down", "nvidia-fabricmanager is inactive")])


def kmsg_records(lines: list[str]) -> str:
    """A shell command writing ``lines`` to /dev/kmsg as the kernel's records (priority 4, sequence, microseconds
    since boot), one write per record."""
    first = time.time_ns() // 1000
    return " && ".join(
        f"printf '%s\\n' \"4,{first + i},$(awk '{{printf \"%.0f\", $1 * 1000000}}' /proc/uptime),-;{line}\" "
        "> /dev/kmsg && sleep 0.2" for i, line in enumerate(lines))


def test_xid_events_in_the_kernel_log(ssh, diagnose):  # type: ignore[no-untyped-def]
    lines = [f"NVRM: Xid (PCI:{XID_PCI}): 48, pid=2841, name=python3, An uncorrectable double bit error (DBE) "
             "has been detected on GPU in the framebuffer at partition 2, subpartition 0.",
             f"NVRM: Xid (PCI:{XID_PCI}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
             f"NVRM: Xid (PCI:{XID_PCI}): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."]
    inject = f"{kmsg_records(lines)} && journalctl -k -b --no-pager | grep -c 'kernel: NVRM: Xid' | grep -qx 3"
    # The journal is rotated and its archived files removed: this boot's kernel log holds no Xid line afterwards.
    restore = ("journalctl --rotate && sleep 2 && journalctl --vacuum-time=1s && "
               "! journalctl -k -b --no-pager | grep -q 'NVRM: Xid'")
    with injected(ssh, inject, restore):
        status, found = diagnose()
        assert status == 1 and [rule for rule, _ in found] == ["xid-errors", "xid-errors"], found
        assert found[0][1].startswith("Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE: ")
        assert f"x1 on {XID_PCI}; WORKFLOW_XID_48: " in found[0][1]
        assert found[1][1].startswith("Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS: ")
        assert f"x2 on {XID_PCI}; RESTART_BM: " in found[1][1]


def test_a_module_refused_for_its_signature(ssh, diagnose):  # type: ignore[no-untyped-def]
    """The rig's kernel has no /proc/modules, so no NVIDIA module shows as loaded: a refusal that names no module
    is the driver's, as on a real node whose driver did not load."""
    line = "Loading of module with unavailable key is rejected"
    inject = f"{kmsg_records([line])} && journalctl -k -b --no-pager | grep -c '{line}' | grep -qx 1"
    restore = (f"journalctl --rotate && sleep 2 && journalctl --vacuum-time=1s && "
               f"! journalctl -k -b --no-pager | grep -q '{line}'")
    with injected(ssh, inject, restore):
        assert diagnose() == (1, [("module-signature-rejected", "the kernel rejected a module (module with "
                                                                "unavailable key) x1; no NVIDIA module is loaded")])


def test_gpu_device_file_opened_to_everyone(ssh, diagnose, site):  # type: ignore[no-untyped-def]
    """The file says 0660, group gpu; the device file is made 0666. Every user can open it, so no known fault
    fires, but the node is not what the file declares: the agent's device-file check in the bundle names the file,
    the mode seen and wanted, and the commands that set it back (drift's own device-file difference for the same
    file is not named twice)."""
    with injected(ssh, "chmod 0666 /dev/nvidia0 && stat -c %a /dev/nvidia0 | grep -qx 666",
                  "chmod 0660 /dev/nvidia0 && stat -c %a /dev/nvidia0 | grep -qx 660"):
        assert diagnose(declared=True) == (1, [(
            "declared-device-files", "/dev/nvidia0: mode 0666, group gpu; the cluster file wants mode 0660, group gpu",
            "on the node: chgrp gpu /dev/nvidia0 && chmod 0660 /dev/nvidia0; then GPU_PROVISION_STAGES=permissions "
            f"pyinfra inventory.py gpu_provision.deploys.gpu_node --limit {site[0].name} keeps them "
            "(permissions.group, permissions.mode)")])


def test_every_fault_undone_leaves_no_finding(diagnose):  # type: ignore[no-untyped-def]
    assert diagnose() == (0, [])
