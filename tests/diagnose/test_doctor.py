"""Each doctor rule on recorded inputs: the real H200 outputs (one GPU, and two NVLinked GPUs) are healthy and no
rule fires; each rule fires on its own fault injected into those outputs, and only that rule."""

from __future__ import annotations

import json

import pytest
from diagnose_samples import EXPECT

from gpu_provision.doctor import RULES, DoctorExpectations, examine


def fired(ev):
    return sorted({f.rule.id for f in examine(ev)})


@pytest.mark.parametrize("host", ["h200", "h200x2"])
def test_real_h200_outputs_raise_no_finding(evidence, host):
    assert examine(evidence(host=host)) == []


def test_rule_table_rows_are_complete():
    assert len({r.id for r in RULES}) == len(RULES) >= 10
    for rule in RULES:
        assert rule.title and rule.evidence and rule.explanation and rule.fix, rule.id


def test_image_newer_than_driver_cuda(evidence):
    image = "nvidia/cuda:13.1.0-base-ubuntu24.04"
    ev = evidence({"runtime/images.json": json.dumps({image: {"runtime": "docker", "env": [
        "CUDA_VERSION=13.1.0", "NVIDIA_REQUIRE_CUDA=cuda>=13.1"]}})},
        expect=DoctorExpectations(users=("alice",), images={image: None}, runtime="docker"))
    [finding] = examine(ev)
    assert finding.rule.id == "cuda-driver-insufficient"
    assert finding.detail == f"{image} needs CUDA 13.1; the driver supports CUDA 13.0"


def test_image_cuda_from_declared_setting_then_tag(evidence):
    declared = DoctorExpectations(images={"registry.local/train:v7": "13.2", "nvidia/cuda:12.4.1-runtime": None})
    assert [f.detail for f in examine(evidence({"runtime/images.json": "{}"}, expect=declared))] == [
        "registry.local/train:v7 needs CUDA 13.2; the driver supports CUDA 13.0"]


def test_device_files_closed_to_a_configured_user(evidence):
    devices = {p: {"mode": "0660", "uid": 0, "gid": 44, "group": "video"} for p in ("/dev/nvidia0", "/dev/nvidiactl")}
    ev = evidence({"system/devices.json": json.dumps(devices), "system/users.json": json.dumps({"alice": ["alice"]})})
    [finding] = examine(ev)
    assert finding.rule.id == "nvml-permissions"
    assert "user alice (groups: alice) cannot open /dev/nvidia0, /dev/nvidiactl (mode 0660, group video)" in finding.detail
    member = evidence({"system/devices.json": json.dumps(devices)})
    assert fired(member) == []


def test_nvidia_smi_permission_message(evidence):
    ev = evidence({"nvidia-smi/nvidia-smi.txt": "Failed to initialize NVML: Insufficient Permissions\n",
                   "nvidia-smi/q.xml": None})
    assert "nvml-permissions" in fired(ev)


def test_library_upgraded_under_loaded_module(evidence):
    ev = evidence({"versions/libnvidia-ml.txt": "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.173.02"})
    [finding] = examine(ev)
    assert finding.rule.id == "driver-library-mismatch"
    assert finding.detail.startswith("loaded kernel module 580.159.04, library ")
    assert finding.detail.endswith("is 580.173.02")


def test_mismatch_message_when_nvidia_smi_fails(evidence):
    ev = evidence({"nvidia-smi/nvidia-smi.txt": "Failed to initialize NVML: Driver/library version mismatch\n"
                   "NVML library version: 580.173\n", "nvidia-smi/q.xml": None, "versions/libnvidia-ml.txt": ""})
    assert fired(ev) == ["driver-library-mismatch"]
    [finding] = examine(ev)
    assert finding.detail == ("nvidia-smi printed: Failed to initialize NVML: Driver/library version mismatch "
                              "(loaded kernel module 580.159.04, NVML library 580.173)")


XID_LOG = """\
2026-11-30T10:00:00+0000 gpu-01 kernel: NVRM: GPU at PCI:0000:17:00: GPU-2c1f9a4e-0000-0000-0000-000000000000
2026-11-30T10:00:00+0000 gpu-01 kernel: NVRM: Xid (PCI:0000:17:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.
2026-11-30T10:02:11+0000 gpu-01 kernel: NVRM: Xid (PCI:0000:65:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.
2026-11-30T10:03:00+0000 gpu-01 kernel: NVRM: Xid (PCI:0000:65:00): 63, pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.
[ 8812.120031] NVRM: Xid (0000:b3:00): 13, Graphics Exception: ESR 0x405840=0x80000000
"""


def test_xid_lines_decoded_with_catalogue_action(evidence):
    findings = examine(evidence({"kernel/nvidia.log": XID_LOG}))
    assert {f.rule.id for f in findings} == {"xid-errors"}
    details = [f.detail for f in findings]
    assert details[0].startswith("Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION: ") and "x1 on 0000:b3:00; RESTART_APP" in details[0]
    assert "x2 on 0000:65:00; IGNORE" in details[1] and details[1].startswith("Xid 63 ")
    assert details[2].startswith("Xid 79 (ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS") and "RESTART_BM" in details[2]
    assert not any("[catalogue entry" in detail for detail in details)  # every entry read in the catalogue itself


def test_fabric_manager_not_registered(evidence):
    xml = evidence(host="h200x2").text("nvidia-smi/q.xml") or ""
    broken = xml.replace("<state>Completed</state>", "<state>In Progress</state>", 1)
    broken = broken.replace("<status>Success</status>", "<status>N/A</status>", 1)
    probe = json.dumps({"services": {"nvidia-fabricmanager": {"loaded": True, "enabled": "enabled",
                                                              "active": "failed"}}})
    findings = examine(evidence({"nvidia-smi/q.xml": broken, "probe.json": probe}, host="h200x2"))
    assert {f.rule.id for f in findings} == {"fabric-manager-down"}
    assert [f.detail for f in findings][-1] == "nvidia-fabricmanager is failed"
    assert "fabric state In Progress" in findings[0].detail


#: The kernel's lines as Debian's 6.1 and 6.12 kernels wrote them under Secure Boot in the rig's Secure Boot VMs
#: (journalctl -k -o short-iso), and the later kernels' form that names the module.
REJECTED_LOG = """\
2026-12-07T08:20:11+0000 debian12 kernel: Loading of module with unavailable key is rejected
2026-12-07T08:20:12+0000 debian12 kernel: Loading of module with unavailable key is rejected
2026-12-07T08:20:13+0000 debian12 kernel: Loading of unsigned module is rejected
"""


def test_a_module_refused_for_its_signature_while_no_nvidia_module_is_loaded(evidence):
    modules = "ext4 1007616 1 - Live 0x0\n"
    findings = examine(evidence({"kernel/nvidia.log": REJECTED_LOG, "files/proc/modules": modules}))
    assert [(f.rule.id, f.detail) for f in findings] == [
        ("module-signature-rejected", "the kernel rejected a module (module with unavailable key) x2; no NVIDIA "
                                      "module is loaded"),
        ("module-signature-rejected", "the kernel rejected a module (unsigned module) x1; no NVIDIA module is "
                                      "loaded")]
    # With the driver loaded, a refusal that names no module is some other module's; one naming NVIDIA's is not.
    loaded = modules + "nvidia 104857600 0 - Live 0x0\n"
    assert fired(evidence({"kernel/nvidia.log": REJECTED_LOG, "files/proc/modules": loaded})) == []
    named = "2026-12-07T08:20:14+0000 h kernel: nvidia_peermem: loading of module with unavailable key is rejected\n"
    assert [f.detail for f in examine(evidence({"kernel/nvidia.log": named, "files/proc/modules": loaded}))] == [
        "the kernel rejected nvidia_peermem (module with unavailable key) x1"]


def test_nouveau_loaded(evidence):
    ev = evidence({"files/proc/modules": "nouveau 2306048 0 - Live 0x0\nmxm_wmi 12288 1 nouveau, Live 0x0\n"})
    assert fired(ev) == ["nouveau-loaded"]


def test_gpu_bound_to_nouveau(evidence):
    """A kernel without /proc/modules (built without module support) still shows nouveau on the PCI bus."""
    pci = {"0000:17:00.0": {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "driver": "nouveau"},
           "0000:65:00.0": {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "driver": "nvidia"},
           "0000:05:00.0": {"vendor": "0x10de", "device": "0x22a3", "class": "0x068000", "driver": "nouveau"}}
    ev = evidence({"system/pci.json": json.dumps(pci), "files/proc/modules": None})
    assert [(f.rule.id, f.detail) for f in examine(ev)] == [("nouveau-loaded", "GPU 0000:17:00.0 is bound to nouveau")]
    pci["0000:17:00.0"]["driver"] = "nvidia"
    assert examine(evidence({"system/pci.json": json.dumps(pci)})) == []


def test_pending_kernel_without_nvidia_modules(evidence):
    probe = json.dumps({"system": {"kernel": "6.8.0-79-generic", "kernel_pending": "6.8.0-85-generic",
                                   "nvidia_modules": {"6.8.0-79-generic": "dkms", "6.8.0-85-generic": None}}})
    [finding] = examine(evidence({"probe.json": probe}))
    assert finding.detail == ("running kernel 6.8.0-79-generic, newest installed 6.8.0-85-generic "
                              "(no NVIDIA modules found for it)")


def test_kernel_installed_but_not_running(evidence):
    probe = json.dumps({"system": {"kernel": "6.8.0-79-generic", "kernel_pending": "6.8.0-85-generic"}})
    ev = evidence({"probe.json": probe, "files/var/run/reboot-required": "*** System restart required ***\n",
                   "files/var/run/reboot-required.pkgs": "linux-image-6.8.0-85-generic\n"})
    findings = examine(ev)
    assert [f.detail for f in findings] == [
        "running kernel 6.8.0-79-generic, newest installed 6.8.0-85-generic",
        "/var/run/reboot-required is present (packages: linux-image-6.8.0-85-generic)"]


def test_mig_mode_pending(evidence):
    xml = (evidence().text("nvidia-smi/q.xml") or "").replace(
        "<pending_mig>Disabled</pending_mig>", "<pending_mig>Enabled</pending_mig>")
    [finding] = examine(evidence({"nvidia-smi/q.xml": xml}))
    assert finding.rule.id == "mig-pending" and finding.detail.endswith("MIG Disabled, pending Enabled")


def test_docker_without_nvidia_runtime(evidence):
    ev = evidence({"files/etc/docker/daemon.json": json.dumps({"log-driver": "json-file"})})
    assert [f.detail for f in examine(ev)] == ["docker: no 'nvidia' runtime in /etc/docker/daemon.json"]


def test_containerd_without_nvidia_runtime(evidence):
    expect = DoctorExpectations(users=EXPECT.users, images=EXPECT.images, runtime="containerd", kubernetes=True)
    plain = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n  runtime_type = \"x\"\n"
    assert fired(evidence({"files/etc/containerd/config.toml": plain}, expect=expect)) == ["runtime-not-configured"]
    configured = plain + "[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n"
    assert fired(evidence({"files/etc/containerd/config.toml": configured}, expect=expect)) == []
    drop_in = {"files/etc/containerd/config.toml": plain + 'imports = ["/etc/containerd/conf.d/*.toml"]\n',
               "files/etc/containerd/conf.d/99-nvidia.toml": configured}
    assert fired(evidence(drop_in, expect=expect)) == []


def test_device_plugin_not_registered(evidence):
    ev = evidence({"listings/var/lib/kubelet/device-plugins.txt": "DEPRECATION\nkubelet.sock\nkubelet_internal_checkpoint"})
    assert fired(ev) == ["device-plugin-not-registered"]


def test_containerd_missing_config_blamed_only_where_containerd_is_installed(evidence):
    """A node the deploy has not reached yet (no containerd at all) is drift, not a misconfigured runtime."""
    expect = DoctorExpectations(users=EXPECT.users, images=EXPECT.images, runtime="containerd", kubernetes=True)
    assert "runtime-not-configured" not in fired(evidence(expect=expect))
    probe = evidence().json("probe.json") or {}
    probe["runtime"] = {**(probe.get("runtime") or {}), "containerd_version": "1.7.24"}
    installed = evidence({"probe.json": json.dumps(probe)}, expect=expect)
    assert [f.detail for f in examine(installed) if f.rule.id == "runtime-not-configured"] == [
        "containerd: /etc/containerd/config.toml is missing"]
