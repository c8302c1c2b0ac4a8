"""The doctor: known GPU-node faults named from a support archive, with their explanation and fix, and every way the
node differs from what its cluster file declares.

:mod:`.evidence` reads an archive (and the cluster file's expectations kept in it), :mod:`.rules` is the rule table,
:mod:`.xid` decodes Xid events with NVIDIA's catalogue, :mod:`.declared` turns the archive's verification report and
drift into findings (:data:`DECLARED`, with :mod:`.fixes` saying what to run), :mod:`.report` holds the findings and
the fleet summary. Everything here is pure: ``gpu-provision diagnose`` collects, the doctor only reads.
"""

from gpu_provision.doctor.declared import DECLARED
from gpu_provision.doctor.evidence import DoctorExpectations, Evidence, from_archive
from gpu_provision.doctor.report import Fault, FleetDiagnosis, NodeDiagnosis, examine
from gpu_provision.doctor.rules import RULES, DoctorRule, Found

__all__ = ["DECLARED", "RULES", "Evidence", "DoctorExpectations", "FleetDiagnosis", "Fault", "Found", "NodeDiagnosis",
           "DoctorRule", "examine", "from_archive"]
