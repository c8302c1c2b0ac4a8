"""Debian's real NVIDIA driver under a real kernel: a VM takes the driver stage with Debian's own packages
(``driver.install_method: distro``), reboots into it, and a second kernel meets the kernel guard.

What is real here: the VM's kernels, initramfs, boots and reboots (QEMU); Debian's packages from its archive through
the rig's proxy; the NVIDIA module, built by DKMS for each of the VM's kernels against that kernel's own headers;
``dkms status``, which the probe's kernel guard reads; and the module's load, which the kernel accepts and whose
initialisation runs until it finds no GPU ("NVRM: No NVIDIA GPU found": none can be passed through here).

What does not happen in the guest is compiling. DKMS building the module under QEMU's emulation runs for more than
an hour (RIG-NOTES), so DKMS builds it on an nspawn rig node of the same release, for the VM's kernel versions, at
native speed (about two minutes a kernel), and hands each build over as its own binary tarball (``dkms mktarball
--binaries-only``), which the VM loads with ``dkms ldtarball``: DKMS's own way for machines that should not compile.
The guest installs ``nvidia-kernel-dkms`` first, without kernel headers, so that its scripts register the module
and skip the build; the loaded binaries then stand where DKMS's build would have put them, and everything after that
(the deploy, the headers' DKMS hooks, the kernel guard, the reboots) runs as on a node that built them itself. The
tests check that the guest compiled nothing.

The second kernel is Debian's ``cloud`` flavour of the same ABI (the archive holds one ABI per release): installed
after the driver, it is the newest kernel, the one the next boot starts (``linux-update-symlinks`` points
``/vmlinuz`` at a newly installed kernel). ``gpu-provision rollout`` takes the VM into it: nouveau, loaded by hand,
gives the driver its reason to reboot, so the rollout's reboot before the change, the deploy's kernel guard and its
reboot step all meet the new kernel.

The VM's cluster file waives preflight's checks of the GPUs and of the machine's size (``preflight.ignore``), as an
operator does for a GPU-less test VM, so the deploy is the product's own pipeline; verification still fails on the
missing GPU, and the rollout leaves the node failed with that reason. Each test runs on the Debian 12 box and on
the Debian 13 one; part of the real-package tier (:mod:`realpackages`), about 25 minutes a release on two cores.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import vmguest
from realpackages import DKMS_MODULE, SKIP_UNLESS_ASKED, VERSIONS
from vmguest import IN_INITRAMFS, cluster_doc, enable_root_login, reboot, vm_copy, vm_ssh, write_cluster

from gpu_provision.spec.settings import IGNORABLE_PREFLIGHT_CHECKS
from gpu_provision.stages import distro
from gpu_provision.state import NodeStateData
from gpu_provision_rig.box import Box
from gpu_provision_rig.config import APT_PROXY_PORT, BRIDGE_ADDRESS, RigNode
from gpu_provision_rig.vm import Vm, VmSpec

pytestmark = [pytest.mark.rig, pytest.mark.slow, pytest.mark.vm, SKIP_UNLESS_ASKED]

REPO = Path(__file__).resolve().parents[2]
#: The rig itself only for its apt proxy: one plain node brings it up (the builders are the release's own).
RIG_NODE_SHAPES = [(None, 0)]
VM = VmSpec("vmdriver1", "127.0.12.2")
STAGES = ("preflight", "driver")
#: The pipeline's preflight and driver stage. The VM's cluster file waives every preflight check that may be waived
#: (``preflight.ignore``, :data:`WAIVED`: the GPUs and the machine's size): the VM has no GPU, 1.5 GiB of memory and
#: an 8 GB disk.
DEPLOY = f"from gpu_provision.stages.pipeline import gpu_node\n\ngpu_node(stages={STAGES!r})\n"
WAIVED = IGNORABLE_PREFLIGHT_CHECKS
PROXY = f"-o Acquire::http::Proxy=http://{BRIDGE_ADDRESS}:{APT_PROXY_PORT}/"
APT = f"DEBIAN_FRONTEND=noninteractive apt-get -y -q {PROXY}"


def nonfree_sources(suite: str) -> str:
    """The deploy's own file enabling Debian's non-free components (the project's data, not a copy of it), for the
    set-up steps that must install Debian's packages before the deploy runs."""
    want = distro.sources_file(NodeStateData({"system": {"os_id": "debian", "codename": suite}}))
    assert want is not None and isinstance(want.content, str)
    return want.content


#: The full Debian version of the archive's ``nvidia-kernel-dkms`` at an upstream version (``{upstream}``).
FULL_VERSION = ("apt-cache madison nvidia-kernel-dkms | awk -v u={upstream}- "
                "'index($3, u) == 1 {{ print $3; exit }}'")
NO_GPU = "0 NVIDIA GPU(s) on the PCI bus, the file expects 1 A100-80GB"
box, vm, login = vmguest.box, vmguest.vm, vmguest.login  # the fixtures, by name


def second_kernel(kernel: str) -> str:
    """Debian's cloud flavour of ``kernel``'s ABI (``6.1.0-57-amd64`` -> ``6.1.0-57-cloud-amd64``)."""
    assert kernel.endswith("-amd64"), kernel
    return kernel.removesuffix("-amd64") + "-cloud-amd64"


@pytest.fixture(scope="module")
def kernels(box: Box) -> tuple[str, str]:
    """The box's kernel, and the second kernel the tests install."""
    return box.kernel, second_kernel(box.kernel)


@pytest.fixture(scope="module")
def builds(session_rig, rig, rig_ssh, box: Box, kernels: tuple[str, str],  # type: ignore[no-untyped-def]
           tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Real DKMS builds of Debian's module for both kernels on a fresh nspawn node of the box's release: the Debian
    version built, each kernel's binary tarball on the controller, and each build's seconds."""
    suite = str(box.metadata["gpu_provision"]["suite"])  # type: ignore[index]
    (node,) = session_rig.nodes_for([(None, 0, suite)])
    rig.reset_node(node.name)
    upstream = VERSIONS[suite]
    prepare = (f"printf %s {shlex.quote(nonfree_sources(suite))} > /etc/apt/sources.list.d/nonfree.sources && "
               f"apt-get -q {PROXY} update >/dev/null && v=$({FULL_VERSION.format(upstream=upstream)}) && "
               f"[ -n \"$v\" ] && {APT} install --no-install-recommends linux-headers-{kernels[0]} "
               f"linux-headers-{kernels[1]} nvidia-kernel-dkms=$v >/tmp/build-host.log 2>&1 && echo $v "
               "|| { tail -20 /tmp/build-host.log; exit 1; }")
    started = time.monotonic()
    done = rig_ssh(node, prepare, timeout=2400)
    assert done.returncode == 0, done.stdout + done.stderr
    version = done.stdout.split()[-1]
    folder = tmp_path_factory.mktemp("dkms-binaries")
    # Debian 12's dkms (3.0) builds in the package's scripts for the running kernel only, none here (the rig node runs
    # the host's kernel): each ``dkms install`` below builds. Debian 13's (3.2) builds there for every kernel with
    # headers: the install holds both builds, and ``dkms install`` finds them done.
    out: dict[str, Any] = {"version": version, "upstream": upstream, "tarballs": {}, "build_s": {},
                           "headers_and_package_install_s": round(time.monotonic() - started, 1)}
    for kernel in kernels:
        started = time.monotonic()
        built = rig_ssh(node, f"dkms install {DKMS_MODULE}/{upstream} -k {kernel} >/tmp/dkms.log 2>&1 && "
                              f"dkms mktarball {DKMS_MODULE}/{upstream} -k {kernel} --binaries-only "
                              "| sed -n 's|^Tarball location: ||p' || { tail -30 /tmp/dkms.log; exit 1; }",
                        timeout=1800)
        out["build_s"][kernel] = round(time.monotonic() - started, 1)
        assert built.returncode == 0 and built.stdout.strip(), built.stdout + built.stderr
        out["tarballs"][kernel] = fetch(rig, node, built.stdout.strip(), folder / f"{kernel}.dkms.tar.gz")
    return out


def fetch(rig, node: RigNode, remote: str, local: Path) -> Path:  # type: ignore[no-untyped-def]
    """Copies ``remote`` from a rig node to ``local`` (scp with the rig's key and known_hosts)."""
    done = subprocess.run(["scp", "-q", "-F", "/dev/null", "-i", str(rig.paths.client_key),
                           "-o", f"UserKnownHostsFile={rig.paths.known_hosts}", "-o", "StrictHostKeyChecking=yes",
                           "-o", "BatchMode=yes", f"root@{node.ssh_address}:{remote}", str(local)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return local


def load_binaries(login: dict[str, Any], builds: dict[str, Any], kernel: str) -> None:
    """The native build for ``kernel`` into the guest's DKMS tree (``built``, not yet ``installed``). The module is
    registered by its package already, hence ``--force``; ldtarball still tries to register it again and says so
    (its exit status is not the result): ``dkms status`` is."""
    vm_copy(login, builds["tarballs"][kernel], "/tmp/nvidia-binaries.tar.gz")
    vm_ssh(login, "sudo -n dkms ldtarball --force /tmp/nvidia-binaries.tar.gz >/tmp/ldtarball.log 2>&1; "
                  "sudo -n rm -f /tmp/nvidia-binaries.tar.gz", timeout=600)
    status = vm_ssh(login, f"sudo -n dkms status -k {kernel}").stdout
    assert f"{DKMS_MODULE}/{builds['upstream']}, {kernel}, x86_64: built" in status, status


@pytest.fixture(scope="module")
def registered(vm: Vm, login: dict[str, Any], box: Box, builds: dict[str, Any],
               kernels: tuple[str, str]) -> dict[str, Any]:
    """The guest with ``nvidia-kernel-dkms`` installed without headers (registered, nothing built) and the first
    kernel's binaries loaded and installed into the kernel's tree; the seconds it took."""
    suite = str(box.metadata["gpu_provision"]["suite"])  # type: ignore[index]
    started = time.monotonic()
    install = (f"printf %s {shlex.quote(nonfree_sources(suite))} | sudo -n tee "
               "/etc/apt/sources.list.d/prebuilt.sources >/dev/null && "
               f"sudo -n apt-get -q {PROXY} update >/dev/null && sudo -n {APT} install --no-install-recommends "
               f"nvidia-kernel-dkms={builds['version']} >/tmp/prebuilt.log 2>&1; rc=$?; "
               "sudo -n rm -f /etc/apt/sources.list.d/prebuilt.sources; [ $rc = 0 ] || tail -20 /tmp/prebuilt.log; "
               "exit $rc")
    done = vm_ssh(login, install, timeout=2400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert vm_ssh(login, "ls /lib/modules/*/build 2>/dev/null").stdout == ""  # no headers: nothing was built
    load_binaries(login, builds, kernels[0])
    done = vm_ssh(login, f"sudo -n dkms install {DKMS_MODULE}/{builds['upstream']} -k {kernels[0]}", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    return {"seconds": round(time.monotonic() - started, 1)}


def cluster_file(rig, folder: Path, login: dict[str, Any], user: str, version: str) -> Path:  # type: ignore[no-untyped-def]
    """The VM as a node with one A100 (which it has not; Debian's 535 branch supports it, not the H200), taking
    Debian's driver at ``version``, reached as ``user``."""
    doc = cluster_doc(rig, login, user, VM.name)
    doc["nodes"][0]["gpus"] = {"model": "A100-80GB", "count": 1}
    doc["nodes"][0]["driver"] = {"install_method": "distro", "version": version, "kernel_modules": "proprietary",
                                 "persistenced": False, "reboot": "allowed"}
    doc["nodes"][0]["preflight"] = {"ignore": list(WAIVED)}
    return write_cluster(doc, folder, user)


def drift(path: Path) -> tuple[int, list[dict[str, Any]]]:
    """``gpu-provision drift --json`` of preflight and the driver stage: exit status and the node's differences."""
    argv = [sys.executable, "-m", "gpu_provision.cli", "drift", "--cluster", str(path), "--json",
            *(arg for stage in STAGES for arg in ("--stage", stage)), str(REPO / "inventory.py")]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600, cwd=REPO)
    (node,) = json.loads(proc.stdout)["nodes"]
    return proc.returncode, node["differences"]


#: Preflight's warning for the VM's missing GPU, which its file waives.
WAIVED_NO_GPU = f"preflight warning: {NO_GPU} (ignored: preflight.ignore)"


def make_logs(login: dict[str, Any]) -> str:
    """The guest's DKMS build logs with their checksums: the loaded tarballs bring the native builds' logs, and a
    build in the guest would write its own."""
    return vm_ssh(login, f"sudo -n find /var/lib/dkms/{DKMS_MODULE} -name make.log -exec sha256sum {{}} + "
                         "| sort").stdout


def converge(pyinfra, path: Path, login: dict[str, Any],  # type: ignore[no-untyped-def]
             monkeypatch) -> tuple[Path, float]:
    """Runs preflight and the driver stage with the cluster file at ``path``; it must succeed, with preflight's
    waived warning, and compile nothing in the guest (the build logs are the loaded ones). The deploy file (for a
    second run) and the run's seconds."""
    loaded = make_logs(login)
    assert loaded.count("make.log") >= 1, loaded
    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(path))
    deploy = pyinfra.deploy(DEPLOY, name="vm_driver.py")
    started = time.monotonic()
    first = pyinfra.run(REPO / "inventory.py", deploy, timeout=2400)
    seconds = time.monotonic() - started
    assert first.returncode == 0, first.output[-8000:]
    assert WAIVED_NO_GPU in first.output, first.output[-8000:]
    assert make_logs(login) == loaded
    return deploy, seconds


def module_facts(login: dict[str, Any]) -> dict[str, str]:
    """The running kernel, the module's version and vermagic as modinfo reads them for it, and what loading it
    does: modprobe's error and the kernel's NVRM lines."""
    ran = vm_ssh(login, f"uname -r; sudo -n modinfo -F version {DKMS_MODULE}; sudo -n modinfo -F vermagic {DKMS_MODULE}; "
                        f"sudo -n modprobe {DKMS_MODULE} 2>&1 | tail -1; sudo -n dmesg | grep -m1 'NVRM: No NVIDIA'")
    lines = ran.stdout.splitlines()
    assert len(lines) == 5, ran.stdout + ran.stderr
    return dict(zip(("kernel", "version", "vermagic", "modprobe", "nvrm"), lines, strict=True))


def test_debians_driver_is_deployed_for_the_running_kernel_and_its_module_runs_after_a_reboot(  # type: ignore[no-untyped-def]
        rig, vm: Vm, login: dict[str, Any], registered, builds, kernels, pyinfra, tmp_path: Path, monkeypatch,
        record_property) -> None:
    """As the box's sudo user: the driver stage converges Debian's packages (held), the running kernel's headers and
    the nouveau blacklist into the initramfs, compiles nothing, and a second run changes nothing; drift finds
    nothing (the missing GPU is waived). After a real reboot the kernel has the module at the pinned version and runs it until it finds
    no GPU."""
    upstream = builds["upstream"]
    path = cluster_file(rig, tmp_path, login, "vagrant", upstream)
    deploy, converge_s = converge(pyinfra, path, login, monkeypatch)
    held = vm_ssh(login, "apt-mark showhold; dpkg-query -W -f '${Status} ${Package}\\n' "
                         f"linux-headers-{kernels[0]}").stdout
    assert {"nvidia-kernel-dkms", "libcuda1", "nvidia-smi"} <= set(held.split()), held
    assert f"install ok installed linux-headers-{kernels[0]}" in held, held
    from gpu_provision.stages.driver import BLACKLIST_TEXT
    assert vm_ssh(login, IN_INITRAMFS).stdout == BLACKLIST_TEXT
    second = pyinfra.run(REPO / "inventory.py", deploy, timeout=1200)
    assert (second.returncode, second.totals()["success"], second.totals()["error"]) == (0, 0, 0), \
        second.output[-8000:]
    assert drift(path) == (0, [])

    started = time.monotonic()
    reboot(vm, login)
    reboot_s = time.monotonic() - started
    facts = module_facts(login)
    assert (facts["kernel"], facts["version"]) == (kernels[0], upstream), facts
    assert facts["vermagic"].startswith(kernels[0] + " "), facts
    assert facts["modprobe"].endswith("No such device") and "NVRM: No NVIDIA GPU found" in facts["nvrm"], facts
    timings = {"suite": vm.box.name, "kernel": kernels[0], "dkms_build_s": builds["build_s"],
               "build_node_install_s": builds["headers_and_package_install_s"],
               "guest_register_and_load_s": registered["seconds"], "converge_s": round(converge_s, 1),
               "reboot_s": round(reboot_s, 1)}
    record_property("timings", timings)
    print(f"\nvm driver timings: {json.dumps(timings)}")


def rollout(path: Path, folder: Path) -> tuple[int, dict[str, Any], str]:
    """``gpu-provision rollout --stage driver --json`` with the cluster file at ``path``: exit status, report and
    output."""
    argv = [sys.executable, "-m", "gpu_provision.cli", "rollout", str(REPO / "inventory.py"), "--cluster", str(path),
            "--stage", "driver", "--json", "--poll", "1", "--report-dir", str(folder)]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=2400, cwd=REPO)
    try:
        doc = json.loads(proc.stdout)
    except ValueError:
        doc = {}
    return proc.returncode, doc, proc.stdout[-6000:] + proc.stderr[-6000:]


def nouveau_loaded(login: dict[str, Any]) -> bool:
    return vm_ssh(login, "grep -q '^nouveau ' /proc/modules").returncode == 0


def test_a_second_kernel_is_guarded_until_dkms_has_its_module_then_the_rollout_boots_it(  # type: ignore[no-untyped-def]
        rig, vm: Vm, login: dict[str, Any], registered, builds, kernels, pyinfra, tmp_path: Path, monkeypatch,
        record_property) -> None:
    """As root: a second kernel installed after the driver has no module, and the guard says so (drift, from
    preflight) while the module is only built. With nouveau loaded the driver asks for a reboot, and
    ``gpu-provision rollout`` (``driver.reboot: allowed``) does not take it before the change, which the guard
    refuses; the change's driver stage installs the kernel's headers and its module, compiling nothing, its guard
    then lets its reboot step reboot, and the node comes up in the new kernel with the pinned module. Verification
    then fails on the missing GPU alone, and the node is left failed with that reason."""
    enable_root_login(login)
    upstream = builds["upstream"]
    path = cluster_file(rig, tmp_path, login, "root", upstream)
    started = time.monotonic()
    done = vm_ssh(login, f"sudo -n {APT} install --no-install-recommends linux-image-{kernels[1]} "
                         ">/tmp/second-kernel.log 2>&1 || { tail -20 /tmp/second-kernel.log; exit 1; }", timeout=1800)
    install_s = time.monotonic() - started
    assert done.returncode == 0, done.stdout + done.stderr
    guard = (f"kernel {kernels[1]} is installed but has no NVIDIA modules; a reboot would leave the node without a "
             "GPU driver")
    status, differences = drift(path)
    assert status == 1 and ("preflight", "kernel-guard", guard) in {
        (d["kind"], d["item"], d["actual"]) for d in differences}, differences
    load_binaries(login, builds, kernels[1])  # built, not installed: the guard reads what a boot would find
    status, differences = drift(path)
    assert guard in {d["actual"] for d in differences}, differences
    # nouveau loaded (modeset=0, as the blacklist file sets it: it binds nothing): the driver's reason to reboot.
    assert vm_ssh(login, "sudo -n modprobe nouveau modeset=0").returncode == 0 and nouveau_loaded(login)
    loaded_logs = make_logs(login)
    boot = vm_ssh(login, "cat /proc/sys/kernel/random/boot_id").stdout.strip()

    started = time.monotonic()
    code, doc, output = rollout(path, tmp_path / "reports")
    rollout_s = time.monotonic() - started
    assert code == 1 and [n["name"] for n in doc.get("nodes", [])] == [VM.name], output
    (outcome,) = doc["nodes"]
    assert outcome["result"] == "failed" and outcome["reason"].startswith("verification failed: "), outcome
    (report_path,) = (tmp_path / "reports").glob("*.json")
    checks = {c["id"]: c for c in json.loads(report_path.read_text())["checks"]}
    assert checks["node.pci.gpus"]["reason"] == "0 A100-80GB GPU(s) on the PCI bus, expected 1", checks
    assert not [c for c in checks.values() if c["status"] not in ("pass", "fail", "skip")], checks
    vm.wait_ssh()
    assert vm_ssh(login, "cat /proc/sys/kernel/random/boot_id").stdout.strip() not in ("", boot)
    assert not nouveau_loaded(login)
    assert make_logs(login) == loaded_logs
    dkms = vm_ssh(login, "sudo -n dkms status").stdout
    for kernel in kernels:
        assert f"{DKMS_MODULE}/{upstream}, {kernel}, x86_64: installed" in dkms, dkms
    facts = module_facts(login)
    assert (facts["kernel"], facts["version"]) == (kernels[1], upstream), facts
    assert facts["vermagic"].startswith(kernels[1] + " "), facts
    assert facts["modprobe"].endswith("No such device") and "NVRM: No NVIDIA GPU found" in facts["nvrm"], facts
    assert drift(path) == (0, [])

    monkeypatch.setenv("GPU_PROVISION_CLUSTER", str(path))
    again = pyinfra.run(REPO / "inventory.py", pyinfra.deploy(DEPLOY, name="vm_driver.py"), timeout=1200)
    assert (again.returncode, again.totals()["success"], again.totals()["error"]) == (0, 0, 0), again.output[-8000:]
    timings = {"suite": vm.box.name, "second_kernel": kernels[1], "kernel_install_s": round(install_s, 1),
               "rollout_s": round(rollout_s, 1)}
    record_property("timings", timings)
    print(f"\nvm second kernel timings: {json.dumps(timings)}")
