"""The whole agent against a simulated two-GPU H200 node: the healthy node passes, injected faults fail."""

from __future__ import annotations

import os

from agentsim import H200_GPUS, by_id

from gpu_provision.verify.report import schema_problems


def test_healthy_node_passes_and_cuda_is_skipped_with_reason(sim_node, run_agent) -> None:
    rc, report = run_agent(sim_node.expect())
    assert schema_problems(report) == []
    checks = by_id(report)
    assert rc == 0, [c for c in report["checks"] if c["status"] == "fail"]
    assert report["status"] == "pass"
    for gpu in (0, 1):
        for cid in (f"gpu{gpu}.cuda.vector_add", f"gpu{gpu}.memory.bandwidth"):
            assert checks[cid]["status"] == "skip"
            assert checks[cid]["reason"].startswith("libcuda.so.1 not loadable:")
        assert checks[f"gpu{gpu}.model"]["status"] == "pass"
        assert checks[f"gpu{gpu}.pcie.link_gen"]["measured"] == 5
        assert checks[f"gpu{gpu}.persistence"]["status"] == "pass"
    assert checks["gpu0-gpu1.p2p.access"]["status"] == "skip"
    assert checks["node.driver.version"]["measured"] == "580.159.04"
    assert checks["node.cuda.version"]["measured"] == "13.0"
    assert checks["node.pci.gpus"]["measured"]["on_bus"] == 2
    assert report["summary"]["fail"] == 0 and report["summary"]["pass"] >= 20
    assert report["host"]["gpus"][1]["uuid"] == H200_GPUS[1]["uuid"]


def test_gpu_fallen_off_the_bus(sim_node, run_agent) -> None:
    """Two GPUs expected, one gone from the bus and from the driver."""
    sim_node.configure(H200_GPUS[:1])
    rc, report = run_agent(sim_node.expect(2))
    checks = by_id(report)
    assert rc == 1 and report["status"] == "fail"
    assert checks["node.gpu.count"]["status"] == "fail"
    assert checks["node.gpu.count"]["measured"] == 1 and checks["node.gpu.count"]["expected"] == 2
    assert checks["node.pci.gpus"]["status"] == "fail"
    assert "1 H200 GPU(s) on the PCI bus, expected 2" in checks["node.pci.gpus"]["reason"]


def test_gpu_on_the_bus_but_lost_by_the_driver(sim_node, run_agent) -> None:
    sim_node.configure(H200_GPUS[:1], on_bus=H200_GPUS)
    rc, report = run_agent(sim_node.expect(2))
    checks = by_id(report)
    assert rc == 1
    assert checks["node.pci.gpus"]["status"] == "fail"
    assert checks["node.pci.gpus"]["reason"] == "GPU(s) on the bus but not seen by the driver: 0000:00:07.0"


def test_wrong_mig_layout(sim_node, run_agent) -> None:
    """The file wants 1g.18gb x2 + 2g.35gb + 3g.71gb on GPU 0; the GPU has two 3g.71gb."""
    sim_node.smi("-i", "0", "-mig", "1")
    sim_node.smi("mig", "-i", "0", "-cgi", "9,9", "-C")
    wanted = {0: [{"profile": "3g.71gb", "start": 4, "size": 4}, {"profile": "2g.35gb", "start": 2, "size": 2},
                  {"profile": "1g.18gb", "start": 0, "size": 1}, {"profile": "1g.18gb", "start": 1, "size": 1}]}
    rc, report = run_agent(sim_node.expect(2, mig=wanted))
    checks = by_id(report)
    assert rc == 1
    assert checks["gpu0.mig.mode"]["status"] == "pass"
    layout = checks["gpu0.mig.layout"]
    assert layout["status"] == "fail"
    assert layout["measured"] == [{"profile": "3g.71gb", "start": 0, "size": 4},
                                  {"profile": "3g.71gb", "start": 4, "size": 4}]
    assert layout["reason"] == ("MIG layout differs: missing 1g.18gb@0, 1g.18gb@1, 2g.35gb@2; "
                                "unexpected 3g.71gb@0")
    assert checks["gpu1.mig.mode"]["status"] == "pass"  # MIG off, as wanted
    # Each MIG slice is probed on its own; without libcuda those probes are skips, one pair per slice.
    slices = [c for c in report["checks"] if c["mig_uuid"]]
    assert len(slices) == 4 and {c["status"] for c in slices} == {"skip"}
    assert {c["id"].split(".")[1] for c in slices} == {"gi1", "gi2"}


def test_matching_mig_layout_passes(sim_node, run_agent) -> None:
    sim_node.smi("-i", "0", "-mig", "1")
    sim_node.smi("mig", "-i", "0", "-cgi", "9,9", "-C")
    wanted = {0: [{"profile": "3g.71gb", "start": 0, "size": 4}, {"profile": "3g.71gb", "start": 4, "size": 4}]}
    rc, report = run_agent(sim_node.expect(2, mig=wanted))
    checks = by_id(report)
    assert rc == 0, [c for c in report["checks"] if c["status"] == "fail"]
    assert checks["gpu0.mig.layout"]["status"] == "pass"
    assert checks["gpu0.mig.compute_instances"]["status"] == "pass"


def test_gpu_instance_without_compute_instance(sim_node, run_agent) -> None:
    sim_node.smi("-i", "0", "-mig", "1")
    sim_node.smi("mig", "-i", "0", "-cgi", "9")
    # Like the real driver, the simulator puts a lone 3g.71gb at memory slice 4.
    wanted = {0: [{"profile": "3g.71gb", "start": 4, "size": 4}]}
    rc, report = run_agent(sim_node.expect(2, mig=wanted))
    checks = by_id(report)
    assert checks["gpu0.mig.layout"]["status"] == "pass"
    assert checks["gpu0.mig.compute_instances"]["status"] == "fail"
    assert "have no compute instance" in checks["gpu0.mig.compute_instances"]["reason"]
    assert rc == 1


def test_mig_expected_but_off(sim_node, run_agent) -> None:
    wanted = {1: [{"profile": "7g.141gb", "start": 0, "size": 8}]}
    rc, report = run_agent(sim_node.expect(2, mig=wanted))
    checks = by_id(report)
    assert checks["gpu1.mig.mode"]["status"] == "fail"
    assert checks["gpu1.mig.mode"]["reason"] == "MIG is disabled, the cluster file wants it enabled"
    assert rc == 1


def test_wrong_device_permissions(sim_node, run_agent) -> None:
    """The file restricts GPUs to group video with mode 0660; /dev/nvidia1 is still 0666 root."""
    dev = sim_node.root / "dev"
    for name in ("nvidiactl", "nvidia0"):
        os.chown(dev / name, 0, 44)
        os.chmod(dev / name, 0o660)
    rc, report = run_agent(sim_node.expect(2, device_permissions={"group": "video", "mode": "0660"}))
    checks = by_id(report)
    assert checks["node.device_file.nvidiactl"]["status"] == "pass"
    assert checks["gpu0.device_file"]["status"] == "pass"
    bad = checks["gpu1.device_file"]
    assert bad["status"] == "fail"
    assert bad["reason"].endswith("nvidia1: group root (want video), mode 0666 (want 0660)")
    assert bad["measured"]["mode"] == "0666"
    assert rc == 1


def test_missing_device_file(sim_node, run_agent) -> None:
    (sim_node.root / "dev" / "nvidia1").unlink()
    rc, report = run_agent(sim_node.expect(2))
    assert by_id(report)["gpu1.device_file"]["reason"].endswith("nvidia1 does not exist")
    assert rc == 1


def test_wrong_driver_pin_and_cuda_minimum(sim_node, run_agent) -> None:
    rc, report = run_agent(sim_node.expect(2, driver_version="570", cuda_min="13.1"))
    checks = by_id(report)
    assert checks["node.driver.version"]["reason"] == "driver 580.159.04 is not the pinned 570"
    assert checks["node.cuda.version"]["reason"] == "driver supports CUDA 13.0, below the required 13.1"
    assert rc == 1


def test_driver_not_loaded(sim_node, run_agent) -> None:
    (sim_node.root / "run" / "version").unlink()
    rc, report = run_agent(sim_node.expect(2))
    checks = by_id(report)
    assert checks["node.driver.loaded"]["status"] == "fail"
    assert checks["node.gpu.count"]["status"] == "fail"
    assert checks["node.cuda.vector_add"]["status"] == "skip"
    assert rc == 1


def test_persistence_off(sim_node, run_agent) -> None:
    sim_node.smi("-i", "1", "-pm", "0")
    rc, report = run_agent(sim_node.expect(2))
    checks = by_id(report)
    assert checks["gpu0.persistence"]["status"] == "pass"
    assert checks["gpu1.persistence"]["reason"] == "persistence mode is off, expected on"
    assert rc == 1


def test_unreadable_expectations_is_an_agent_error(tmp_path, run_agent) -> None:
    rc, report = run_agent({"node": "x"})  # no "gpu" section
    assert rc == 2
    assert report["status"] == "error" and "KeyError" in report["error"]
    assert schema_problems(report) == []
