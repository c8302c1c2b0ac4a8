"""Preflight: which nodes are stopped, and why, from canned probe answers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from nodestates import fresh

from gpu_provision.spec import load_cluster
from gpu_provision.stages import preflight
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")


def _findings(node, raw):  # type: ignore[no-untyped-def]
    return {(f.check, f.fatal): f.message for f in preflight.findings(node, CLUSTER, NodeStateData(raw))}


def test_good_node_passes() -> None:
    for os_key in ("debian12", "ubuntu2404", "rocky9"):
        assert _findings(H200, fresh(os_key, gpus=8)) == {}, os_key


def test_unsupported_os_and_architecture_fail() -> None:
    raw = fresh("debian12", gpus=8)
    raw["system"].update(os_id="debian", os_version="11", arch="ppc64le")
    found = _findings(H200, raw)
    assert found[("os", True)] == ("debian 11 is not supported (Ubuntu 22.04/24.04, Debian 12/13, "
                                   "RHEL/Rocky/Alma 9/10)")
    assert found[("arch", True)] == "architecture ppc64le is not supported (x86_64, aarch64)"


def test_small_disk_and_memory_fail() -> None:
    raw = fresh("debian12", gpus=8)
    raw["system"].update(disk_free_bytes=3 * 1024**3, mem_total_kib=2 * 1024 * 1024)
    found = _findings(H200, raw)
    assert found[("disk", True)] == "3.0 GiB free on /, at least 10 GiB needed"
    assert found[("memory", True)] == "2.0 GiB memory, at least 4 GiB needed"


def test_secure_boot_with_dkms_fails_but_ubuntu_uses_signed_modules() -> None:
    found = _findings(H200, fresh("debian12", gpus=8, secure_boot="enabled"))
    assert found[("secure-boot", True)].startswith("Secure Boot is on and the driver would be built by DKMS")
    ubuntu = fresh("ubuntu2404", gpus=8, secure_boot="enabled")
    ubuntu["runtime"]["precompiled_modules"] = ["linux-modules-nvidia-580-server-open-6.8.0-45-generic",
                                                "linux-modules-nvidia-580-server-open-6.8.0-47-generic"]
    assert _findings(H200, ubuntu) == {}
    # The pending kernel (6.8.0-47) has no signed module yet: the next boot would come up without a driver.
    ubuntu["runtime"]["precompiled_modules"] = ubuntu["runtime"]["precompiled_modules"][:1]
    assert "linux-modules-nvidia-580-server-open-6.8.0-47-generic" in _findings(H200, ubuntu)[
        ("precompiled-modules", True)]


def test_secure_boot_with_dkms_passes_once_dkms_certificate_is_trusted() -> None:
    """The probe's signing section says what the firmware's key lists hold of DKMS's certificate: enrolled (or in
    db) passes, every other state fails with what to do about it."""
    raw = fresh("debian12", gpus=8, secure_boot="enabled")
    cert = "/var/lib/dkms/mok.pub"
    for state in ("enrolled", "in-db"):
        raw["signing"] = {"secure_boot": "enabled", "certificate": cert, "state": state}
        assert _findings(H200, raw) == {}, state
    expected = {
        "not-enrolled": f"its certificate {cert} is not enrolled: enroll it with 'mokutil --import {cert}', reboot "
                        "and confirm it in the MOK Manager at the node's console, or turn Secure Boot off",
        "pending": f"its certificate {cert} awaits enrollment (MokNew): confirm it in the MOK Manager at the "
                   "node's console during the next boot, then run again",
        "missing": f"DKMS has no signing certificate yet ({cert}): make one ('dkms generate_mok' from dkms 3.1; "
                   f"Ubuntu: 'update-secureboot-policy --new-key'), enroll it with 'mokutil --import {cert}', "
                   "reboot and confirm it in the MOK Manager at the node's console, or turn Secure Boot off",
        "blocked": f"its certificate {cert} is on a deny list (dbx): give DKMS another certificate "
                   "(mok_certificate and mok_signing_key in /etc/dkms/framework.conf) and enroll that",
    }
    for state, message in expected.items():
        raw["signing"] = {"secure_boot": "enabled", "certificate": cert, "state": state, "list": "dbx"}
        assert _findings(H200, raw) == {
            ("secure-boot", True): f"Secure Boot is on and the driver would be built by DKMS: {message}"}, state
    raw["signing"] = {"secure_boot": "enabled", "certificate": "/k/${kernelver}.der", "state": "unknown",
                      "reason": "the certificate's path is not a plain file name: /k/${kernelver}.der"}
    assert _findings(H200, raw)[("secure-boot", True)] == (
        "Secure Boot is on and the driver would be built by DKMS: no certificate the firmware trusts is known to "
        "sign its modules (the certificate's path is not a plain file name: /k/${kernelver}.der): enroll DKMS's "
        "certificate as a MOK, use install_method: preinstalled, or turn Secure Boot off")


def test_preflight_asks_for_the_signing_section_with_dkms_paths_from_the_data_file() -> None:
    sent = preflight.request(H200, CLUSTER).to_probe()["signing"]
    assert sent["certificate"] == {"default": "/var/lib/dkms/mok.pub", "ubuntu": "/var/lib/shim-signed/mok/MOK.der"}
    assert sent["framework_conf"] == ["/etc/dkms/framework.conf", "/etc/dkms/framework.conf.d/*.conf"]


def test_headers_for_the_pending_kernel() -> None:
    raw = fresh("ubuntu2404", gpus=8)
    raw["system"]["headers"]["6.8.0-47-generic"] = False
    assert _findings(H200, raw)[("kernel-headers", True)].startswith(
        "no headers for the pending kernel 6.8.0-47-generic and no package linux-headers-6.8.0-47-generic")
    raw["runtime"]["headers_available"] = ["linux-headers-6.8.0-47-generic"]
    assert _findings(H200, raw) == {("kernel-headers", False): "no headers for the pending kernel 6.8.0-47-generic; "
                                    "the driver stage installs linux-headers-6.8.0-47-generic"}


def test_gpus_must_match_the_file() -> None:
    found = _findings(H200, fresh("debian12", gpus=7))
    assert found[("gpus", True)] == "7 NVIDIA GPU(s) on the PCI bus, the file expects 8 H200"
    wrong = _findings(H200, fresh("debian12", gpus=8, device="0x2330"))
    assert wrong[("gpus", True)] == ("GPU(s) 0000:18:00.0, 0000:19:00.0, 0000:1a:00.0, 0000:1b:00.0, 0000:1c:00.0, "
                                     "0000:1d:00.0, 0000:1e:00.0, 0000:1f:00.0 have PCI id 0x233010DE, not a H200 "
                                     "(0x233510DE, 0x233B10DE)")
    # GPUs on a node listed without any are worth a warning, not a stop.
    assert _findings(CLUSTER.node("cp-01"), fresh("debian12", gpus=1)) == {
        ("gpus", False): "1 NVIDIA GPU(s) found on a node the file lists without GPUs"}


def test_preflight_ignore_turns_the_named_failures_into_warnings_and_no_others() -> None:
    raw = fresh("debian12", gpus=0, secure_boot="enabled")
    raw["system"].update(disk_free_bytes=3 * 1024**3, mem_total_kib=2 * 1024 * 1024)
    waived = replace(H200, preflight=replace(H200.preflight, ignore=("gpus", "memory", "disk")))
    found = _findings(waived, raw)
    assert found == {
        ("disk", False): "3.0 GiB free on /, at least 10 GiB needed (ignored: preflight.ignore)",
        ("memory", False): "2.0 GiB memory, at least 4 GiB needed (ignored: preflight.ignore)",
        ("gpus", False): "0 NVIDIA GPU(s) on the PCI bus, the file expects 8 H200 (ignored: preflight.ignore)",
        ("secure-boot", True): found[("secure-boot", True)],  # guards the install: never ignored
    }
    # Drift shows what would stop a deploy: the ignored checks are not among its differences.
    assert [d.item for d in preflight.extra_differences(waived, CLUSTER, NodeStateData(raw))] == ["secure-boot"]
    assert {c for c, fatal in _findings(H200, raw) if fatal} == {"disk", "memory", "gpus", "secure-boot"}


def test_nouveau_is_a_warning_and_open_modules_are_required_where_the_model_needs_them() -> None:
    found = _findings(H200, fresh("debian12", gpus=8, modules=("nouveau", "drm")))
    assert found == {("nouveau", False): "nouveau is loaded; the driver stage blacklists it and the node needs a "
                                         "reboot"}
    b200 = replace(H200, gpus=replace(H200.gpus, model="B200"),
                   driver=replace(H200.driver, kernel_modules="proprietary"))
    found = _findings(b200, fresh("debian12", gpus=8, device="0x2901"))
    assert found[("kernel-modules", True)] == "B200 needs the open kernel modules; set driver.kernel_modules to open or auto"


def test_distro_docker_is_refused_on_rhel() -> None:
    node = replace(H200, container_runtime=replace(H200.container_runtime, kind="docker", docker_source="distro"))
    assert _findings(node, fresh("rocky9", gpus=8))[("container-runtime", True)].startswith("RHEL has no")


def test_preinstalled_driver_skips_module_checks() -> None:
    node = replace(H200, driver=replace(H200.driver, install_method="preinstalled"))
    assert _findings(node, fresh("debian12", gpus=8, secure_boot="enabled")) == {}


def test_a_probe_that_timed_out_stops_the_node_naming_the_command() -> None:
    raw = fresh("debian12", gpus=8)
    raw["timed_out"] = ["timed out after 24 s: nvidia-smi --query-gpu=index,uuid --format=csv"]
    found = _findings(H200, raw)
    assert found[("probe", True)] == (
        "the node did not answer in time (timed out after 24 s: nvidia-smi --query-gpu=index,uuid --format=csv); "
        "nothing is changed on a partial reading: find what hangs there, or raise ssh.probe_timeout")
    # A section that timed out is missing, not empty: the other checks do not report what they cannot read.
    raw["system"] = {"error": "TimedOut: timed out after 24 s: dkms status"}
    assert list(_findings(H200, raw)) == [("probe", True)]
    # Drift shows it as well: a node a deploy would stop.
    differences = preflight.extra_differences(H200, CLUSTER, NodeStateData(raw))
    assert [(d.item, d.expected) for d in differences if d.item == "probe"] == [("probe", "pass")]


def test_kubernetes_version_skew_is_refused() -> None:
    """The file wants 1.36.4: an installed kubelet two minors back, or newer, stops the node; one minor back is an
    upgrade kubeadm allows. A control plane one minor back is upgraded (kubeadm upgrade apply), a patch back or ahead
    moved to the file's patch; two minors back, or a later minor (a minor downgrade), stop the node."""
    assert CLUSTER.kubernetes.version == "1.36.4"
    for installed, refused in (("1.34.2-1.1", True), ("1.37.0-1.1", True), ("1.35.9-1.1", False),
                               ("1.36.4-1.1", False)):
        raw = fresh("debian12", gpus=8)
        raw["packages"]["packages"]["kubelet"] = {"version": installed, "held": True}
        assert (("kubernetes-skew", True) in _findings(H200, raw)) is refused, installed
    for api, refused in (("v1.34.8", True), ("v1.35.9", False), ("v1.36.3", False), ("v1.36.4", False),
                         ("v1.36.5", False), ("v1.37.1", True)):
        raw = fresh("debian12", gpus=8)
        raw["kubernetes"] = {"api": {"cluster_version": api}}
        assert (("kubernetes-skew", True) in _findings(H200, raw)) is refused, api
