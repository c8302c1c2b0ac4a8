"""MIG behaviour of the simulator, run as a plain program against temp config and state."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from simnode import H200_HOST, H200X2_HOST, SIM, SimNode

from gpu_provision.node import catalog

A100_40 = [{"model": "A100-40GB", "index": 0, "uuid": "GPU-00000000-0000-0000-0000-0000000000a1",
            "pci_bus_id": "00000000:07:00.0", "serial": "1562021001122"}]
RTX_PRO_6000 = [{"model": "RTX-PRO-6000", "index": 0, "uuid": "GPU-00000000-0000-0000-0000-0000000000b6",
                 "pci_bus_id": "00000000:17:00.0", "serial": "1652025000601"}]
A100_80 = [{"model": "A100-80GB", "index": 0, "uuid": "GPU-00000000-0000-0000-0000-0000000000a8",
            "pci_bus_id": "00000000:0F:00.0", "serial": "1562021009999"}]


def gis(node: SimNode, gpu: int = 0) -> list[tuple[str, int, str]]:
    """(profile name, GI id, start:size) for every GPU instance on ``gpu``, from `mig -lgi`."""
    out = node.run("mig", "-lgi", "-i", str(gpu))
    rows = []
    for line in out.stdout.splitlines():
        parts = line.strip("| ").split()
        if len(parts) == 6 and parts[1] == "MIG":
            rows.append((parts[2], int(parts[4]), parts[5]))
    return sorted(rows, key=lambda r: r[2])


@pytest.fixture
def h200(sim_node: SimNode) -> SimNode:
    sim_node.configure(H200_HOST)
    return sim_node


def test_enable_then_instances_listed(h200: SimNode) -> None:
    assert h200.smi("-i", "0", "-mig", "1") == "Enabled MIG Mode for GPU 00000000:00:06.0\nAll done.\n"
    assert h200.smi("--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader") == "Enabled, Enabled\n"
    empty = h200.run("mig", "-lgi")
    assert empty.returncode == 6
    out = h200.smi("mig", "-cgi", "9,3g.71gb", "-C")
    assert out.splitlines() == [
        "Successfully created GPU instance ID  2 on GPU  0 using profile MIG 3g.71gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  2 using profile MIG 3g.71gb (ID  2)",
        "Successfully created GPU instance ID  1 on GPU  0 using profile MIG 3g.71gb (ID  9)",
        "Successfully created compute instance ID  0 on GPU  0 GPU instance ID  1 using profile MIG 3g.71gb (ID  2)",
    ]
    assert gis(h200) == [("3g.71gb", 1, "0:4"), ("3g.71gb", 2, "4:4")]
    listing = h200.smi("-L").splitlines()
    assert listing[0].startswith("GPU 0: NVIDIA H200 (UUID: GPU-7a01bbbc")
    assert [line.split("Device")[0].strip() for line in listing[1:]] == ["MIG 3g.71gb", "MIG 3g.71gb"]
    assert all("(UUID: MIG-" in line for line in listing[1:])


def test_mixed_layout_driver_placement(h200: SimNode) -> None:
    """The MIG guide's -cgi 19,14,5 example: 1g at 6, 2g at 4, 4g at 0 (ids 13, 5, 1)."""
    h200.smi("-mig", "1")
    out = h200.smi("mig", "-cgi", "19,14,5")
    assert [line.split("ID")[1].split()[0] for line in out.splitlines()] == ["13", "5", "1"]
    assert gis(h200) == [("4g.71gb", 1, "0:4"), ("2g.35gb", 5, "4:2"), ("1g.18gb", 13, "6:1")]
    lgip = h200.smi("mig", "-lgip")
    free = {line.split()[3]: line.split()[5] for line in lgip.splitlines() if " MIG " in line}
    assert free["1g.18gb"] == "0/7", "all seven compute slices are taken"
    assert free["7g.141gb"] == "0/1"
    assert free["3g.71gb"] == "0/2"


def test_unlucky_order_fails_but_explicit_placements_fit(h200: SimNode) -> None:
    """Four 1g first leave no aligned half for a 3g; placing them explicitly makes the same set fit."""
    h200.smi("-mig", "1")
    proc = h200.run("mig", "-cgi", "19,19,19,19,9")
    assert proc.returncode != 0
    assert "Failed to create GPU instances: Insufficient Resources" in proc.stderr
    assert len(gis(h200)) == 4, "instances created before the failing one stay, like the real driver"
    h200.smi("mig", "-dgi")
    assert h200.run("mig", "-lgi").returncode == 6
    h200.smi("mig", "-cgi", "1g.18gb:0,1g.18gb:1,1g.18gb:2,1g.18gb:3,3g.71gb:4", "-C")
    assert gis(h200) == [
        ("1g.18gb", 7, "0:1"), ("1g.18gb", 8, "1:1"), ("1g.18gb", 9, "2:1"), ("1g.18gb", 10, "3:1"),
        ("3g.71gb", 2, "4:4"),
    ]


@pytest.mark.parametrize(
    ("request_", "ok"),
    [
        ("19,19,19,19,19,19,19", True),
        ("19,19,19,19,19,19,19,19", False),  # max 7
        ("20,20", False),  # +me at most once
        ("15,15,15,15", True),
        ("15,15,15,15,19", False),  # memory full
        ("14,14,14,19", True),
        ("14,14,14,15", True),  # 2g at 4, 2, 0 then 1g.35gb at 6:2: 7 compute and 8 memory slices
        ("9,9", True),
        ("9,9,19", False),
        ("5,9", True),
        ("0", True),
        ("0,19", False),
        ("5,5", False),
    ],
)
def test_capacity_rules(h200: SimNode, request_: str, ok: bool) -> None:
    h200.smi("-mig", "1")
    proc = h200.run("mig", "-cgi", request_)
    assert (proc.returncode == 0) == ok, (request_, proc.stdout, proc.stderr)


@pytest.mark.parametrize(
    ("request_", "ok"),
    [
        ("65", True),  # 1g.24gb+me.all
        ("65,67,67,67", True),  # -me instances have no media engine, so they sit beside +me.all
        ("64,66", True),  # 2g.48gb+me.all beside 2g.48gb-me
        ("21,14,14,14", True),  # +me leaves media engines to the others
        ("21,65", False),  # +me and +me.all both hold the one OFA
        ("65,21", False),
        ("64,21", False),
        ("65,14", False),  # +me.all takes every media engine: a plain 1g cannot sit beside it
        ("14,65", False),
        ("65,47", False),  # nor a +gfx one
        ("64,5", False),
    ],
)
def test_all_media_engines_rules(sim_node: SimNode, request_: str, ok: bool) -> None:
    sim_node.configure(RTX_PRO_6000)
    sim_node.smi("-mig", "1")
    proc = sim_node.run("mig", "-cgi", request_)
    assert (proc.returncode == 0) == ok, (request_, proc.stdout, proc.stderr)
    if not ok:
        assert "Failed to create GPU instances: Insufficient Resources" in proc.stderr


def test_all_media_engines_free_counts(sim_node: SimNode) -> None:
    """Beside a +me.all instance -lgip counts only -me profiles as free."""
    sim_node.configure(RTX_PRO_6000)
    sim_node.smi("-mig", "1")
    sim_node.smi("mig", "-cgi", "1g.24gb+me.all")
    lgip = sim_node.smi("mig", "-lgip")
    free = {line.split()[3]: line.split()[5] for line in lgip.splitlines() if " MIG " in line}
    assert free["1g.24gb-me"] == "3/4"
    assert free["2g.48gb-me"] == "1/2"
    assert free["1g.24gb"] == "0/4"
    assert free["1g.24gb+me"] == "0/1"
    assert free["1g.24gb+gfx"] == "0/4"
    assert free["2g.48gb+me.all"] == "0/1"


def test_invalid_placement_and_unknown_profile(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    assert h200.run("mig", "-cgi", "3g.71gb:2").returncode != 0  # 3g starts only at 0 or 4
    unknown = h200.run("mig", "-cgi", "3g.20gb")
    assert unknown.returncode == 6
    assert "Unable to find GPU instance profile 3g.20gb" in unknown.stdout


def test_create_requires_mig_enabled(h200: SimNode) -> None:
    proc = h200.run("mig", "-cgi", "9")
    assert proc.returncode == 6
    assert "No MIG-enabled devices found." in proc.stdout


def test_destroy_order_and_specific_ids(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "9,9", "-C")
    refused = h200.run("mig", "-dgi", "-gi", "1")
    assert refused.returncode != 0 and "In use by another client" in refused.stderr
    assert h200.smi("mig", "-dci", "-gi", "1") == (
        "Successfully destroyed compute instance ID  0 from GPU  0 GPU instance ID  1\n"
    )
    assert h200.smi("mig", "-dgi", "-gi", "1") == "Successfully destroyed GPU instance ID  1 from GPU  0\n"
    assert gis(h200) == [("3g.71gb", 2, "4:4")]
    lci = h200.smi("mig", "-lci")
    assert "MIG 3g.71gb" in lci and lci.count("MIG ") == 1
    h200.smi("mig", "-dci")
    h200.smi("mig", "-dgi")
    h200.smi("mig", "-cgi", "14", "-i", "0")
    assert h200.smi("mig", "-cci", "-gi", "5").startswith("Successfully created compute instance ID  0")


def test_disable_refused_while_instances_exist(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "0")
    proc = h200.run("-mig", "0")
    assert proc.returncode != 0
    assert "Unable to disable MIG Mode for GPU 00000000:00:06.0: In use by another client" in proc.stderr
    h200.smi("mig", "-dgi")
    assert h200.smi("-mig", "0") == "Disabled MIG Mode for GPU 00000000:00:06.0\nAll done.\n"


def _hold(node: SimNode, gpu: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, str(SIM), "gpu-sim", "hold", "--gpu", str(gpu), "--mem", "1024", "--", "sleep", "60"],
        env=node.env,
    )
    for _ in range(200):
        if node.state().get("processes"):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("hold did not register")


def test_busy_gpu_blocks_mig_change_and_reset(sim_node: SimNode) -> None:
    sim_node.configure(H200X2_HOST)
    holder = _hold(sim_node, 1)
    try:
        apps = sim_node.smi("--query-compute-apps=pid,process_name,gpu_uuid,used_memory", "--format=csv")
        assert apps.splitlines()[1].split(", ")[1:] == ["sleep", "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54", "1024 MiB"]
        assert "sleep" in sim_node.smi()
        out = sim_node.smi("-mig", "1")
        assert "Enabled MIG Mode for GPU 00000000:00:06.0" in out
        assert "Warning: MIG mode is in pending enable state for GPU 00000000:00:07.0:In use by another client" in out
        modes = sim_node.smi("--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader")
        assert modes == "0, Enabled, Enabled\n1, Disabled, Enabled\n"
        refused = sim_node.run("-r", "-i", "1")
        assert refused.returncode != 0 and "is currently in use by another process" in refused.stdout
    finally:
        holder.kill()
        holder.wait()
    assert sim_node.smi("--query-compute-apps=pid", "--format=csv,noheader") == ""
    assert "was successfully reset" in sim_node.smi("-r", "-i", "1")
    modes = sim_node.smi("--query-gpu=index,mig.mode.current,mig.mode.pending", "--format=csv,noheader")
    assert modes == "0, Enabled, Enabled\n1, Enabled, Enabled\n"


def test_daemon_client_blocks_mig_enable(h200: SimNode) -> None:
    """A handle-holding daemon (DCGM's nv-hostengine registers as one) keeps MIG pending."""
    daemon = subprocess.Popen(["sleep", "60"])
    try:
        h200.smi("gpu-sim", "client", "--name", "nv-hostengine", "--pid", str(daemon.pid))
        assert "pending enable state" in h200.smi("-mig", "1")
    finally:
        daemon.kill()
        daemon.wait()
    assert h200.smi("-mig", "1").startswith("Enabled MIG Mode")


def test_hopper_reboot_loses_mig_mode_and_instances(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "9,9", "-C")
    assert len(gis(h200)) == 2, "state survives nvidia-smi calls"
    h200.reboot()
    assert h200.smi("--query-gpu=mig.mode.current,mig.mode.pending", "--format=csv,noheader") == "Disabled, Disabled\n"
    assert h200.run("mig", "-lgi").stdout == "No MIG-enabled devices found.\n"


def test_ampere_reboot_keeps_mig_mode_but_not_instances(sim_node: SimNode) -> None:
    sim_node.configure(A100_40)
    sim_node.smi("-mig", "1")
    sim_node.smi("mig", "-cgi", "9,14,19", "-C")
    sim_node.reboot()
    assert sim_node.smi("--query-gpu=mig.mode.current", "--format=csv,noheader") == "Enabled\n"
    assert sim_node.run("mig", "-lgi").returncode == 6


def test_a100_tables(sim_node: SimNode) -> None:
    sim_node.configure(A100_40)
    lgip = sim_node.smi("mig", "-lgip")
    assert "|   0  MIG 1g.5gb          19     7/7        4.75       No     14     0     0   |" in lgip
    assert "|   0  MIG 7g.40gb          0     1/1        39.25      No     98     5     0   |" in lgip
    assert "GPU  0 Profile ID 15 Placements: {0,2,4,6}:2" in sim_node.smi("mig", "-lgipp")
    sim_node.configure(A100_80)
    assert "MIG 7g.80gb" in sim_node.smi("mig", "-lgip")
    assert sim_node.smi("--query-gpu=name,memory.total", "--format=csv,noheader") == "NVIDIA A100-SXM4-80GB, 81920 MiB\n"


def test_driver_not_loaded_and_version_mismatch(h200: SimNode) -> None:
    version = h200.root / "run" / "version"
    text = version.read_text()
    version.unlink()
    proc = h200.run()
    assert proc.returncode == 9 and "couldn't communicate with the NVIDIA driver" in proc.stdout
    version.write_text(text.replace("580.159.04", "580.126.09"))
    proc = h200.run("-L")
    assert proc.returncode == 18
    assert proc.stdout == "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.159\n"


def test_concurrent_creates_do_not_lose_updates(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    procs = [
        subprocess.Popen([sys.executable, str(SIM), "nvidia-smi", "mig", "-cgi", "19"], env=h200.env,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(7)
    ]
    assert all(p.wait(timeout=60) == 0 for p in procs)
    assert len(gis(h200)) == 7


def test_fresh_run_directory_is_a_new_boot(h200: SimNode) -> None:
    """A rebooted container keeps the host's kernel boot id but gets an empty /run: that is a reboot too."""
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "0")
    (h200.root / "run" / "boot-token").unlink()
    assert h200.smi("--query-gpu=mig.mode.current", "--format=csv,noheader") == "Disabled\n"


def test_unknown_gpu_id(h200: SimNode) -> None:
    proc = h200.run("-i", "3", "-L")
    assert (proc.returncode, proc.stdout) == (6, "No devices were found\n")


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_any_user_can_read_but_not_change(h200: SimNode) -> None:
    """nvidia-smi queries work for every user; MIG changes need root, as on a real host."""
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "0", "-C")
    shared = Path(tempfile.mkdtemp(prefix="gpusim-nonroot-"))
    try:
        shutil.copytree(h200.root, shared / "node")
        shutil.copytree(SIM.parent, shared / "sim")
        shutil.copy(catalog.__file__, shared / "sim" / "catalog.py")
        for path in [shared, *shared.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        env = {k: v.replace(str(h200.root), str(shared / "node")) for k, v in h200.env.items()}
        nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                  str(shared / "sim" / "gpusim.py"), "nvidia-smi"]
        listing = subprocess.run([*nobody, "-L"], env=env, capture_output=True, text=True, timeout=60)
        assert listing.returncode == 0, listing.stdout + listing.stderr
        assert "MIG 7g.141gb" in listing.stdout
        change = subprocess.run([*nobody, "-mig", "0"], env=env, capture_output=True, text=True, timeout=60)
        assert change.returncode == 4 and "Insufficient Permissions" in change.stdout + change.stderr
    finally:
        shutil.rmtree(shared)


def test_process_in_a_mig_device_blocks_destroying_it(h200: SimNode) -> None:
    h200.smi("-mig", "1")
    h200.smi("mig", "-cgi", "9,9", "-C")
    holder = subprocess.Popen(
        [sys.executable, str(SIM), "gpu-sim", "hold", "--gpu", "0", "--gi", "2", "--mem", "300", "--", "sleep", "60"],
        env=h200.env,
    )
    try:
        for _ in range(200):
            if h200.state().get("processes"):
                break
            time.sleep(0.05)
        summary = h200.smi()
        assert "|    0    2    0" in summary and "300MiB / 71424MiB" in summary
        refused = h200.run("mig", "-dci", "-gi", "2")
        assert refused.returncode != 0 and "In use by another client" in refused.stderr
        assert h200.smi("mig", "-dci", "-gi", "1").startswith("Successfully destroyed compute instance ID  0")
        assert h200.smi("mig", "-dgi", "-gi", "1") == "Successfully destroyed GPU instance ID  1 from GPU  0\n"
    finally:
        holder.kill()
        holder.wait()
    assert h200.smi("mig", "-dci", "-gi", "2").startswith("Successfully destroyed")
