"""The doctor reads the declared state: the verification agent's failed checks and drift's differences in a bundle
become findings with their fixes, beside the known-fault rules.

The verification reports here are made by the agent's own checks (:mod:`gpu_provision.node.verify.checks`) on
expectations derived from a cluster file (:func:`gpu_provision.verify.expect.from_node`), as on a node; the last
tests run the node's ``diagnose`` entry itself and read its bundle back.
"""

from __future__ import annotations

import dataclasses
import grp
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.doctor import DECLARED, RULES, FleetDiagnosis, NodeDiagnosis, examine, from_archive
from gpu_provision.doctor.evidence import Evidence
from gpu_provision.node.verify import checks
from gpu_provision.node.verify.report import build_report
from gpu_provision.spec import load_cluster
from gpu_provision.verify.expect import build_expectations, from_node
from gpu_provision.verify.report import schema_problems

ROOT = Path(__file__).resolve().parents[2]
#: The loaded module's line as the real H200 printed it (driver 580.159.04), and one of an older driver.
H200_PROC = (ROOT / "tests" / "fixtures" / "h200" / "proc_driver_nvidia_version.txt").read_text()
OLD_PROC = H200_PROC.replace("580.159.04", "570.86.15")


@pytest.fixture(scope="module")
def expect(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The agent's expectations for a node whose cluster file says: device files 0660, group ``gpu``; driver
    580.159.04."""
    path = tmp_path_factory.mktemp("declared") / "cluster.yaml"
    path.write_text(json.dumps({"version": "v1", "cluster": {"name": "declared", "kubernetes": {"enabled": False}},
                                "nodes": [{"name": "gpu-01", "address": "127.0.0.1",
                                           "gpus": {"model": "H200", "count": 1},
                                           "driver": {"install_method": "preinstalled", "version": "580.159.04"},
                                           "permissions": {"group": "gpu", "mode": "0660"}}]}))
    return from_node(load_cluster(path).node("gpu-01")).to_dict()


def report(expect: dict[str, Any], nvidia0: str = "0660", nvidiactl: str = "0660",
           proc: str = H200_PROC, smi: str = "580.159.04") -> str:
    """The agent's report (state checks) for a node whose device files have these modes (group ``gpu``) and whose
    driver is ``proc``'s and ``smi``'s."""
    def stat(mode: str) -> dict[str, str]:
        return {"owner": "root", "group": "gpu", "mode": mode}

    found = [*checks.driver_checks(proc, smi, expect),
             checks.device_file_check("node.device_file.nvidiactl", "/dev/nvidiactl", stat(nvidiactl), expect),
             checks.device_file_check("gpu0.device_file", "/dev/nvidia0", stat(nvidia0), expect, gpu=0)]
    doc = build_report("gpu-01", "test", "2026-12-02T00:00:00.000Z", 0.1, {}, found)
    assert schema_problems(doc) == []
    return json.dumps(doc)


@pytest.fixture
def bundle(evidence):  # type: ignore[no-untyped-def]
    """The healthy H200 bundle with ``changes``, collected from the node ``node``."""
    return lambda changes, node="gpu-01": dataclasses.replace(evidence(changes), node=node)


def declared(ev: Any) -> list[tuple[str, str, str]]:
    return [(f.rule.id, f.detail, f.fix) for f in examine(ev, DECLARED)]


def test_declared_rule_rows_are_complete_and_apart_from_the_known_faults():
    assert not {r.id for r in DECLARED} & {r.id for r in RULES}
    assert len({r.id for r in DECLARED}) == len(DECLARED)
    for rule in DECLARED:
        assert rule.id.startswith("declared-") and rule.title and rule.evidence and rule.explanation and rule.fix


def test_a_matching_node_gives_no_declared_finding(bundle, expect):
    ev = bundle({"verify/report.json": report(expect),
                   "controller/drift.json": json.dumps({"name": "gpu-01", "status": "in-sync", "differences": []})})
    assert declared(ev) == []
    assert examine(ev, RULES + DECLARED) == []


def test_a_bundle_without_verification_or_drift_gives_none(evidence):
    assert declared(evidence()) == []


def test_gpu_device_file_opened_to_everyone(bundle, expect):
    """/dev/nvidia0 made 0666 where the file says 0660, group gpu (the rig's case)."""
    ev = bundle({"verify/report.json": report(expect, nvidia0="0666")})
    assert declared(ev) == [(
        "declared-device-files",
        "/dev/nvidia0: mode 0666, group gpu; the cluster file wants mode 0660, group gpu",
        "on the node: chgrp gpu /dev/nvidia0 && chmod 0660 /dev/nvidia0; then GPU_PROVISION_STAGES=permissions "
        "pyinfra inventory.py gpu_provision.deploys.gpu_node --limit gpu-01 keeps them "
        "(permissions.group, permissions.mode)")]


def test_control_device_closed_to_its_group(bundle, expect):
    """/dev/nvidiactl made 0600 (the real H200's case): the group's users are refused though the files' own mode
    is right."""
    ev = bundle({"verify/report.json": report(expect, nvidiactl="0600")})
    [(rule, detail, fix)] = declared(ev)
    assert rule == "declared-device-files"
    assert detail == "/dev/nvidiactl: mode 0600, group gpu; the cluster file wants mode 0660, group gpu"
    assert fix.startswith("on the node: chgrp gpu /dev/nvidiactl && chmod 0660 /dev/nvidiactl; then ")


def test_driver_version_not_the_pinned_one(bundle, expect):
    ev = bundle({"verify/report.json": report(expect, proc=OLD_PROC, smi="570.86.15")})
    [(rule, detail, fix)] = declared(ev)
    assert rule == "declared-driver"
    assert detail == "node.driver.version: driver 570.86.15 is not the pinned 580.159.04"
    assert fix.startswith("GPU_PROVISION_STAGES=driver pyinfra inventory.py gpu_provision.deploys.gpu_node "
                          "--limit gpu-01 installs the driver the file declares")


def test_userspace_and_loaded_module_differ(bundle, expect):
    ev = bundle({"verify/report.json": report(expect, proc=OLD_PROC)})
    [(rule, detail, fix)] = declared(ev)
    assert rule == "declared-driver" and "user-space driver and loaded kernel module differ" in detail
    assert fix.startswith("reboot the node")


def test_drift_differences_each_with_their_stage(bundle, expect):
    """Drift's differences: the container runtime's default, a service, the MIG layout; a device file the agent's
    report names already is not named twice."""
    differences = [
        {"stage": "toolkit", "kind": "nvidia-runtime", "item": "docker", "expected": "present and current",
         "actual": "default-runtime is runc", "file": "/etc/docker/daemon.json"},
        {"stage": "driver", "kind": "service-enabled", "item": "nvidia-persistenced.service", "expected": "enabled",
         "actual": "disabled"},
        {"stage": "mig", "kind": "mig-layout", "item": "GPU 0", "expected": "1g.18gb x7", "actual": "MIG off"},
        {"stage": "permissions", "kind": "device-file", "item": "/dev/nvidia0", "expected": "gid 990 mode 0660",
         "actual": "gid 990 mode 0666"},
        {"stage": "permissions", "kind": "device-file", "item": "/dev/nvidia-uvm", "expected": "gid 990 mode 0660",
         "actual": "gid 0 mode 0666"},
    ]
    ev = bundle({"verify/report.json": report(expect, nvidia0="0666"),
                   "controller/drift.json": json.dumps({"name": "gpu-01", "differences": differences})})
    found = declared(ev)
    assert [(rule, detail.split(":")[0]) for rule, detail, _ in found] == [
        ("declared-device-files", "/dev/nvidia0"), ("declared-device-files", "permissions"),
        ("declared-mig", "mig"), ("declared-runtime", "toolkit"), ("declared-services", "driver")]
    by_rule = {rule: (detail, fix) for rule, detail, fix in found[1:]}
    assert by_rule["declared-device-files"] == (
        "permissions: device-file /dev/nvidia-uvm: the cluster file wants gid 990 mode 0660, found gid 0 mode "
        "0666", "on the node: chown 0:990 /dev/nvidia-uvm && chmod 0660 /dev/nvidia-uvm; then "
        "GPU_PROVISION_STAGES=permissions pyinfra inventory.py gpu_provision.deploys.gpu_node --limit gpu-01 keeps "
        "them")
    assert by_rule["declared-runtime"][0].endswith("default-runtime is runc (read /etc/docker/daemon.json)")
    assert by_rule["declared-services"][1] == (
        "on the node: systemctl enable nvidia-persistenced.service; or GPU_PROVISION_STAGES=driver pyinfra "
        "inventory.py gpu_provision.deploys.gpu_node --limit gpu-01")
    assert by_rule["declared-mig"][1].startswith("GPU_PROVISION_STAGES=mig pyinfra")


def test_declared_findings_print_their_own_fix(bundle, expect):
    ev = bundle({"verify/report.json": report(expect, nvidia0="0666")})
    summary = FleetDiagnosis([NodeDiagnosis("gpu-01", "out/gpu-01.tar.gz", examine(ev, RULES + DECLARED))], "out")
    assert summary.exit_status == 1
    assert summary.render().splitlines()[1:3] == [
        "  [declared-device-files] /dev/nvidia0: mode 0666, group gpu; the cluster file wants mode 0660, group gpu",
        "    fix: on the node: chgrp gpu /dev/nvidia0 && chmod 0660 /dev/nvidia0; then GPU_PROVISION_STAGES=permissions"
        " pyinfra inventory.py gpu_provision.deploys.gpu_node --limit gpu-01 keeps them (permissions.group, "
        "permissions.mode)"]
    [finding] = summary.to_json()["nodes"][0]["findings"]
    assert finding["rule"] == "declared-device-files" and finding["fix"].startswith("on the node: chgrp gpu ")


def test_a_connector_host_is_named_by_its_report(bundle, expect):
    ev = bundle({"verify/report.json": report(expect, nvidia0="0666")}, node="@local")
    [(_, _, fix)] = declared(ev)
    assert ("then GPU_PROVISION_NODE=gpu-01 GPU_PROVISION_STAGES=permissions pyinfra @local "
            "gpu_provision.deploys.gpu_node keeps them") in fix


def test_known_fault_bundles_stay_as_they_were(evidence):
    """The recorded H200 outputs hold no verification report or drift: the declared rules add nothing there."""
    assert examine(evidence(), RULES + DECLARED) == []


def test_the_node_entry_puts_the_verification_report_in_the_bundle(tmp_path):
    """The node's own ``diagnose`` entry, given the expectations, runs the agent's state checks: a control device
    made 0600 where the file declares 0666 is a finding read back from the archive."""
    dev = tmp_path / "dev"
    dev.mkdir()
    (dev / "nvidiactl").touch()
    (dev / "nvidiactl").chmod(0o600)
    group = grp.getgrgid(os.getgid()).gr_name
    expect = build_expectations("gpu-01", "H200", 1, device_permissions={"group": group, "mode": "0666"},
                                paths={"dev": str(dev), "sysfs": str(tmp_path / "sys"), "proc": str(tmp_path / "proc"),
                                       "nvidia_smi": str(tmp_path / "no-nvidia-smi")}).to_dict()
    out = tmp_path / "bundle.tar.gz"
    request = {"verify": expect, "bug_report": False}
    done = subprocess.run([sys.executable, "-m", "gpu_provision.node", "diagnose", "--out", str(out), "--request",
                           json.dumps(request)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with tarfile.open(out) as archive:
        assert "verify/report.json" in archive.getnames()
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
    [entry] = [item for item in manifest["items"] if item["name"] == "verify/report.json"]
    assert "--state" in entry["source"] and "error" not in entry
    ev = from_archive(str(out), node="gpu-01")
    assert schema_problems(ev.json("verify/report.json")) == []
    # State checks only: no CUDA, container or pod work in the bundle's report.
    workloads = ("vector_add", "bandwidth", "container.gpus", "pod_cuda", "p2p.access", "link_gen")
    assert not [c["id"] for c in ev.json("verify/report.json")["checks"] if c["id"].endswith(workloads)]
    assert (f"{dev}/nvidiactl: mode 0600, group {group}; the cluster file wants mode 0666, group {group}"
            in [detail for _, detail, _ in declared(ev)])


def test_the_h200_field_script_and_its_cluster_file():
    """tests/fixtures/device/h200-doctor-declared: the cluster file loads, the script parses, and the finding its
    README promises is the one the doctor prints for that node's report."""
    folder = ROOT / "tests" / "fixtures" / "device" / "h200-doctor-declared"
    assert subprocess.run(["bash", "-n", str(folder / "run.sh")]).returncode == 0
    expect = from_node(load_cluster(folder / "cluster.yaml").node("h200-node")).to_dict()
    assert expect["device_permissions"] == {"group": "video", "mode": "0660"}
    check = checks.device_file_check("node.device_file.nvidiactl", "/dev/nvidiactl",
                                     {"owner": "root", "group": "root", "mode": "0666"}, expect)
    doc = build_report("h200-node", "test", "2026-12-02T00:00:00.000Z", 0.1, {}, [check])
    params = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n"  # the H200's
    ev = Evidence(node="@local", files={"verify/report.json": json.dumps(doc),
                                        "files/proc/driver/nvidia/params": params})
    [(rule, detail, fix)] = declared(ev)
    readme = (folder / "README.md").read_text()
    assert f"[{rule}] {detail}\n  fix: {fix}\n" in readme


def test_a_chmod_the_loaded_module_would_undo_is_not_the_fix(bundle, expect):
    """On a real H200 the driver re-created /dev/nvidiactl as 0666 at the next nvidia-smi after it was made 0600
    (ModifyDeviceFiles: 1, DeviceFileMode: 438 in /proc/driver/nvidia/params): where the loaded module's mode is not
    the file's, the fix is the module's options and its next load, never a chmod."""
    params = "ModifyDeviceFiles: 1\nDeviceFileUID: 0\nDeviceFileGID: 0\nDeviceFileMode: 438\n"
    ev = bundle({"verify/report.json": report(expect, nvidia0="0666"), "files/proc/driver/nvidia/params": params})
    [(rule, detail, fix)] = declared(ev)
    assert (rule, detail) == ("declared-device-files",
                              "/dev/nvidia0: mode 0666, group gpu; the cluster file wants mode 0660, group gpu")
    assert fix.startswith("the loaded nvidia module makes /dev/nvidia* mode 0666 again") and "chmod" in fix
    assert "GPU_PROVISION_STAGES=permissions" in fix and "reboot" in fix and "chgrp" not in fix
    # A module that keeps its hands off the files (ModifyDeviceFiles: 0), or one loaded with the wanted mode: chmod.
    for kept in (params.replace("ModifyDeviceFiles: 1", "ModifyDeviceFiles: 0"), params.replace("438", "432")):
        ev = bundle({"verify/report.json": report(expect, nvidia0="0666"), "files/proc/driver/nvidia/params": kept})
        assert declared(ev)[0][2].startswith("on the node: chgrp gpu /dev/nvidia0 && chmod 0660 /dev/nvidia0")
