"""The simulator configured as the captured hosts must print exactly what the real driver printed."""

from __future__ import annotations

import re

import pytest
from simnode import FIXTURE_QUERY, FIXTURES, H200_HOST, H200X2_HOST, SimNode, fixture_clock


def _host(node: SimNode, gpus: list[dict], stamp: str, persistence: bool = True) -> None:
    node.configure(gpus)
    node.env["GPU_SIM_CLOCK"] = fixture_clock(stamp)
    if persistence:
        node.smi("-pm", "1")


def _fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("args", "fixture"),
    [
        ((), "h200/nvidia-smi.txt"),
        (("mig", "-lgip"), "h200/nvidia-smi_mig_-lgip.txt"),
        (("mig", "-lgipp"), "h200/nvidia-smi_mig_-lgipp.txt"),
        ((f"--query-gpu={FIXTURE_QUERY}", "--format=csv"), "h200/query-gpu.csv"),
        (("topo", "-m"), "h200/nvidia-smi_topo_-m.txt"),
        (("-q",), "h200/nvsmi_q.txt"),
    ],
)
def test_h200_host_byte_for_byte(sim_node: SimNode, args: tuple[str, ...], fixture: str) -> None:
    _host(sim_node, H200_HOST, "Sun Nov 29 21:18:36 2026")
    assert sim_node.smi(*args) == _fixture(fixture)


def test_h200_mig_lgi_when_disabled(sim_node: SimNode) -> None:
    _host(sim_node, H200_HOST, "Sun Nov 29 21:18:36 2026")
    proc = sim_node.run("mig", "-lgi")
    assert proc.stdout == _fixture("h200/nvidia-smi_mig_-lgi.txt")
    assert proc.returncode != 0


def test_h200_q_xml_byte_for_byte_with_capture_telemetry(sim_node: SimNode) -> None:
    """-q -x was captured a moment after -q; with that moment's telemetry the XML matches exactly."""
    gpu = dict(H200_HOST[0])
    gpu["telemetry"] = {"tx_kbs": 1047, "rx_kbs": 646, "average_power_draw": "79.97", "memory_power_draw": "42.82"}
    _host(sim_node, [gpu], "Sun Nov 29 21:18:36 2026")
    assert sim_node.smi("-q", "-x") == _fixture("h200/nvsmi_q.xml")


@pytest.mark.parametrize(
    ("args", "fixture"),
    [
        ((), "h200x2/nvidia-smi.txt"),
        (("-L",), "h200x2/nvidia-smi_-L.txt"),
        (("mig", "-lgipp"), "h200x2/nvidia-smi_mig_-lgipp.txt"),
        ((f"--query-gpu={FIXTURE_QUERY}", "--format=csv"), "h200x2/query-gpu.csv"),
        (("topo", "-m"), "h200x2/nvidia-smi_topo_-m.txt"),
    ],
)
def test_h200x2_host_byte_for_byte(sim_node: SimNode, args: tuple[str, ...], fixture: str) -> None:
    _host(sim_node, H200X2_HOST, "Sun Nov 29 22:01:38 2026")
    assert sim_node.smi(*args) == _fixture(fixture)


def _element_paths(xml: str) -> list[str]:
    import xml.etree.ElementTree as ET

    root = ET.fromstring(re.sub(r"<!DOCTYPE[^>]*>", "", xml))
    paths: list[str] = []

    def walk(el: ET.Element, prefix: str) -> None:
        path = f"{prefix}/{el.tag}"
        paths.append(path)
        for child in el:
            walk(child, path)

    walk(root, "")
    return paths


def test_h200x2_q_xml_has_the_captured_element_paths(sim_node: SimNode) -> None:
    _host(sim_node, H200X2_HOST, "Sun Nov 29 22:01:38 2026")
    assert _element_paths(sim_node.smi("-q", "-x")) == _element_paths(_fixture("h200x2/nvsmi_q.xml"))


def test_h200x2_q_xml_byte_for_byte_with_capture_values(sim_node: SimNode) -> None:
    """With the identity and telemetry of that moment, -q -x of the NVLink pair matches exactly
    (including the configured fabric both GPUs report)."""
    moment = [
        {"pdi": "0x4d9f17ffbcf417ce", "module_id": 5, "telemetry": {
            "temperature": 34, "tlimit_temperature": 52, "tx_kbs": 1233, "rx_kbs": 614, "average_power_draw": "120.15",
            "instant_power_draw": "81.54", "memory_power_draw": "46.78", "clocks_sm_mhz": 405}},
        {"pdi": "0xd120ad14ce82e0a2", "module_id": 7, "telemetry": {
            "temperature": 36, "tlimit_temperature": 51, "tx_kbs": 1194, "rx_kbs": 560, "average_power_draw": "103.91",
            "instant_power_draw": "84.23", "memory_power_draw": "43.05", "clocks_sm_mhz": 435}},
    ]
    gpus = [{**gpu, **extra, "board_part_number": "692-2G520-0282-000"} for gpu, extra in zip(H200X2_HOST, moment)]
    _host(sim_node, gpus, "Sun Nov 29 22:01:38 2026")
    assert sim_node.smi("-q", "-x") == _fixture("h200x2/nvsmi_q.xml")


def test_query_csv_noheader_nounits(sim_node: SimNode) -> None:
    _host(sim_node, H200_HOST, "Sun Nov 29 21:18:36 2026")
    out = sim_node.smi("--query-gpu=index,memory.total,power.limit,count,pci.device_id", "--format=csv,noheader,nounits")
    assert out == "0, 143771, 700.00, 1, 0x233510DE\n"
    bad = sim_node.run("--query-gpu=index,bogus.field", "--format=csv")
    assert bad.returncode == 2
    assert 'Field "bogus.field" is not a valid field to query.' in bad.stdout


def test_model_without_hardware_entry_reports_its_pci_id_and_memory(sim_node: SimNode) -> None:
    sim_node.configure([{"model": "L40S", "index": 0, "uuid": "GPU-00000000-0000-0000-0000-000000000001",
                         "pci_bus_id": "00000000:00:06.0", "serial": "1"}])
    out = sim_node.smi("--query-gpu=name,pci.device_id,memory.total", "--format=csv,noheader")
    assert out.strip() == "NVIDIA L40S, 0x26B910DE, 49152 MiB"
