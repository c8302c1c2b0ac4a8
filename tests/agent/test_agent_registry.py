"""The agent's checks as a table: the rows drive the run, ids stay as reports know them, readings are taken once."""

from __future__ import annotations

import copy
import json
import re
from functools import cached_property
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpu_provision.node.verify import checks, nvsmi, readings
from gpu_provision.node.verify.main import self_command
from gpu_provision.node.verify.node_readings import NodeReadings
from gpu_provision.node.verify.registry import CHECKS, SUBJECTS, Row, run_checks
from gpu_provision.node.verify.report import Check, passed
from gpu_provision.verify.expect import build_expectations

MIG_UUID = "MIG-5c2b8b1e-0d6e-5b3c-9f1a-3e2d1c0b9a87"
GOOD_STAT = {"owner": "root", "group": "video", "mode": "0660"}
VECTOR_ADD = {"elements": 1048576, "mismatches": 0, "seconds": 0.25}
BANDWIDTH = {"gbps": 2300.0, "bytes_per_copy": 1 << 30, "repeats": 10, "data_ok": True}
PEER_COPY = {"src": 1, "dst": 2, "can_access_peer": 1, "gbps": 40.0, "bytes_per_copy": 1 << 28, "repeats": 5,
             "data_ok": True}


def _pattern(template: str) -> re.Pattern[str]:
    """A registered id template as a regular expression over concrete ids."""
    fields = {"gpu": r"\d+", "src": r"\d+", "dst": r"\d+", "slice": r"(?:\.gi\d+|\.mig\d+)?"}
    parts = re.split(r"\{(\w+)\}", template)
    return re.compile("".join(fields[p] if i % 2 else re.escape(p) for i, p in enumerate(parts)) + "$")


REGISTERED = {template: _pattern(template) for row in CHECKS for template in row.produces}


def _registered_as(check_id: str) -> list[str]:
    return [template for template, pattern in REGISTERED.items() if pattern.match(check_id)]


@pytest.fixture
def expect() -> dict[str, Any]:
    """Three H200s, GPU 0 split into one 3g.71gb instance; Kubernetes without a probe pod."""
    return build_expectations("n1", "H200", 3, driver_version="580", cuda_min="12.4",
                              mig={0: [{"profile": "3g.71gb", "start": 0, "size": 4}]},
                              device_permissions={"group": "video", "mode": "0660"},
                              kubernetes={"enabled": True, "node_name": "n1",
                                          "allocatable": {"nvidia.com/gpu": 2, "nvidia.com/mig-3g.71gb": 1}},
                              ).to_dict()


@pytest.fixture
def node(fixtures: Path) -> SimpleNamespace:
    """Readings of that node as plain values: every outcome of the CUDA and peer probes appears once."""
    base = nvsmi.parse_query_xml((fixtures / "h200" / "nvsmi_q.xml").read_text())["gpus"][0]
    gpus = [dict(copy.deepcopy(base), index=i, minor_number=i, uuid=f"GPU-{i}") for i in range(3)]
    gpus[0].update(mig_current=True, mig_pending=True)
    gpus[2]["persistence_mode"] = False
    return SimpleNamespace(
        proc_version=(fixtures / "h200" / "proc_driver_nvidia_version.txt").read_text(),
        smi_driver="580.159.04",
        cuda_version=("13.0", "nvidia-smi -q -x"),
        gpus=gpus,
        pci=[{"bus_id": f"0000:00:0{6 + i}.0", "device_id": "0x233510DE", "class": "0x030200"} for i in range(3)],
        nvidiactl=("/dev/nvidiactl", GOOD_STAT),
        lgi=[{"gpu": 0, "instance_id": 1, "profile": "3g.71gb", "start": 0, "size": 4}],
        lci=[{"gpu": 0, "gpu_instance_id": 1}],
        device_files={0: ("/dev/nvidia0", GOOD_STAT), 1: ("/dev/nvidia1", GOOD_STAT), 2: ("/dev/nvidia2", None)},
        relinked={},
        cuda_targets=[{"uuid": MIG_UUID, "gpu": 0, "slice": ".gi1", "size": 4},
                      {"uuid": "GPU-1", "gpu": 1, "slice": "", "size": None},
                      {"uuid": "GPU-2", "gpu": 2, "slice": "", "size": None}],
        cuda_results=({MIG_UUID: {"name": "NVIDIA H200 MIG 3g.71gb", "vector_add": VECTOR_ADD,
                                  "bandwidth": BANDWIDTH},
                       "GPU-1": {"error": "CUDA probe exited 1: no device"}}, 2.0),
        cuda_skip=None,
        listing={0: {"index": 0, "mig": [{"device": 0, "uuid": MIG_UUID}]}, 1: {"index": 1}, 2: {"index": 2}},
        peer_pairs=[{"src": 1, "dst": 2, "result": PEER_COPY, "p2p": {"read": "OK", "write": "OK"},
                     "link_gbps": None, "duration_s": 0.5},
                    {"src": 2, "dst": 1, "error": "peer probe exited 1: out of memory"}],
        container=None,
        want_devices=3,
        node_object=({"status": {"allocatable": {"nvidia.com/gpu": "2", "nvidia.com/mig-3g.71gb": "1"}}}, None),
        labelled_node=({"status": {"allocatable": {"nvidia.com/gpu": "2", "nvidia.com/mig-3g.71gb": "1"}}}, None),
        pod=None,
    )


def test_the_table_drives_the_run(node: SimpleNamespace, expect: dict[str, Any]) -> None:
    found = run_checks(node, expect)
    assert [(c.id, c.status) for c in found] == [
        ("node.driver.loaded", "pass"), ("node.driver.version", "pass"), ("node.cuda.version", "pass"),
        ("node.gpu.count", "pass"), ("node.pci.gpus", "pass"), ("node.device_file.nvidiactl", "pass"),
        ("gpu0.model", "pass"), ("gpu0.persistence", "pass"), ("gpu0.ecc.mode", "pass"),
        ("gpu0.ecc.uncorrected", "pass"), ("gpu0.ecc.remapped_rows", "pass"), ("gpu0.ecc.retired_pages", "skip"),
        ("gpu0.mig.mode", "pass"), ("gpu0.mig.layout", "pass"), ("gpu0.mig.compute_instances", "pass"),
        ("gpu0.device_file", "pass"),
        ("gpu1.model", "pass"), ("gpu1.persistence", "pass"), ("gpu1.ecc.mode", "pass"),
        ("gpu1.ecc.uncorrected", "pass"), ("gpu1.ecc.remapped_rows", "pass"), ("gpu1.ecc.retired_pages", "skip"),
        ("gpu1.mig.mode", "pass"), ("gpu1.device_file", "pass"),
        ("gpu2.model", "pass"), ("gpu2.persistence", "fail"), ("gpu2.ecc.mode", "pass"),
        ("gpu2.ecc.uncorrected", "pass"), ("gpu2.ecc.remapped_rows", "pass"), ("gpu2.ecc.retired_pages", "skip"),
        ("gpu2.mig.mode", "pass"), ("gpu2.device_file", "fail"),
        ("gpu0.pcie.link_gen", "pass"), ("gpu0.pcie.link_width", "pass"),
        ("gpu1.pcie.link_gen", "pass"), ("gpu1.pcie.link_width", "pass"),
        ("gpu2.pcie.link_gen", "pass"), ("gpu2.pcie.link_width", "pass"),
        ("gpu0.gi1.cuda.vector_add", "pass"), ("gpu0.gi1.memory.bandwidth", "pass"),
        ("gpu1.cuda.vector_add", "fail"), ("gpu1.memory.bandwidth", "skip"),
        ("gpu2.cuda.vector_add", "fail"), ("gpu2.memory.bandwidth", "skip"),
        ("gpu1-gpu2.p2p.access", "pass"), ("gpu1-gpu2.p2p.bandwidth", "pass"),
        ("gpu2-gpu1.p2p.access", "fail"),
        ("node.container.gpus", "skip"), ("node.kubernetes.allocatable", "pass"), ("node.kubernetes.labels", "skip"),
        ("node.kubernetes.pod_cuda", "skip"),
    ]
    by_id = {c.id: c for c in found}
    assert by_id["gpu0.gi1.cuda.vector_add"].mig_uuid == MIG_UUID
    # A 3g.71gb slice holds 4 of the GPU's 8 memory slices: half the model's bandwidth is its reference.
    assert by_id["gpu0.gi1.memory.bandwidth"].expected["share"] == 0.5
    assert by_id["gpu0.gi1.cuda.vector_add"].duration_s == 0.25
    assert by_id["gpu0.gi1.memory.bandwidth"].duration_s == 1.0
    assert by_id["gpu1.cuda.vector_add"].reason == "CUDA probe exited 1: no device"
    assert by_id["gpu2.cuda.vector_add"].reason == "CUDA did not list this device"
    assert by_id["gpu2-gpu1.p2p.access"].reason == "peer probe exited 1: out of memory"
    assert by_id["gpu1-gpu2.p2p.bandwidth"].duration_s == 0.5
    assert by_id["gpu2.device_file"].reason == "/dev/nvidia2 does not exist"
    assert by_id["node.kubernetes.pod_cuda"].reason.startswith("no pod image")


def test_no_cuda_device_and_mig_without_devices(node: SimpleNamespace, expect: dict[str, Any]) -> None:
    node.cuda_targets, node.cuda_skip, node.peer_pairs = [], "libcuda.so.1 not loadable: gone", []
    node.listing = {0: {"index": 0}}
    by_id = {c.id: c for c in run_checks(node, expect)}
    assert by_id["node.cuda.vector_add"].reason == "libcuda.so.1 not loadable: gone"
    assert by_id["gpu0.mig.cuda"].status == "skip" and by_id["gpu0.mig.cuda"].gpu == 0
    assert "gpu1.mig.cuda" not in by_id


def test_every_produced_id_is_registered_and_every_registered_id_is_produced(
        node: SimpleNamespace, expect: dict[str, Any]) -> None:
    produced = [c.id for c in run_checks(node, expect)]
    node.cuda_targets, node.cuda_skip, node.listing = [], "no libcuda", {}
    produced += [c.id for c in run_checks(node, expect)]
    assert [i for i in produced if len(_registered_as(i)) != 1] == []
    assert {t for i in produced for t in _registered_as(i)} == set(REGISTERED)


def test_real_reports_use_only_registered_ids(fixtures: Path) -> None:
    """No documented list of check ids exists; the reports captured on H200 hosts are the ids users know."""
    reports = sorted((fixtures / "device").rglob("verify-report*.json"))
    assert reports
    for path in reports:
        ids = [c["id"] for c in json.loads(path.read_text())["checks"]]
        assert [i for i in ids if not _registered_as(i)] == [], path.name


def test_rows_read_only_known_readings() -> None:
    readings_of_a_node = {name for name, value in vars(NodeReadings).items() if isinstance(value, cached_property)}
    for row in CHECKS:
        assert row.each in SUBJECTS, row.id
        assert set(row.needs) - {row.each} <= readings_of_a_node, row.id
    assert len({row.id for row in CHECKS}) == len(CHECKS)


def _raises(*values: Any) -> Check:
    raise RuntimeError("bad reading shape")


def test_a_guarded_check_that_raises_is_a_failed_check(node: SimpleNamespace, expect: dict[str, Any]) -> None:
    table = (Row("gpu{gpu}.broken", "gpu", ("gpu",), _raises),
             Row("node.fine", "node", (), lambda expect: passed("node.fine", 1, 1)))
    found = run_checks(node, expect, table)
    assert [(c.id, c.status, c.gpu) for c in found] == [
        ("gpu0.broken", "fail", 0), ("gpu1.broken", "fail", 1), ("gpu2.broken", "fail", 2), ("node.fine", "pass", None)]
    assert found[0].reason == "check raised RuntimeError: bad reading shape"


def test_an_unguarded_check_or_a_reading_that_raises_is_an_agent_error(
        node: SimpleNamespace, expect: dict[str, Any]) -> None:
    with pytest.raises(RuntimeError):
        run_checks(node, expect, (Row("node.broken", "node", (), _raises, guarded=False),))

    class Unreadable(SimpleNamespace):
        @property
        def pci(self) -> Any:
            raise OSError("sysfs vanished")

    with pytest.raises(OSError):
        run_checks(Unreadable(**{k: v for k, v in vars(node).items() if k != "pci"}), expect,
                   (Row("node.gpu.count", "node", ("gpus", "pci"), checks.count_checks),))


def _commands_of_one_run(expect: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[Any],
                                                                                             dict[str, Any]]:
    """The nvidia-smi arguments one agent run used, in order, with its checks and report header."""
    commands: list[str] = []
    real_run = readings.run

    def counting(argv: list[str], *args: Any, **kwargs: Any) -> dict[str, Any]:
        commands.append(" ".join(argv[1:]))
        return real_run(argv, *args, **kwargs)

    monkeypatch.setattr(readings, "run", counting)
    node = NodeReadings(expect, self_command())
    node.start_background()
    found = run_checks(node, expect)
    host = node.host()
    node.close()
    return commands, found, host


def test_each_reading_is_taken_once_and_a_node_without_mig_is_not_listed(sim_node, monkeypatch: pytest.MonkeyPatch
                                                                          ) -> None:
    """Every row shares one ``nvidia-smi -q -x``; without MIG the GPUs' UUIDs come from it, so ``-L`` (which pairs
    MIG devices with their UUIDs) is not run: one stand-in nvidia-smi call fewer per node and per run."""
    commands, found, host = _commands_of_one_run(sim_node.expect(2), monkeypatch)
    assert commands == ["-q -x"]
    assert {c.status for c in found} == {"pass", "skip"}
    assert host["gpus"][0]["index"] == 0 and "cuda_wall_s" in host


def test_a_node_with_mig_on_is_listed_once(sim_node, monkeypatch: pytest.MonkeyPatch) -> None:
    sim_node.smi("-i", "0", "-mig", "1")
    sim_node.smi("mig", "-i", "0", "-cgi", "9,9", "-C")
    wanted = {0: [{"profile": "3g.71gb", "start": 0, "size": 4}, {"profile": "3g.71gb", "start": 4, "size": 4}]}
    commands, found, _ = _commands_of_one_run(sim_node.expect(2, mig=wanted), monkeypatch)
    assert commands == sorted(set(commands), key=commands.index)
    assert commands.count("-L") == 1 and "-q -x" in commands
    # The two 3g.71gb devices were found through the listing: one CUDA subject (a skip without libcuda) each.
    assert {c.id for c in found if c.mig_uuid} == {"gpu0.gi1.cuda.vector_add", "gpu0.gi1.memory.bandwidth",
                                                    "gpu0.gi2.cuda.vector_add", "gpu0.gi2.memory.bandwidth"}


def test_state_checks_start_no_work(sim_node) -> None:  # type: ignore[no-untyped-def]
    """The support bundle's run (``verify --state``): the node's state against the file, and no CUDA child,
    container or pod started, so a bad GPU cannot hold the collection."""
    from gpu_provision.node.verify.main import verify
    from gpu_provision.node.verify.registry import STATE_CHECKS

    kept = {pattern for row in STATE_CHECKS for pattern in row.produces}
    assert {"node.driver.version", "node.device_file.nvidiactl", "gpu{gpu}.device_file", "gpu{gpu}.persistence",
            "gpu{gpu}.mig.layout"} <= kept
    assert not [p for p in kept if p.endswith(("vector_add", "bandwidth", "container.gpus", "pod_cuda", "p2p.access",
                                                 "link_gen"))]
    found, host = verify(sim_node.expect(2), state_only=True)
    assert {c.status for c in found} == {"pass", "skip"}
    assert "gpu1.device_file" in {c.id for c in found} and host["cuda_wall_s"] == 0.0
