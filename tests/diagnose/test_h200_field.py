"""The support bundle captured by ``gpu-provision diagnose`` on a real H200 host (tests/fixtures/device/h200-field).

The doctor must raise no finding on that healthy node, and the bundle must hold what docs/troubleshooting.md
promises, read back by the same reader the command uses.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

from gpu_provision.doctor import examine, from_archive

FIELD = Path(__file__).resolve().parents[1] / "fixtures" / "device" / "h200-field"
ARCHIVE = FIELD / "diagnose-h200-node.tar.gz"


def test_no_finding_on_the_real_h200_bundle() -> None:
    assert examine(from_archive(str(ARCHIVE), node="h200-node")) == []
    assert json.loads((FIELD / "diagnose.json").read_text())["nodes"][0]["findings"] == []


def test_the_real_bundle_holds_the_promised_items() -> None:
    with tarfile.open(ARCHIVE) as archive:
        names = set(archive.getnames())
    assert {"manifest.json", "probe.json", "nvidia-smi/q.xml", "kernel/nvidia.log", "files/proc/driver/nvidia/version",
            "expectations.json", "controller/drift.json"} <= names


def test_the_real_nodes_drift_becomes_declared_findings() -> None:
    """That node was never converged (no containerd, toolkit or MIG layout): no known fault, but every drift
    difference the controller kept in the bundle is a finding of the declared state, with its stage's deploy as
    the fix."""
    from gpu_provision.doctor import DECLARED

    evidence = from_archive(str(ARCHIVE), node="h200-node")
    differences = evidence.json("controller/drift.json")["differences"]
    found = examine(evidence, DECLARED)
    assert len(found) == len(differences) > 0
    assert {f.rule.id for f in found} <= {r.id for r in DECLARED}
    assert all("GPU_PROVISION_STAGES=" in f.fix and "--limit h200-node" in f.fix for f in found)
