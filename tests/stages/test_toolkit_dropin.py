"""Toolkit 1.18 and later: containerd's nvidia drop-in as nvidia-ctk writes it, the CDI spec in /var/run/cdi, the
refresh unit, and the MIG applier regenerating the spec the node's release keeps; before 1.18 the whole-file path."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import tomlkit
from nodestates import fresh, with_file

from gpu_provision.desired import FileWant, UnitWant
from gpu_provision.mig import install as agent_mig
from gpu_provision.spec import load_cluster
from gpu_provision.spec import toolkit as toolkit_mode
from gpu_provision.stages import nvidia_dropin, runtime, toolkit
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")
NEW = replace(H200, toolkit=replace(H200.toolkit, version="1.18.2"))
CONTAINERD_17 = 'version = 2\n[plugins."io.containerd.grpc.v1.cri"]\n  sandbox_image = "registry.k8s.io/pause:3.10"\n'


def _state(containerd: str, config: str | None = None) -> NodeStateData:
    raw = fresh("debian12", gpus=8)
    raw["runtime"]["containerd_version"] = containerd
    if config is not None:
        raw = with_file(raw, runtime.CONTAINERD_CONFIG, config)
    return NodeStateData(raw)


def _doc(text: str | None) -> dict:
    assert text is not None
    return tomlkit.parse(text).unwrap()


def test_release_facts() -> None:
    assert not toolkit_mode.drop_in(H200) and toolkit_mode.drop_in(NEW)
    assert toolkit_mode.drop_in(replace(H200, toolkit=replace(H200.toolkit, version="1.18.0-1")))
    assert toolkit.NVIDIA_DROPIN == "/etc/containerd/conf.d/99-nvidia.toml"
    assert toolkit_mode.cdi_spec(H200) == "/etc/cdi/nvidia.yaml"
    assert toolkit_mode.cdi_spec(NEW) == "/var/run/cdi/nvidia.yaml"
    assert toolkit_mode.refresh_units(NEW) == ("nvidia-cdi-refresh.path",) and toolkit_mode.refresh_units(H200) == ()


def test_containerd_2_drop_in_is_version_3_with_the_runtime_default_and_cdi() -> None:
    state = _state("2.1.4")
    doc = _doc(nvidia_dropin.text(NEW, CLUSTER, state))
    assert doc["version"] == 3
    cri = doc["plugins"]["io.containerd.cri.v1.runtime"]
    assert cri["enable_cdi"] is True
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    nvidia = cri["containerd"]["runtimes"]["nvidia"]
    assert nvidia == {"runtime_type": "io.containerd.runc.v2",
                      "options": {"SystemdCgroup": True, "BinaryName": "/usr/bin/nvidia-container-runtime"}}
    # The runc settings travel with it: containerd before 2.1 replaces a plugin section from an import.
    assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    assert "/etc/containerd/conf.d/*.toml" in _doc(runtime.desired_containerd_config(state, True))["imports"]


def test_containerd_17_drop_in_repeats_the_cri_section_and_config_toml_imports_it() -> None:
    state = _state("1.7.27", CONTAINERD_17)
    doc = _doc(nvidia_dropin.text(NEW, CLUSTER, state))
    assert doc["version"] == 2
    cri = doc["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == "/usr/bin/nvidia-container-runtime"
    wants = runtime.file_wants(NEW, CLUSTER, state)
    top = next(w for w in wants if w.path == runtime.CONTAINERD_CONFIG)
    assert isinstance(top, FileWant) and _doc(str(top.content))["imports"] == ["/etc/containerd/conf.d/*.toml"]
    # Before 1.18 config.toml imports nothing on containerd 1.x (nvidia-ctk edits the whole file).
    old = next(w for w in runtime.file_wants(H200, CLUSTER, state) if w.path == runtime.CONTAINERD_CONFIG)
    assert "imports" not in _doc(str(old.content))


def test_without_default_runtime_or_cdi_the_keys_stay_out() -> None:
    node = replace(NEW, toolkit=replace(NEW.toolkit, default_runtime=False, cdi=False))
    cri = _doc(nvidia_dropin.text(node, CLUSTER, _state("2.1.4")))["plugins"]["io.containerd.cri.v1.runtime"]
    assert "enable_cdi" not in cri and "default_runtime_name" not in cri["containerd"]


def test_whole_file_path_before_118_and_for_version_1_files() -> None:
    assert nvidia_dropin.text(H200, CLUSTER, _state("2.1.4")) is None
    assert nvidia_dropin.text(NEW, CLUSTER, _state("1.7.27", '[plugins.cri]\n  x = 1\n')) is None
    assert toolkit.command_kinds(NEW, CLUSTER, _state("1.7.27", '[plugins.cri]\n  x = 1\n')) == ("containerd",)
    assert toolkit.command_kinds(NEW, CLUSTER, _state("2.1.4")) == ()


def test_wants_hold_the_drop_in_and_the_refresh_unit() -> None:
    state = _state("2.1.4")
    wants = toolkit.wants(NEW, CLUSTER, state)
    assert any(isinstance(w, FileWant) and w.path == toolkit.NVIDIA_DROPIN for w in wants)
    assert UnitWant("nvidia-cdi-refresh.path", enabled=True, running=True) in wants
    assert not any(isinstance(w, FileWant) and w.path == toolkit.NVIDIA_DROPIN
                   for w in toolkit.wants(H200, CLUSTER, state))


def test_cdi_spec_age_and_the_stale_static_spec() -> None:
    raw = fresh("debian12", gpus=8)
    raw["runtime"].update(cdi_spec_mtime=300, cdi_run_spec_mtime=None, driver_installed_at=200)
    raw = with_file(raw, toolkit.CDI_SPEC, "cdiVersion: 0.5.0\n")
    kinds = [d.kind for d in toolkit.extra_differences(NEW, CLUSTER, NodeStateData(raw))]
    assert "cdi-spec" in kinds and "cdi-spec-stale" in kinds
    assert "cdi-spec" not in [d.kind for d in toolkit.extra_differences(H200, CLUSTER, NodeStateData(raw))]


def test_mig_applier_regenerates_the_spec_of_the_release_or_none() -> None:
    assert "--cdi-output=/etc/cdi/nvidia.yaml" in agent_mig.apply_command(H200, "apply")
    assert "--cdi-output=/var/run/cdi/nvidia.yaml" in agent_mig.unit_text(NEW)
    no_cdi = replace(NEW, toolkit=replace(NEW.toolkit, cdi=False))
    assert "--cdi-output= " in agent_mig.apply_command(no_cdi, "apply") + " "


def test_node_applier_writes_the_named_spec() -> None:
    from gpu_provision.node.mig.layout import Action, commands

    assert commands(Action("cdi-refresh", path="/var/run/cdi/nvidia.yaml")) == [
        ["nvidia-ctk", "cdi", "generate", "--output=/var/run/cdi/nvidia.yaml"]]
    assert str(Action("cdi-refresh")) == "regenerate the CDI spec /etc/cdi/nvidia.yaml"
