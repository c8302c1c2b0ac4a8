"""The doctor's findings for one node and the fleet summary (text or JSON) ``gpu-provision diagnose`` prints."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpu_provision.doctor.evidence import Evidence
from gpu_provision.doctor.rules import RULES, DoctorRule, Found


@dataclass(frozen=True)
class Fault:
    """One instance of a known fault on a node: the rule that names it, what it saw, and the instance's own fix
    where it has one (else the rule's)."""

    rule: DoctorRule
    detail: str
    own_fix: str = ""

    @property
    def fix(self) -> str:
        """What to run or change: the instance's own fix, else the rule's."""
        return self.own_fix or self.rule.fix

    def to_json(self) -> dict[str, str]:
        """The JSON form: rule id, title, detail, explanation, fix."""
        r = self.rule
        return {"rule": r.id, "title": r.title, "detail": self.detail, "explanation": r.explanation, "fix": self.fix}


def examine(evidence: Evidence, rules: tuple[DoctorRule, ...] = RULES) -> list[Fault]:
    """Every rule run on one node's evidence, in table order."""
    return [Fault(rule, *found) if isinstance(found, Found) else Fault(rule, found)
            for rule in rules for found in rule.check(evidence)]


@dataclass
class NodeDiagnosis:
    """One node: its archive (None when none was collected), its findings, or why it could not be diagnosed; and why
    the cluster file's declared state was left out of its findings, when it was."""

    node: str
    archive: str | None = None
    findings: list[Fault] = field(default_factory=list)
    error: str | None = None
    declared_state_left_out: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The node's JSON form."""
        return {"node": self.node, "bundle": self.archive, "error": self.error,
                "declared_state_left_out": self.declared_state_left_out,
                "findings": [f.to_json() for f in self.findings]}


@dataclass
class FleetDiagnosis:
    """Every node of a ``diagnose`` run, and where the archives were written."""

    nodes: list[NodeDiagnosis]
    out: str

    @property
    def exit_status(self) -> int:
        """2 when a node could not be diagnosed, else 1 when any finding, else 0."""
        if any(n.error for n in self.nodes):
            return 2
        return 1 if any(n.findings for n in self.nodes) else 0

    def to_json(self) -> dict[str, Any]:
        """The summary as JSON: the output folder and every node."""
        return {"out": self.out, "nodes": [n.to_json() for n in self.nodes]}

    def render(self) -> str:
        """The summary as text: one block per node, each finding with its fix."""
        lines = []
        for n in self.nodes:
            if n.error:
                lines.append(f"{n.node}: not diagnosed: {n.error}")
                continue
            lines.append(f"{n.node}: {len(n.findings) or 'no'} finding{'' if len(n.findings) == 1 else 's'}"
                         f" ({n.archive})")
            if n.declared_state_left_out:
                lines.append(f"  declared state left out (known-fault rules only): {n.declared_state_left_out}")
            for f in n.findings:
                lines += [f"  [{f.rule.id}] {f.detail}", f"    fix: {f.fix}"]
        counts = (sum(1 for n in self.nodes if n.findings), sum(1 for n in self.nodes if n.error))
        lines.append(f"{len(self.nodes)} node(s): {counts[0]} with findings, {counts[1]} not diagnosed; "
                     f"bundles in {self.out}")
        return "\n".join(lines)
