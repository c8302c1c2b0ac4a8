"""nvidia-smi parsers on real captured outputs (tests/fixtures/h200, h200x2) and documented MIG formats."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpu_provision.node.mig.nvsmi import parse_lci, parse_lgi
from gpu_provision.node.verify import nvsmi

AGENT = Path(__file__).resolve().parents[2] / "gpu_provision" / "node" / "verify"


def test_query_xml_one_gpu(fixtures: Path) -> None:
    parsed = nvsmi.parse_query_xml((fixtures / "h200" / "nvsmi_q.xml").read_text())
    assert parsed["driver_version"] == "580.159.04"
    assert parsed["cuda_version"] == "13.0"
    assert parsed["attached_gpus"] == 1
    (gpu,) = parsed["gpus"]
    assert gpu == {
        "index": 0, "minor_number": 0, "bus_id": "0000:00:06.0", "name": "NVIDIA H200",
        "uuid": "GPU-7a01bbbc-8780-9e2b-9ffe-56c5caa0e387", "pci_device_id": "0x233510DE",
        "persistence_mode": True, "mig_current": False, "mig_pending": False,
        "ecc_current": True, "ecc_pending": True, "ecc_uncorrected_volatile": 0, "ecc_uncorrected_aggregate": 0,
        "retired_pending": None, "retired_count": None,
        "remapped_rows": {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False},
        "pcie_gen_current": 5, "pcie_gen_max": 5, "pcie_gen_device_max": 5,
        "pcie_width_current": 16, "pcie_width_max": 16, "performance_state": "P0", "memory_total_mib": 143771,
    }


def test_query_xml_two_gpus(fixtures: Path) -> None:
    parsed = nvsmi.parse_query_xml((fixtures / "h200x2" / "nvsmi_q.xml").read_text())
    assert [(g["index"], g["bus_id"], g["uuid"]) for g in parsed["gpus"]] == [
        (0, "0000:00:06.0", "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc"),
        (1, "0000:00:07.0", "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54"),
    ]


def test_query_xml_counts_uncorrected_errors_and_pending_states(fixtures: Path) -> None:
    text = (fixtures / "h200" / "nvsmi_q.xml").read_text()
    text = text.replace("<dram_uncorrectable>0</dram_uncorrectable>", "<dram_uncorrectable>3</dram_uncorrectable>", 1)
    text = text.replace("<remapped_row_pending>No</remapped_row_pending>",
                        "<remapped_row_pending>Yes</remapped_row_pending>")
    text = text.replace("<pending_mig>Disabled</pending_mig>", "<pending_mig>Enabled</pending_mig>")
    text = text.replace("<current_link_gen>5</current_link_gen>", "<current_link_gen>1</current_link_gen>")
    (gpu,) = nvsmi.parse_query_xml(text)["gpus"]
    assert gpu["ecc_uncorrected_volatile"] == 3 and gpu["ecc_uncorrected_aggregate"] == 0
    assert gpu["remapped_rows"]["pending"] is True
    assert (gpu["mig_current"], gpu["mig_pending"]) == (False, True)
    assert gpu["pcie_gen_current"] == 1


def test_list_gpus(fixtures: Path) -> None:
    listed = nvsmi.parse_list((fixtures / "h200x2" / "nvidia-smi_-L.txt").read_text())
    assert [(g["index"], g["uuid"], g["mig"]) for g in listed] == [
        (0, "GPU-d3d4d48e-bb4a-7dfe-ba8d-0c72be5897cc", []),
        (1, "GPU-c7bb669a-6c98-84b7-fff1-a0bc7cbb3d54", []),
    ]


def test_list_with_mig_devices() -> None:
    # The layout `nvidia-smi -L` prints with MIG on (NVIDIA MIG user guide, "Getting Started with MIG").
    text = ("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
            "  MIG 3g.20gb      Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
            "  MIG 1g.5gb       Device  1: (UUID: MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb)\n")
    (gpu,) = nvsmi.parse_list(text)
    assert gpu["mig"] == [
        {"profile": "3g.20gb", "device": 0, "uuid": "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f"},
        {"profile": "1g.5gb", "device": 1, "uuid": "MIG-cba663e8-9bed-5b25-b243-5985ef7c9beb"},
    ]


def test_lgi_with_mig_disabled(fixtures: Path) -> None:
    assert parse_lgi((fixtures / "h200" / "nvidia-smi_mig_-lgi.txt").read_text()) == []


def test_lgi_and_lci_tables() -> None:
    # Table layout from the NVIDIA MIG user guide (`nvidia-smi mig -lgi` / `-lci`).
    lgi = """+-------------------------------------------------------+
| GPU instances:                                        |
| GPU   Name             Profile  Instance   Placement  |
|                          ID       ID       Start:Size |
|=======================================================|
|   0  MIG 1g.5gb          19        7          4:1     |
+-------------------------------------------------------+
|   0  MIG 3g.20gb          9        2          0:4     |
+-------------------------------------------------------+
|   1  MIG 1g.18gb+me      20       13          6:1     |
+-------------------------------------------------------+
"""
    assert parse_lgi(lgi) == [
        {"gpu": 0, "profile": "1g.5gb", "profile_id": 19, "instance_id": 7, "start": 4, "size": 1},
        {"gpu": 0, "profile": "3g.20gb", "profile_id": 9, "instance_id": 2, "start": 0, "size": 4},
        {"gpu": 1, "profile": "1g.18gb+me", "profile_id": 20, "instance_id": 13, "start": 6, "size": 1},
    ]
    lci = """+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      2       MIG 3g.20gb          2         0          0:3     |
+--------------------------------------------------------------------+
"""
    assert parse_lci(lci) == [{"gpu": 0, "gpu_instance_id": 2, "profile": "3g.20gb", "profile_id": 2,
                                     "instance_id": 0, "start": 0, "size": 3}]


def test_nvlink_status(fixtures: Path) -> None:
    links = nvsmi.parse_nvlink_status((fixtures / "h200x2" / "nvidia-smi_nvlink_-s.txt").read_text())
    assert sorted(links) == [0, 1]
    assert len(links[0]) == 18 and links[0][0] == pytest.approx(26.562)
    assert sum(links[1]) == pytest.approx(478.116)


def test_link_query() -> None:
    assert nvsmi.parse_link_query("0, 5, 16\n1, 1, 8\n2, [N/A], 16\n") == {0: (5, 16), 1: (1, 8), 2: (None, 16)}


def test_mig_devices_from_xml(fixtures: Path) -> None:
    assert nvsmi.parse_mig_devices((fixtures / "h200x2" / "nvsmi_q.xml").read_text()) == {0: [], 1: []}


@pytest.mark.parametrize("path", sorted(p for p in AGENT.rglob("*.py") if "vendor" not in p.parts),
                         ids=lambda p: p.name)
def test_agent_sources_parse_as_python_3_9(path: Path) -> None:
    """Nodes may run Python 3.9: no newer syntax, and annotations stay unevaluated strings."""
    tree = ast.parse(path.read_text(), feature_version=(3, 9))
    annotated = any(isinstance(node, ast.AnnAssign) or
                    (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and
                     (node.returns is not None or any(a.annotation for a in node.args.args)))
                    for node in ast.walk(tree))
    future = any(isinstance(node, ast.ImportFrom) and node.module == "__future__" for node in tree.body)
    assert future or not annotated
