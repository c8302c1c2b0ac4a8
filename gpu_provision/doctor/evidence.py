"""What the doctor reads: one node's support archive (archive name -> text) and what the cluster file expects of
the node, with the few readings several rules share (driver versions, ``nvidia-smi -q -x``, the probe's answer).

Everything here is pure: an archive is read once from its ``tar.gz`` (:func:`from_archive`) or built from recorded
files in tests, and rules never touch the node.
"""

from __future__ import annotations

import json
import re
import tarfile
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from gpu_provision.node.driver_version import PROC_VERSION, module_version

#: The name the controller gives the cluster file's expectations inside an archive.
EXPECTATIONS = "expectations.json"


@dataclass(frozen=True)
class DoctorExpectations:
    """What the cluster file says about the node, as the rules need it; every field may be unknown.

    ``images``: container image -> the CUDA version the file declares for it (``driver.cuda_min``), or None.
    ``left_out``: why the cluster file's declared state is not in the bundle (no cluster file, the node not in it,
    the file invalid), None when it is: the doctor then has only its known-fault rules, and says so.
    """

    users: tuple[str, ...] = ()
    images: dict[str, str | None] = field(default_factory=dict)
    runtime: str | None = None
    kubernetes: bool = False
    left_out: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The form kept in the archive as ``expectations.json``."""
        return {"users": list(self.users), "images": self.images, "runtime": self.runtime,
                "kubernetes": self.kubernetes, "declared_state_left_out": self.left_out}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> DoctorExpectations:
        """Read back :meth:`to_json`'s form."""
        return cls(users=tuple(doc.get("users") or ()), images=dict(doc.get("images") or {}),
                   runtime=doc.get("runtime"), kubernetes=bool(doc.get("kubernetes")),
                   left_out=doc.get("declared_state_left_out"))


@dataclass(frozen=True)
class Evidence:
    """One node's archive: ``files`` maps archive names (``kernel/nvidia.log``, ``files/etc/docker/daemon.json``) to
    their text; ``expect`` is the cluster file's side."""

    node: str
    files: dict[str, str]
    expect: DoctorExpectations = field(default_factory=DoctorExpectations)

    def text(self, name: str) -> str | None:
        """The item ``name``, or None when the archive lacks it."""
        return self.files.get(name)

    def node_file(self, path: str) -> str | None:
        """The node's file at ``path`` as kept in the archive, or None."""
        return self.files.get("files" + path)

    def json(self, name: str) -> Any:
        """The item ``name`` read as JSON; None when absent or not JSON."""
        text = self.text(name)
        try:
            return json.loads(text) if text else None
        except ValueError:
            return None

    @cached_property
    def smi(self) -> ElementTree.Element | None:
        """``nvidia-smi -q -x`` as an XML tree, or None (no GPU answered, or no output)."""
        text = self.text("nvidia-smi/q.xml")
        if not text or "<nvidia_smi_log" not in text:
            return None
        try:
            return ElementTree.fromstring(text[text.index("<nvidia_smi_log"):])
        except ElementTree.ParseError:
            return None

    def gpus(self) -> list[ElementTree.Element]:
        """The ``<gpu>`` elements of ``nvidia-smi -q -x``."""
        return [] if self.smi is None else self.smi.findall("gpu")

    def driver_cuda(self) -> str | None:
        """The newest CUDA version the loaded driver supports (``nvidia-smi``'s "CUDA Version")."""
        found = None if self.smi is None else self.smi.findtext("cuda_version")
        if found:
            return found.strip()
        match = re.search(r"CUDA Version:\s*(\d+\.\d+)", self.text("nvidia-smi/nvidia-smi.txt") or "")
        return match.group(1) if match else None

    def module_version(self) -> str | None:
        """The loaded kernel module's version, from ``/proc/driver/nvidia/version``."""
        return module_version(self.node_file(PROC_VERSION))

    def library_versions(self) -> dict[str, str]:
        """Installed userspace NVML library path -> its version (from ``libnvidia-ml.so.<version>``)."""
        out = {}
        for line in (self.text("versions/libnvidia-ml.txt") or "").splitlines():
            match = re.search(r"libnvidia-ml\.so\.(\d+\.\d+(?:\.\d+)?)$", line.strip())
            if match:
                out[line.strip()] = match.group(1)
        return out

    def probe(self, section: str) -> dict[str, Any]:
        """The probe's answer for ``section`` (empty when missing or failed)."""
        found = (self.json("probe.json") or {}).get(section)
        return found if isinstance(found, dict) and "error" not in found else {}

    def modules(self) -> set[str]:
        """Names of the loaded kernel modules (``/proc/modules``, else the probe's list)."""
        text = self.node_file("/proc/modules")
        if text is not None:
            return {line.split()[0] for line in text.splitlines() if line.strip()}
        return set(self.probe("system").get("modules") or [])


    def pci_drivers(self) -> dict[str, str | None]:
        """NVIDIA GPUs on the PCI bus (display class ``0x03...``) -> the kernel driver bound to each, None when none
        is (``system/pci.json``; empty when the archive lacks it)."""
        found = self.json("system/pci.json") or {}
        return {address: item.get("driver") for address, item in found.items()
                if isinstance(item, dict) and str(item.get("class") or "").startswith("0x03")}


def from_archive(path: str, node: str | None = None) -> Evidence:
    """The evidence in the archive at ``path`` (its ``expectations.json`` included when the controller added it)."""
    files: dict[str, str] = {}
    with tarfile.open(path, "r:gz") as archive:
        for member in archive.getmembers():
            handle = archive.extractfile(member) if member.isfile() else None
            if handle is not None:
                files[member.name] = handle.read().decode("utf-8", "replace")
    manifest = json.loads(files.get("manifest.json") or "{}")
    expect = DoctorExpectations.from_json(json.loads(files.get(EXPECTATIONS) or "{}"))
    return Evidence(node=node or manifest.get("node") or path, files=files, expect=expect)
