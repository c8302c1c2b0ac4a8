"""The MIG stage's wants, layout file, boot unit and differences, and the operations' commands, for the example
cluster file's nodes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import yaml
from fakehost import FakeHost, run_op

from gpu_provision import bundle
from gpu_provision.desired import FileWant, UnitWant
from gpu_provision.mig import install as agent_mig
from gpu_provision.node.mig import migparted
from gpu_provision.node.mig.model import MigLayout
from gpu_provision.node.mig.record import RECORD_FILE
from gpu_provision.node.probe import mig as probe
from gpu_provision.operations import mig as mig_ops
from gpu_provision.operations import vgpu as vgpu_ops
from gpu_provision.spec import catalog, load_cluster
from gpu_provision.spec.migparted import node_config
from gpu_provision.stages import driver
from gpu_provision.stages import mig as stage
from gpu_provision.state import NodeStateData

REPO = Path(__file__).resolve().parents[2]
CLUSTER = load_cluster(REPO / "inventory" / "cluster.yaml")
H200 = CLUSTER.node("h200-01")


def snapshot(current: bool, count: int = 8, gis: dict[int, list[tuple[str, int, int]]] | None = None) -> dict:
    word = "Enabled" if current else "Disabled"
    text = "\n".join(f"{i}, GPU-0000000{i}-0000-0000-0000-000000000000, NVIDIA H200, 00000000:{0x18 + i:02X}:00.0, "
                     f"0x233510DE, {word}, {word}" for i in range(count))
    gpus = probe.parse_query_gpu(text)
    for gpu in gpus:
        gpu["gis"] = [{"id": n, "profile": p, "profile_id": 0, "start": s, "size": z,
                       "cis": [{"id": 0, "profile": p, "profile_id": 0, "start": 0, "size": 1}]}
                      for n, (p, s, z) in enumerate((gis or {}).get(gpu["index"], []), 1)]
    return {"smi_rc": 0, "error": None, "gpus": gpus, "processes": []}


def converged() -> dict:
    placements = [(p.profile, p.start, p.size) for p in H200.mig.planned[0].placements]
    snap = snapshot(True, gis={i: placements for i in range(7)})
    snap["gpus"][7]["mig_current"] = snap["gpus"][7]["mig_pending"] = False
    return snap


def test_wants_of_a_mig_node() -> None:
    wants = stage.wants(H200, CLUSTER)
    paths = [w.path for w in wants if isinstance(w, FileWant)]
    assert paths == [bundle.BUNDLE_PATH, agent_mig.LAYOUT_FILE, agent_mig.UNIT_PATH]
    assert [w for w in wants if isinstance(w, UnitWant)] == [UnitWant(agent_mig.UNIT_NAME, enabled=True, running=None)]
    applier = next(w for w in wants if isinstance(w, FileWant) and w.path == bundle.BUNDLE_PATH)
    assert applier.mode == "0755" and applier.content == bundle.build()
    assert stage.wants(CLUSTER.node("cp-01"), CLUSTER) == []
    request = stage.request(H200, CLUSTER)
    assert "mig" in request.sections and "nvidia-dcgm.service" in request.units
    assert agent_mig.LAYOUT_FILE in request.files


def test_layout_file_is_migparted_v1_in_json() -> None:
    text = agent_mig.layout_text(H200)
    doc = json.loads(text)
    assert yaml.safe_load(text) == doc
    assert migparted.check(doc) == []
    assert doc["mig-configs"]["h200-01"] == node_config(H200, catalog.model("H200"))
    # What the node-side applier reads back from it, for the node's eight GPUs.
    layouts = migparted.requested(doc, None, [(g["index"], [g["pci_device_id"]]) for g in snapshot(False)["gpus"]])
    assert layouts[7] == MigLayout(enabled=False, profiles={})
    assert all(layouts[i] == MigLayout(enabled=True, profiles={"1g.18gb": 2, "2g.35gb": 1, "3g.71gb": 1})
               for i in range(7))


def test_boot_unit() -> None:
    unit = agent_mig.unit_text(H200)
    before = next(line for line in unit.splitlines() if line.startswith("Before="))
    assert {"containerd.service", "docker.service", "kubelet.service"} <= set(before[7:].split())
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))
    assert exec_start == ("ExecStart=/usr/bin/python3 /usr/local/lib/gpu-provision/gpu-provision-node.pyz mig-apply boot "
                          "--layout /etc/gpu-provision/mig-layout.yaml --vgpu /etc/gpu-provision/vgpu.json "
                          "--cdi-output=/etc/cdi/nvidia.yaml")
    assert "Type=oneshot" in unit and "WantedBy=multi-user.target" in unit


def test_differences_name_each_drifted_gpu() -> None:
    state = NodeStateData({"mig": snapshot(False)})
    found = stage.extra_differences(H200, CLUSTER, state)
    assert [d.item for d in found] == [f"GPU {i}" for i in range(7)]
    assert found[0].kind == "mig-layout"
    assert found[0].expected == "2g.35gb@0:2, 1g.18gb@2:1, 1g.18gb@3:1, 3g.71gb@4:4"
    assert found[0].actual == "MIG disabled"
    assert stage.extra_differences(H200, CLUSTER, NodeStateData({"mig": converged()})) == []


def test_operation_commands() -> None:
    actions = mig_ops.node_actions(H200, NodeStateData({"mig": snapshot(False)}))
    assert mig_ops.commands_for(H200, actions) == [
        "python3 /usr/local/lib/gpu-provision/gpu-provision-node.pyz mig-apply apply "
        "--cdi-output=/etc/cdi/nvidia.yaml --layout /etc/gpu-provision/mig-layout.yaml --config h200-01"]
    assert mig_ops.node_actions(H200, NodeStateData({"mig": converged()})) == []
    busy = snapshot(True)
    busy["processes"] = [{"pid": 77, "name": "train.py", "gpu": 0, "gpu_uuid": busy["gpus"][0]["uuid"]}]
    refused = mig_ops.commands_for(H200, mig_ops.node_actions(H200, NodeStateData({"mig": busy})))
    assert refused == ["echo 'gpu-provision: GPU 0: refused: GPU 0 is in use by 77 (train.py); stop them or set "
                       "mig.allow_drain' >&2; exit 1"]


def test_the_plugin_restarted_follows_the_cluster_file() -> None:
    """The device plugin by default, the DRA kubelet plugin under ``gpu_allocation: dra``, none without Kubernetes:
    the plan says which, and the applier is told (its default, the device plugin, goes unsaid)."""
    dra = replace(CLUSTER, kubernetes=replace(CLUSTER.kubernetes, gpu_allocation="dra"))
    bare = replace(CLUSTER, kubernetes=replace(CLUSTER.kubernetes, enabled=False))
    assert [agent_mig.plugin_for(c) for c in (CLUSTER, dra, bare)] == ["device-plugin", "dra", None]
    state = NodeStateData({"mig": snapshot(False)})
    last = {plugin: str(mig_ops.node_actions(H200, state, plugin)[-1]) for plugin in ("device-plugin", "dra", None)}
    assert last["device-plugin"] == "restart the device plugin"
    assert last["dra"].startswith("restart the DRA kubelet plugin")
    assert last[None] == "regenerate the CDI spec /etc/cdi/nvidia.yaml"
    assert mig_ops.commands_for(H200, mig_ops.node_actions(H200, state, "dra"), "dra")[0].endswith(" --plugin=dra")
    assert agent_mig.apply_command(H200, "apply", None).endswith(" --plugin=none")
    assert "--plugin" not in agent_mig.apply_command(H200, "apply")


def test_vgpu_node() -> None:
    node = CLUSTER.node("vgpu-01")
    paths = [w.path for w in stage.wants(node, CLUSTER) if isinstance(w, FileWant)]
    assert agent_mig.VGPU_FILE in paths and agent_mig.LAYOUT_FILE not in paths
    assert json.loads(agent_mig.vgpu_text(node)) == {"gpus": {"0": "NVIDIA H100XM-40C", "1": "NVIDIA H100XM-40C"}}
    snap = snapshot(False, count=2)
    snap["vgpu"] = {}
    steps = vgpu_ops.node_steps(node, NodeStateData({"mig": snap}))
    assert [s.kind for s in steps] == ["refuse", "refuse"]
    assert vgpu_ops.commands_for(node, steps)[0].startswith("echo 'gpu-provision: GPU 0: refused: PCI function")
    diffs = stage.extra_differences(node, CLUSTER, NodeStateData({"mig": snap}))
    assert [(d.kind, d.item, d.expected) for d in diffs] == [("vgpu", "GPU 0", "NVIDIA H100XM-40C"),
                                                             ("vgpu", "GPU 1", "NVIDIA H100XM-40C")]


def test_no_driver_yet_leaves_the_decision_to_the_applier() -> None:
    """At prepare time of a first run the driver stage has not run: nvidia-smi is missing, the plan still runs the
    applier (which reads the node again after the driver is installed)."""
    missing = {"smi_rc": None, "error": "[Errno 2] No such file or directory: 'nvidia-smi'", "gpus": [],
               "processes": []}
    actions = mig_ops.node_actions(H200, NodeStateData({"mig": missing}))
    assert [a.kind for a in actions] == ["refuse"]
    assert mig_ops.commands_for(H200, actions) == [agent_mig.apply_command(H200, "apply")]


def test_module_unload_setting_reaches_the_applier_and_the_boot_unit(tmp_path: Path) -> None:
    """``mig.allow_module_unload`` (default false) becomes ``--allow-module-unload`` on the deploy's apply and in
    the boot unit, through the loader and the derived model."""
    assert "--allow-module-unload" not in agent_mig.apply_command(H200, "apply") + agent_mig.unit_text(H200)
    for name in ("cluster.yaml", "mig-parted.yaml"):
        (tmp_path / name).write_text((REPO / "inventory" / name).read_text())
    doc = yaml.safe_load((tmp_path / "cluster.yaml").read_text())
    node = next(n for n in doc["nodes"] if n["name"] == "h200-01")
    node.setdefault("mig", {})["allow_module_unload"] = True
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    allowed = load_cluster(tmp_path / "cluster.yaml").node("h200-01")
    assert allowed.mig.allow_module_unload and allowed.mig.layouts == H200.mig.layouts
    assert agent_mig.apply_command(allowed, "apply").endswith(
        "--layout /etc/gpu-provision/mig-layout.yaml --config h200-01 --allow-module-unload")
    assert (" mig-apply boot --layout /etc/gpu-provision/mig-layout.yaml --vgpu /etc/gpu-provision/vgpu.json "
            "--cdi-output=/etc/cdi/nvidia.yaml --allow-module-unload\n") in agent_mig.unit_text(allowed)


def test_interrupted_apply_is_finished_by_the_next_deploy() -> None:
    """The applier's record left on the node (an apply killed after the layout was complete) makes the stage run
    the applier although no GPU differs from its layout."""
    assert RECORD_FILE in stage.request(H200, CLUSTER).files
    assert stage.interrupted_apply(NodeStateData({"files": {}})) is None
    left = NodeStateData({"files": {RECORD_FILE: {"exists": True, "type": "file"}}})
    assert stage.interrupted_apply(left) == ("an interrupted MIG apply left units or kernel modules down "
                                             "(/var/lib/gpu-provision/mig-stopped.json)")


def test_layout_waits_for_a_pending_driver_reboot() -> None:
    """Seen on the rig: a driver change and a MIG change in one run, without the reboot between them, failed the MIG
    step with "Driver/library version mismatch" (and so a rollout's whole change). The layout waits instead, and the
    boot unit applies it after the reboot."""
    raw = {"mig": snapshot(False)}
    waits = lambda s: driver.reboot_reason(H200, s)  # noqa: E731
    with_reboot = FakeHost(raw, executing=True)
    assert run_op(mig_ops.layout, with_reboot, H200,
                  waits_for=lambda s: "driver 580.159.04 is loaded, 580.126.09 is installed") == []
    assert with_reboot.noops == ["MIG layout waits for the reboot: driver 580.159.04 is loaded, 580.126.09 is installed"]
    assert agent_mig.UNIT_NAME in with_reboot.logs[0]
    no_reboot = FakeHost(raw, executing=True)
    assert run_op(mig_ops.layout, no_reboot, H200, waits_for=waits) == mig_ops.commands_for(
        H200, mig_ops.node_actions(H200, NodeStateData(raw)))
    assert no_reboot.noops == []
