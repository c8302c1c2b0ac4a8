"""``python -m bench.vm``: real VMs and a real driver build, timed, beside the GPU Operator's published figures.

1. **One VM from ``vagrant up`` to a converged stack**, by the steps of ``scripts/vagrant-demo.sh``: the box (built
   or found in the rig's cache), ``gpu-provision-rig libvirt up``, ``vagrant up --provider=libvirt`` of the
   project's Vagrantfile, the first converge by plain pyinfra (Docker from Debian's archive: the VM has no GPU, so
   no driver), a second converge (it must change nothing), and ``vagrant reload`` until the new boot is over.
2. **Real DKMS builds** (``--dkms``): the real-package tier (``tests/rig/test_distro_driver.py``: Debian's
   ``nvidia-kernel-dkms`` installed by the product on a Debian 12 and a Debian 13 rig node and built by DKMS at
   native speed), whose own report gives the converge's and the build's seconds on each.

The GPU Operator's figures are those ``shared/REFERENCE.md`` records, with their sources: a driver upgrade takes
about 4 minutes per node (the GPU Operator documentation's example) and a reboot to a ready GPU stack about 3 to 5
(a maintainer's comment on gpu-operator issue #707). Results go to ``bench/results/vm-<time>.json``. Root only;
the VM steps take about six minutes on two cores under QEMU's emulation, the DKMS tier 10 to 15 more.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from gpu_provision_rig.box import DEFAULT_SUITE, SUITES, ensure_box
from gpu_provision_rig.config import REAL_PACKAGES_ENV, RigNode
from gpu_provision_rig.libvirt import LibvirtRig, VagrantNode, VagrantProject
from gpu_provision_rig.lifecycle import Rig

REPO = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results"
#: The rig node that brings up the rig's apt proxy for the VM (the VM reaches nothing else).
PROXY_NODE = RigNode("benchvm", "127.0.10.107")
NODE = VagrantNode(1)
#: (what, seconds or a range, source) as shared/REFERENCE.md gives them.
GPU_OPERATOR = [
    ("driver upgrade per node", "about 240", "GPU Operator documentation's example (shared/REFERENCE.md)"),
    ("reboot to a ready GPU stack", "180-300", "maintainer comment, NVIDIA/gpu-operator #707 (shared/REFERENCE.md)"),
]
T = TypeVar("T")


def timed(timings: dict[str, float], name: str, action: Callable[[], T]) -> T:
    """Run ``action``, keep its wall seconds under ``name``, print them."""
    started = time.monotonic()
    result = action()
    timings[name] = round(time.monotonic() - started, 1)
    print(f"  {name}: {timings[name]} s", flush=True)
    return result


def _ok(proc: subprocess.CompletedProcess[str], what: str) -> subprocess.CompletedProcess[str]:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return proc


def _pyinfra(cluster: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GPU_PROVISION_CLUSTER": str(cluster), "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-m", "pyinfra", "-y", str(REPO / "inventory.py"),
                           str(REPO / "deploys/gpu_node.py")], capture_output=True, text=True, env=env, timeout=3600)


def _changed(output: str) -> int:
    match = re.search(r"Grand total\s+\S+\s+(\S+)", output)
    if not match:
        raise SystemExit(f"no results table in pyinfra's output:\n{output[-3000:]}")
    return 0 if match.group(1) == "-" else int(match.group(1))


def vm_steps(suite: str) -> dict[str, float]:
    """Section 1: every step's wall seconds."""
    timings: dict[str, float] = {}
    rig = Rig()
    libvirt = LibvirtRig(rig.paths)
    timed(timings, "box (built or cached)", lambda: ensure_box(rig.paths.cache, suite))
    rig.up([PROXY_NODE])
    folder = Path(tempfile.mkdtemp(prefix="bench-vm-"))
    shutil.copy(REPO / "Vagrantfile", folder / "Vagrantfile")
    project = VagrantProject(folder, {**os.environ, "GP_NODES": "1", "VAGRANT_CHECKPOINT_DISABLE": "1"})
    try:
        project.env.update(timed(timings, "libvirt up", lambda: libvirt.up(1, suite)))
        timed(timings, "vagrant up", lambda: _ok(project.vagrant("up", "--provider=libvirt"), "vagrant up"))
        cluster = project.cluster_file(folder / "cluster.yaml")
        first = timed(timings, "first converge", lambda: _ok(_pyinfra(cluster), "the first converge"))
        second = timed(timings, "second converge", lambda: _ok(_pyinfra(cluster), "the second converge"))
        if _changed(second.stdout + second.stderr) != 0:
            raise SystemExit(f"the second converge changed something:\n{second.stdout[-3000:]}")
        timings["operations changed by the first converge"] = _changed(first.stdout + first.stderr)

        def reload() -> None:
            _ok(project.vagrant("reload"), "vagrant reload")
            _ok(project.ssh(NODE, "timeout 240 systemctl is-system-running --wait"), "the boot after reload")

        timed(timings, "vagrant reload until booted", reload)
    finally:
        project.vagrant("destroy", "-f")
        libvirt.down()
        rig.remove([PROXY_NODE.name])
        if not rig.nodes():
            rig.down()
        shutil.rmtree(folder, ignore_errors=True)
    timings["from vagrant up to converged"] = round(timings["vagrant up"] + timings["first converge"], 1)
    return timings


def dkms_tier() -> list[dict[str, object]]:
    """Section 2: the real-package tier's own timings (converge, DKMS build, second run), per Debian release."""
    env = {**os.environ, REAL_PACKAGES_ENV: "1"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-s",
                           str(REPO / "tests/rig/test_distro_driver.py")], capture_output=True, text=True,
                          cwd=REPO, env=env, timeout=3600)
    found = re.findall(r"distro driver timings: (\{.*\})", proc.stdout)
    if proc.returncode != 0 or not found:
        raise SystemExit(f"the real-package tier failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}")
    return [dict(json.loads(text)) for text in found]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.vm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--suite", choices=sorted(SUITES), default=DEFAULT_SUITE, help="the box's Debian release")
    parser.add_argument("--dkms", action="store_true", help="also time a real DKMS build (10 to 15 minutes)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("python -m bench.vm needs root (libvirt, the rig)")
    load = os.getloadavg()
    print(f"VM: one {args.suite} VM from vagrant up to a converged stack (load {load[0]:.2f})", flush=True)
    result: dict[str, object] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "suite": args.suite,
                                 "cpus": os.cpu_count(), "load_before": round(load[0], 2),
                                 "vm": vm_steps(args.suite), "gpu_operator": GPU_OPERATOR}
    if args.dkms:
        print("DKMS: Debian's nvidia-kernel-dkms on rig nodes (the real-package tier)", flush=True)
        result["dkms"] = dkms_tier()
        print(f"  {result['dkms']}")
    print("GPU Operator, published:")
    for what, seconds, source in GPU_OPERATOR:
        print(f"  {what}: {seconds} s ({source})")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"vm-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
