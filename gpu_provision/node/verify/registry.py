"""The agent's checks as a table: each row names its ids, the readings it needs and a pure check.

:func:`run_checks` walks :data:`CHECKS` in order. A row runs once per subject of its kind (``each``): once for the
``node``, for every ``gpu`` nvidia-smi reports, every ``cuda_device`` (a whole GPU or a MIG device) and every
``gpu_pair`` of whole GPUs. Rows of one kind that follow each other make one pass over the subjects, so a GPU's
checks stay together in the report; ``new_pass`` starts another. Adding a check means writing it (``checks.py``) and
adding its row here; a reading no row needed before is one more attribute of :class:`~.node_readings.NodeReadings`.

Check ids are user-visible (schema ``verify-report.v1``): ``ids`` lists the patterns a row produces, with ``{gpu}``,
``{slice}`` (``""``, ``.giN`` or ``.migN``), ``{src}`` and ``{dst}`` filled from the subject.

Rows marked ``workload`` start work on the GPUs or the runtime (CUDA children, a container, a pod). The support
bundle runs the table without them (:data:`STATE_CHECKS`): the node's state against the cluster file, read only,
so collecting evidence from a node in trouble never waits on a GPU that may hang.
"""

from __future__ import annotations

from collections import namedtuple

from . import checks, labels, slices
from .report import Check, Recorder, skipped

TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing (nor dataclasses) at run time: see report.Check
    from typing import Any, Callable, Dict, List, Mapping, Union

    Checks = Union[Check, List[Check]]


class Subject:
    """What one run of a row is about: ``value`` is passed as the reading named by the row's ``each``."""

    __slots__ = ("value", "labels")

    def __init__(self, value: Any = None, labels: Mapping[str, Any] | None = None) -> None:
        self.value = value
        self.labels: Mapping[str, Any] = {} if labels is None else labels

    def check_fields(self) -> dict[str, Any]:
        """The subject fields of a check recorded for this subject (its GPU, if any)."""
        return {"gpu": self.labels["gpu"]} if "gpu" in self.labels else {}


class Row(namedtuple("Row", "id each needs check ids guarded new_pass workload",
                     defaults=((), True, False, False))):
    """One registered check.

    ``id``: the row's name; a check that raises is recorded as a failed check with this id (for a ``guarded`` row).
    ``each``: the kind of subject it runs for. ``needs``: names of readings (attributes of the readings, or the
    subject itself under the name in ``each``) passed to ``check`` in this order, then the expectations.
    ``check``: pure, from those values to one check or a list. ``ids``: the ids it produces when not just ``id``.
    ``guarded``: False for rows whose exceptions end the run as an agent error instead (``status: error``).
    ``new_pass``: start a new pass over the subjects rather than join the rows of the same kind just before.
    ``workload``: the row runs work on the GPUs or the runtime rather than reading state (left out of
    :data:`STATE_CHECKS`).

    A named tuple rather than a dataclass: see :class:`~.report.Check`.
    """

    __slots__ = ()

    @property
    def produces(self) -> tuple[str, ...]:
        """The id patterns of the checks this row produces."""
        return self.ids or (self.id,)


def _cuda_version(version: tuple[str | None, str], expect: dict[str, Any]) -> Check:
    return checks.cuda_version_check(version[0], expect, version[1])


def _nvidiactl(device: tuple[str, dict[str, Any] | None], expect: dict[str, Any]) -> Check:
    return checks.device_file_check("node.device_file.nvidiactl", device[0], device[1], expect)


def _mig(gpu: dict[str, Any], lgi: list[dict[str, Any]] | None, lci: list[dict[str, Any]] | None,
         expect: dict[str, Any]) -> list[Check]:
    return checks.mig_checks(gpu, expect, lgi, lci)


def _device_file(gpu: dict[str, Any], files: dict[int, tuple[str, dict[str, Any] | None]],
                 expect: dict[str, Any]) -> Check:
    path, stat = files[gpu["index"]]
    return checks.device_file_check(f"gpu{gpu['index']}.device_file", path, stat, expect, gpu=gpu["index"])


def _pcie(gpu: dict[str, Any], relinked: dict[int, tuple[int | None, int | None]],
          expect: dict[str, Any]) -> list[Check]:
    return checks.pcie_checks(gpu, relinked.get(gpu["index"]))


def _cuda_device(target: dict[str, Any], results: tuple[dict[str, dict[str, Any] | None], float],
                 cuda_skip: str | None, expect: dict[str, Any]) -> list[Check]:
    """A GPU's or MIG device's CUDA checks; a MIG device's bandwidth floor is its share of the GPU's memory."""
    by_uuid, wall = results
    uuid, prefix = target["uuid"], f"gpu{target['gpu']}{target['slice']}"
    probe = by_uuid.get(uuid)
    if uuid.startswith("MIG-"):
        slices = int((expect.get("gpu") or {}).get("mig_memory_slices") or 8)
        share = target["size"] / slices if target.get("size") else 1.0
        found = checks.cuda_checks(prefix, probe, expect, cuda_skip, share, gpu=target["gpu"], mig_uuid=uuid)
    else:
        found = checks.cuda_checks(prefix, probe, expect, cuda_skip, gpu=target["gpu"])
    # The children ran together: the kernel's own time where measured, else an even share of their wall time.
    seconds = (probe or {}).get("vector_add", {}).get("seconds")
    for check in found:
        check.duration_s = seconds if seconds and check.id.endswith("vector_add") else wall / len(found)
    return found


def _no_cuda_device(targets: list[dict[str, Any]], cuda_skip: str | None, expect: dict[str, Any]) -> list[Check]:
    if targets:
        return []
    return [skipped("node.cuda.vector_add", cuda_skip or "no GPU or MIG device to launch a kernel on")]


def _mig_without_devices(gpu: dict[str, Any], listing: dict[int, dict[str, Any]],
                         expect: dict[str, Any]) -> list[Check]:
    if not gpu.get("mig_current") or listing.get(gpu["index"], {}).get("mig"):
        return []
    return [skipped(f"gpu{gpu['index']}.mig.cuda", "MIG is on but no MIG device is listed (nvidia-smi -L); "
                    "nothing to launch a kernel on", gpu=gpu["index"])]


def _peer_pair(pair: dict[str, Any], expect: dict[str, Any]) -> list[Check]:
    access = f"gpu{pair['src']}-gpu{pair['dst']}.p2p.access"
    if "skip" in pair:
        return [skipped(access, pair["skip"], expected=True, gpu=pair["src"])]
    if "error" in pair:
        return [checks.failed(access, None, True, pair["error"], gpu=pair["src"])]
    found = checks.peer_checks(pair["result"], pair["p2p"], pair["link_gbps"], expect)
    for check in found:
        check.duration_s = pair["duration_s"]
    return found


def _container(result: dict[str, Any] | None, want_devices: int, expect: dict[str, Any]) -> Check:
    return checks.container_check(result, expect, want_devices)


def _allocatable(node: tuple[dict[str, Any] | None, str | None] | None, expect: dict[str, Any]) -> Check:
    if node is None:
        return skipped("node.kubernetes.allocatable", "not a Kubernetes node in the cluster file")
    if (expect.get("kubernetes") or {}).get("allocation") == "dra":
        # Under DRA the reading is the node's ResourceSliceList (see node_readings.node_object).
        return slices.slice_check(node[0], node[1], expect)
    return checks.allocatable_check(node[0], node[1], expect)


def _labels(node: tuple[dict[str, Any] | None, str | None] | None, expect: dict[str, Any]) -> Check:
    if node is None:
        return skipped(labels.ID, "not a Kubernetes node in the cluster file")
    return labels.labels_check(node[0], node[1], expect)


def _pod(pod: tuple[dict[str, Any] | None, str | None] | None, expect: dict[str, Any]) -> Check:
    if pod is not None:
        return checks.pod_check(pod[0], pod[1])
    if (expect.get("kubernetes") or {}).get("enabled"):
        return skipped("node.kubernetes.pod_cuda", "no pod image with python3 configured (kubernetes.pod_image)")
    return skipped("node.kubernetes.pod_cuda", "not a Kubernetes node in the cluster file")


#: Every check of the agent, in report order.
CHECKS: tuple[Row, ...] = (
    Row("node.driver", "node", ("proc_version", "smi_driver"), checks.driver_checks,
        ids=("node.driver.loaded", "node.driver.version")),
    Row("node.cuda.version", "node", ("cuda_version",), _cuda_version),
    Row("node.gpu.count", "node", ("gpus", "pci"), checks.count_checks, ids=("node.gpu.count", "node.pci.gpus")),
    Row("node.device_file.nvidiactl", "node", ("nvidiactl",), _nvidiactl),
    Row("gpu{gpu}.model", "gpu", ("gpu",), checks.model_check),
    Row("gpu{gpu}.persistence", "gpu", ("gpu",), checks.persistence_check),
    Row("gpu{gpu}.ecc", "gpu", ("gpu",), checks.ecc_checks,
        ids=("gpu{gpu}.ecc.mode", "gpu{gpu}.ecc.uncorrected", "gpu{gpu}.ecc.remapped_rows",
             "gpu{gpu}.ecc.retired_pages")),
    Row("gpu{gpu}.mig", "gpu", ("gpu", "lgi", "lci"), _mig,
        ids=("gpu{gpu}.mig.mode", "gpu{gpu}.mig.layout", "gpu{gpu}.mig.compute_instances")),
    Row("gpu{gpu}.device_file", "gpu", ("gpu", "device_files"), _device_file),
    # The link is read again after the CUDA load (an idle GPU slows its link): after every GPU's other checks.
    Row("gpu{gpu}.pcie", "gpu", ("gpu", "relinked"), _pcie, ids=("gpu{gpu}.pcie.link_gen", "gpu{gpu}.pcie.link_width"),
        new_pass=True, workload=True),
    Row("gpu{gpu}{slice}.cuda", "cuda_device", ("cuda_device", "cuda_results", "cuda_skip"), _cuda_device,
        ids=("gpu{gpu}{slice}.cuda.vector_add", "gpu{gpu}{slice}.memory.bandwidth"), guarded=False,
        workload=True),
    Row("node.cuda.vector_add", "node", ("cuda_targets", "cuda_skip"), _no_cuda_device, guarded=False,
        workload=True),
    Row("gpu{gpu}.mig.cuda", "gpu", ("gpu", "listing"), _mig_without_devices, guarded=False,
        workload=True),
    Row("gpu{src}-gpu{dst}.p2p", "gpu_pair", ("gpu_pair",), _peer_pair,
        ids=("gpu{src}-gpu{dst}.p2p.access", "gpu{src}-gpu{dst}.p2p.bandwidth"), guarded=False,
        workload=True),
    Row("node.container.gpus", "node", ("container", "want_devices"), _container, guarded=False,
        workload=True),
    Row("node.kubernetes.allocatable", "node", ("node_object",), _allocatable),
    Row(labels.ID, "node", ("labelled_node",), _labels),
    Row("node.kubernetes.pod_cuda", "node", ("pod",), _pod, workload=True),
)

#: The rows that compare the node's state with the cluster file and start no work on it.
STATE_CHECKS: tuple[Row, ...] = tuple(row for row in CHECKS if not row.workload)


def _node(readings: Any) -> list[Subject]:
    return [Subject()]


def _gpus(readings: Any) -> list[Subject]:
    return [Subject(gpu, {"gpu": gpu["index"]}) for gpu in readings.gpus or []]


def _cuda_devices(readings: Any) -> list[Subject]:
    return [Subject(target, {"gpu": target["gpu"], "slice": target["slice"]}) for target in readings.cuda_targets]


def _gpu_pairs(readings: Any) -> list[Subject]:
    return [Subject(pair, {"gpu": pair["src"], "src": pair["src"], "dst": pair["dst"]})
            for pair in readings.peer_pairs]


#: Each kind of subject and how its subjects are listed from the readings.
SUBJECTS: Dict[str, Callable[[Any], List[Subject]]] = {
    "node": _node, "gpu": _gpus, "cuda_device": _cuda_devices, "gpu_pair": _gpu_pairs,
}


def run_row(recorder: Recorder, row: Row, subject: Subject, readings: Any, expect: dict[str, Any]) -> None:
    """Run one row for one subject; its readings are taken first, so a reading that raises is an agent error."""
    values = [subject.value if name == row.each else getattr(readings, name) for name in row.needs]
    if row.guarded:
        recorder.run(row.id.format(**subject.labels), lambda: row.check(*values, expect), **subject.check_fields())
        return
    produced = row.check(*values, expect)
    for check in produced if isinstance(produced, list) else [produced]:
        recorder.add(check)


def passes(table: tuple[Row, ...]) -> list[list[Row]]:
    """The table cut into passes: rows of one kind that follow each other, unless a row asks for a new pass."""
    out: list[list[Row]] = []
    for row in table:
        if out and out[-1][0].each == row.each and not row.new_pass:
            out[-1].append(row)
        else:
            out.append([row])
    return out


def run_checks(readings: Any, expect: dict[str, Any], table: tuple[Row, ...] = CHECKS) -> list[Check]:
    """Every row of ``table`` for every subject of its kind, pass by pass; the checks in report order."""
    recorder = Recorder()
    for rows in passes(table):
        for subject in SUBJECTS[rows[0].each](readings):
            for row in rows:
                run_row(recorder, row, subject, readings, expect)
    return recorder.checks
