"""The doctor's findings of the declared state: every check the verification agent failed and every drift difference
in the archive, each a finding with its fix, beside the known-fault rules.

The comparisons are not made here. The agent's check table (:mod:`gpu_provision.node.verify.registry`) judged the
node against the file's expectations on the node (``verify/report.json``) and drift's stages compared the probe's
answer with the file's wants on the controller (``controller/drift.json``); this module only says which concept each
result belongs to and what to run about it (:mod:`.fixes`). A device file both name is reported once, from the
agent's check, which knows the group by name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gpu_provision.doctor import fixes
from gpu_provision.doctor.evidence import Evidence
from gpu_provision.doctor.rules import DoctorRule, Found

#: Where the node's verification report (its state checks) and the controller's drift sit in the archive.
VERIFY_REPORT = "verify/report.json"
DRIFT = "controller/drift.json"
#: The loaded nvidia module's options (whether it re-creates the device files, and with which mode).
PARAMS = "/proc/driver/nvidia/params"


@dataclass(frozen=True)
class Declared:
    """One way the node differs from its file: the concept (a :data:`DECLARED` rule's id), what was seen, the fix,
    and the device file it names, if any (so drift does not name it again)."""

    concept: str
    detail: str
    fix: str
    path: str = ""


def _check_concept(check_id: str) -> str:
    """A failed check's concept, from its id (``gpu0.device_file``, ``node.driver.version``, ...)."""
    for pattern, concept in ((r"node\.device_file\.\w+|gpu\d+\.device_file", "declared-device-files"),
                             (r"node\.(driver\.\w+|cuda\.version)", "declared-driver"),
                             (r"gpu\d+\.persistence", "declared-persistence"),
                             (r"gpu\d+\.mig\.\w+", "declared-mig"),
                             (r"node\.container\.\w+", "declared-runtime")):
        if re.fullmatch(pattern, check_id):
            return concept
    return "declared-other"


def _difference_concept(difference: dict[str, Any]) -> str:
    """A drift difference's concept, from its kind and stage."""
    kind, stage = str(difference.get("kind") or ""), str(difference.get("stage") or "")
    if kind == "device-file":
        return "declared-device-files"
    if kind.startswith("service"):
        return "declared-services"
    if kind in ("mig-layout", "vgpu") or stage == "mig":
        return "declared-mig"
    if stage == "driver":
        return "declared-driver"
    return "declared-runtime" if stage in ("runtime", "toolkit") else "declared-other"


def collected(ev: Evidence) -> fixes.Collected:
    """Where the archive came from: its host, and the node's name in the cluster file (for a connector host such
    as ``@local``, the node the verification report was made for)."""
    if not ev.node.startswith("@"):
        return fixes.Collected(ev.node, ev.node)
    return fixes.Collected(ev.node, str((ev.json(VERIFY_REPORT) or {}).get("node") or "NODE"))


def from_checks(ev: Evidence) -> list[Declared]:
    """The failed checks of the node's verification report (none when the archive has no report, or the agent
    ended with an error: then nothing was judged)."""
    report = ev.json(VERIFY_REPORT) or {}
    where = collected(ev)
    out = []
    for check in report.get("checks") or []:
        if check.get("status") != "fail":
            continue
        concept = _check_concept(str(check.get("id")))
        if concept == "declared-device-files":
            detail, fix, path = fixes.device_file_check(check, where, ev.node_file(PARAMS))
            out.append(Declared(concept, detail, fix, path))
        else:
            detail = f"{check.get('id')}: {check.get('reason')}"
            out.append(Declared(concept, detail, fixes.for_check(concept, check, where)))
    return out


def from_drift(ev: Evidence, named: set[str]) -> list[Declared]:
    """The drift differences in the archive, but device files in ``named`` (already reported from a check)."""
    drift = ev.json(DRIFT) or {}
    where = collected(ev)
    params = ev.node_file(PARAMS)
    out = []
    for difference in drift.get("differences") or []:
        concept = _difference_concept(difference)
        if concept == "declared-device-files" and difference.get("item") in named:
            continue
        stage = str(difference.get("stage") or "")
        read = f" (read {difference['file']})" if difference.get("file") else ""
        detail = (f"{stage + ': ' if stage else ''}{difference.get('kind')} {difference.get('item')}: the cluster file "
                  f"wants {difference.get('expected')}, found {difference.get('actual')}{read}")
        out.append(Declared(concept, detail, fixes.for_difference(difference, where, params)))
    return out


def declared_state(ev: Evidence) -> list[Declared]:
    """Every way the node differs from what its cluster file declares: failed checks first, then drift."""
    checked = from_checks(ev)
    return checked + from_drift(ev, {d.path for d in checked if d.path})


def _of(concept: str) -> Any:
    def check(ev: Evidence) -> list[Found]:
        return [Found(d.detail, d.fix) for d in declared_state(ev) if d.concept == concept]

    check.__doc__ = f"The node's {concept} findings (see :func:`declared_state`)."
    return check


_READS = (VERIFY_REPORT, DRIFT)

#: The declared-state rules: one per concept, each finding with its own fix.
DECLARED: tuple[DoctorRule, ...] = (
    DoctorRule("declared-device-files", "device file owner, group or mode not as the cluster file declares", _READS,
               "An NVIDIA device file's group or mode differs from permissions.group / permissions.mode: users "
               "the file lets use GPUs may be refused, or users it does not may get in.",
               fixes.stage("permissions"), _of("declared-device-files")),
    DoctorRule("declared-driver", "driver not as the cluster file declares", _READS,
               "The loaded driver is missing, differs from driver.version / driver.branch, is below driver.cuda_min, "
               "or its packages differ from the driver stage's.", fixes.stage("driver"), _of("declared-driver")),
    DoctorRule("declared-persistence", "persistence mode not as the cluster file declares", _READS,
               "A GPU's persistence mode differs from driver.persistenced; without it the driver tears the GPU "
               "down between uses and every first CUDA call pays for its start.", fixes.stage("driver"),
               _of("declared-persistence")),
    DoctorRule("declared-mig", "MIG layout not as the cluster file declares", _READS,
               "A GPU's MIG mode, instances or layout file differ from mig.layout.", fixes.stage("mig"),
               _of("declared-mig")),
    DoctorRule("declared-runtime", "container runtime not as the cluster file declares", _READS,
               "The container runtime, its default runtime, the nvidia runtime or the CDI spec differ from "
               "container_runtime / toolkit, or a container does not see the GPUs.", fixes.stage("runtime,toolkit"),
               _of("declared-runtime")),
    DoctorRule("declared-services", "service not as the cluster file declares", _READS,
               "A unit a stage manages is missing, or not enabled or running as the stage wants.",
               "Re-run the stage named in the finding.", _of("declared-services")),
    DoctorRule("declared-other", "node not as the cluster file declares", _READS,
               "Another check or stage found the node differing from the file (GPU count or model, ECC, PCIe, "
               "packages, files, Kubernetes).", "Re-run the stage named in the finding; a hardware check (GPU "
               "count, model, ECC, PCIe) calls for the GPU's service.", _of("declared-other")),
)
