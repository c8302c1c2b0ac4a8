"""Every reading the registered checks need from one node, by name: each taken once, and only when asked for.

A reading is a cached property, so several checks share one ``nvidia-smi -q -x`` and a check that no row asks for
costs nothing. The slow readings (the CUDA children, the container, the Kubernetes node and pod) are started by
:meth:`NodeReadings.start_background` before any check runs and awaited by the first check that needs them. A
reading that raises ends the run as an agent error, as before the checks were a table.
"""

from __future__ import annotations

import os
import time
from functools import cached_property

from ..mig.nvsmi import parse_lci, parse_lgi
from . import nvsmi, readings, runtime, slices
from .probes import Background, PeerProbe, Probes, device_result, libcuda_problem

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

    from .probes import Relaunch

DEFAULT_PATHS = {"sysfs": "/sys", "dev": "/dev", "proc": "/proc", "nvidia_smi": "nvidia-smi",
                 "libcuda": "libcuda.so.1"}
#: Readings whose work starts before the first check, so it runs while the others are taken.
BACKGROUND = ("cuda_probes", "container_job", "node_job", "labels_job", "pod_job", "peer_job")


class NodeReadings:
    """The readings of one node for one run; ``expect`` gives the paths and which optional probes run."""

    def __init__(self, expect: dict[str, Any], relaunch: Relaunch):
        self.expect = expect
        self.relaunch = relaunch
        self.paths = dict(DEFAULT_PATHS, **(expect.get("paths") or {}))
        self.kube = expect.get("kubernetes") or {}
        self.smi_binary = readings.Smi(self.paths["nvidia_smi"])
        self.cuda_started = time.perf_counter()

    def start_background(self) -> None:
        """Start the slow readings (CUDA children first), so they overlap the checks that follow."""
        for name in BACKGROUND:
            getattr(self, name)

    def host(self) -> dict[str, Any]:
        """The report's ``host`` header: kernel, OS, driver, CUDA, GPUs, NVML status, CUDA wall time."""
        host: dict[str, Any] = readings.host_facts(self.paths["proc"])
        host.update({"driver": self.smi_driver, "cuda": self.query["cuda_version"] if self.query else None,
                     "gpus": [{k: g[k] for k in ("index", "name", "uuid", "bus_id")} for g in self.gpus or []],
                     # NVML is opened only for a check that reads it (peer access): pynvml's import and NVML's
                     # start cost every run otherwise, for a header line.
                     "nvml": (self.nvml[1] or "available") if "nvml" in self.__dict__ else "not opened (no check "
                                                                                            "needed it)",
                     # 0 when no CUDA child was started (a run of the state checks alone).
                     "cuda_wall_s": round(self.cuda_results[1], 3) if "cuda_probes" in self.__dict__ else 0.0})
        return host

    def close(self) -> None:
        """Shut NVML down if a check opened it; end a peer probe no check asked for."""
        nvml = self.__dict__.get("nvml", (None, None))[0]
        if nvml is not None:
            nvml.close()
        peer = self.__dict__.get("peer_job")
        if peer is not None:
            peer.stop()

    @cached_property
    def proc_version(self) -> str | None:
        """``/proc/driver/nvidia/version``, or the stand-in a test rig names as ``driver_version_file``."""
        return readings.read_text(self.paths.get("driver_version_file")
                                  or os.path.join(self.paths["proc"], "driver", "nvidia", "version"))

    @cached_property
    def query_xml(self) -> tuple[str | None, str | None]:
        """``nvidia-smi -q -x``: ``(text, None)`` or ``(None, reason)``."""
        return self.smi_binary.text("-q", "-x")

    @cached_property
    def query(self) -> dict[str, Any] | None:
        """The parsed ``nvidia-smi -q -x`` report, or None when nvidia-smi gave none."""
        text = self.query_xml[0]
        return nvsmi.parse_query_xml(text) if text else None

    @cached_property
    def smi_driver(self) -> str | None:
        """The driver version nvidia-smi reports."""
        return self.query["driver_version"] if self.query else None

    @cached_property
    def gpus(self) -> list[dict[str, Any]] | None:
        """The GPUs nvidia-smi reports, or None when it gave no list."""
        return self.query["gpus"] if self.query else None

    @cached_property
    def listing(self) -> dict[int, dict[str, Any]]:
        """``nvidia-smi -L`` by GPU index (with each GPU's MIG devices), read only where MIG is on: it is the one
        place that pairs MIG devices with their UUIDs, and a GPU without MIG has its UUID in the XML report. An
        nvidia-smi call costs tens of milliseconds on a stand-in and more on a real node, so one without MIG is
        left out (empty here)."""
        if not self.mig_on:
            return {}
        text, _ = self.smi_binary.text("-L")
        return {g["index"]: g for g in nvsmi.parse_list(text or "")}

    @cached_property
    def mig_on(self) -> bool:
        """Whether any GPU has MIG on or the cluster file wants MIG: only then are the MIG lists read."""
        return any(g.get("mig_current") for g in self.gpus or []) or bool(self.expect.get("mig"))

    @cached_property
    def lgi(self) -> list[dict[str, Any]] | None:
        """``nvidia-smi mig -lgi`` (GPU instances), or None when MIG is off or it gave no answer."""
        text = self.smi_binary.text("mig", "-lgi")[0] if self.mig_on else None
        return parse_lgi(text) if text is not None else None

    @cached_property
    def lci(self) -> list[dict[str, Any]] | None:
        """``nvidia-smi mig -lci`` (compute instances), or None when MIG is off or it gave no answer."""
        text = self.smi_binary.text("mig", "-lci")[0] if self.mig_on else None
        return parse_lci(text) if text is not None else None

    @cached_property
    def mig_devices(self) -> dict[int, list[dict[str, int]]]:
        """MIG devices per GPU with their GPU instance ids, from the XML report (empty when MIG is off)."""
        text = self.query_xml[0]
        return nvsmi.parse_mig_devices(text) if self.mig_on and text else {}

    @cached_property
    def cuda_skip(self) -> str | None:
        """Why no CUDA probe can run here (libcuda not loadable, no GPU list), or None."""
        problem = libcuda_problem(self.paths["libcuda"])
        if problem is None and self.gpus is None:
            problem = f"no GPU list from nvidia-smi: {self.query_xml[1]}"
        return problem

    @cached_property
    def cuda_targets(self) -> list[dict[str, Any]]:
        """What a CUDA child probes: every whole GPU and every MIG device of a GPU with MIG on.

        Each target: ``uuid``, ``gpu`` (index), ``slice`` (``""``, ``.giN`` or ``.migN``, the id part after
        ``gpuN``) and, for a MIG device, its GPU instance's ``size`` in memory slices.
        """
        targets = []
        for gpu in self.gpus or []:
            if gpu.get("mig_current"):
                listed = self.listing.get(gpu["index"], {})
                by_device = {d["index"]: d for d in self.mig_devices.get(gpu["index"], [])}
                for mig in listed.get("mig", []):
                    gi = by_device.get(mig["device"], {}).get("gpu_instance_id")
                    row = next((r for r in self.lgi or [] if r["gpu"] == gpu["index"] and r["instance_id"] == gi),
                               None)
                    targets.append({"uuid": mig["uuid"], "gpu": gpu["index"],
                                    "slice": f".gi{gi}" if gi is not None else f".mig{mig['device']}",
                                    "size": row["size"] if row else None})
            elif gpu.get("uuid"):
                targets.append({"uuid": gpu["uuid"], "gpu": gpu["index"], "slice": "", "size": None})
        return targets

    @cached_property
    def cuda_probes(self) -> Probes:
        """The CUDA children, started (none when :attr:`cuda_skip` says why not)."""
        probes = Probes(self.paths["libcuda"], self.relaunch)
        self.cuda_started = time.perf_counter()
        if self.cuda_skip is None:
            probes.start([t["uuid"] for t in self.cuda_targets])
        return probes

    @cached_property
    def cuda_results(self) -> tuple[dict[str, dict[str, Any] | None], float]:
        """Each target's probe result (its one device, or ``{error}``) by UUID, and the CUDA part's wall time."""
        results = self.cuda_probes.wait() if self.cuda_skip is None else {}
        return {uuid: device_result(r) for uuid, r in results.items()}, time.perf_counter() - self.cuda_started

    @cached_property
    def nvml(self) -> tuple[Any, str | None]:
        """An open NVML session and None, or None and why NVML cannot be used."""
        try:
            from .nvml import Nvml

            return Nvml.open()
        except Exception as exc:
            return None, f"pynvml unusable: {exc}"

    @cached_property
    def cuda_version(self) -> tuple[str | None, str]:
        """The CUDA version the driver supports and where it was read (nvidia-smi, else NVML)."""
        version = (self.query or {}).get("cuda_version")
        if version is not None:
            return version, "nvidia-smi -q -x"
        nvml, problem = self.nvml
        if nvml is None:
            return None, f"nvidia-smi gave none; {problem}"
        version, why = nvml.cuda_driver_version()
        return version, f"NVML: {why}" if why else "NVML"

    @cached_property
    def pci(self) -> list[dict[str, str]] | None:
        """NVIDIA GPUs on the PCI bus (sysfs), or None without sysfs."""
        return readings.pci_gpus(self.paths["sysfs"])

    @cached_property
    def nvidiactl(self) -> tuple[str, dict[str, Any] | None]:
        """Path and ownership of ``/dev/nvidiactl``."""
        path = os.path.join(self.paths["dev"], "nvidiactl")
        return path, readings.stat_device(path)

    @cached_property
    def device_files(self) -> dict[int, tuple[str, dict[str, Any] | None]]:
        """Path and ownership of each GPU's ``/dev/nvidiaN`` (N the GPU's minor number) by GPU index."""
        files = {}
        for gpu in self.gpus or []:
            path = os.path.join(self.paths["dev"], f"nvidia{gpu.get('minor_number', gpu['index'])}")
            files[gpu["index"]] = (path, readings.stat_device(path))
        return files

    @cached_property
    def relinked(self) -> dict[int, tuple[int | None, int | None]]:
        """PCIe generation and width read again after the CUDA load, when a link was below its maximum at rest."""
        self.cuda_results  # noqa: B018 (the load that wakes an idle link must have run first)
        if not any((g.get("pcie_gen_current") or 0) < (g.get("pcie_gen_max") or 0) for g in self.gpus or []):
            return {}
        text, _ = self.smi_binary.text("--query-gpu=index,pcie.link.gen.current,pcie.link.width.current",
                                       "--format=csv,noheader")
        return nvsmi.parse_link_query(text or "")

    @cached_property
    def whole_gpus(self) -> list[dict[str, Any]]:
        """The GPUs without MIG: those the peer probe copies between."""
        return [g for g in self.gpus or [] if not g.get("mig_current")]

    @cached_property
    def nvlink(self) -> dict[int, float]:
        """Each GPU's active NVLink speed summed over its links (``nvidia-smi nvlink -s``), by GPU index."""
        text, _ = self.smi_binary.text("nvlink", "-s")
        return {i: sum(speeds) for i, speeds in nvsmi.parse_nvlink_status(text or "").items()}

    @cached_property
    def peer_job(self) -> PeerProbe | None:
        """The peer-copy child, started (None with fewer than two whole GPUs or where CUDA cannot run).

        Disjoint pairs copy side by side only where every whole GPU has active NVLinks: there each GPU's links
        are its own, while PCIe pairs may share a switch or the host's root complex, and their speed would then
        be read low.
        """
        whole = self.whole_gpus
        if len(whole) < 2 or self.cuda_skip:
            return None
        together = all(self.nvlink.get(g["index"]) for g in whole)
        return PeerProbe(self.relaunch, self.paths["libcuda"], [g["uuid"] for g in whole], together)

    @cached_property
    def peer_pairs(self) -> list[dict[str, Any]]:
        """Every ordered pair of whole (non-MIG) GPUs with its peer probe's outcome.

        Each pair: ``src``, ``dst`` and either ``skip`` (CUDA unusable), ``error`` (the peer probe failed) or
        ``result`` (the copy), ``p2p`` (NVML's view), ``link_gbps`` (active NVLink) and ``duration_s`` (its share
        of the probe's copying time).
        """
        indexes = [g["index"] for g in self.whole_gpus]
        if len(indexes) < 2:
            return []
        wanted = [{"src": a, "dst": b} for a in indexes for b in indexes if a != b]
        job = self.peer_job
        if job is None:
            return [dict(pair, skip=self.cuda_skip) for pair in wanted]
        self.cuda_results  # noqa: B018 (the GPUs' own probes end before any peer copy starts)
        outcome = job.result()
        if "error" in outcome:
            return [dict(pair, error=outcome["error"]) for pair in wanted]
        nvml, nvml_problem = self.nvml
        pairs = []
        # Children see the GPUs in CUDA_VISIBLE_DEVICES order, which is ``whole_gpus``' order.
        for probed in outcome["pairs"]:
            src, dst = indexes[probed["src"]], indexes[probed["dst"]]
            if nvml is not None:
                p2p, why = nvml.p2p_status(src, dst)
                p2p = p2p or {"error": why}
            else:
                p2p = {"skipped": nvml_problem}
            pairs.append({"src": src, "dst": dst, "result": dict(probed, src=src, dst=dst), "p2p": p2p,
                          "link_gbps": min(self.nvlink.get(src, 0.0), self.nvlink.get(dst, 0.0)) or None,
                          "duration_s": job.seconds / max(len(outcome["pairs"]) * 2, 1)})
        return pairs

    @cached_property
    def want_devices(self) -> int:
        """GPU devices a container should list: those ``nvidia-smi -L`` lists (MIG devices counted where MIG is on),
        else the GPUs of the XML report, else the cluster file's count."""
        if self.listing:
            return nvsmi.device_count(list(self.listing.values()))
        return len(self.gpus) if self.gpus and not self.mig_on else self.expect["gpu"]["count"]

    @cached_property
    def container_job(self) -> Background | None:
        """The GPU container, started in a thread (None when the cluster file has no container runtime)."""
        spec = self.expect.get("container") or {}
        return Background(runtime.run_container, spec) if spec.get("kind", "none") != "none" else None

    @cached_property
    def container(self) -> dict[str, Any] | None:
        """The container run's result (``{error, command}`` when it raised), or None when none ran."""
        if self.container_job is None:
            return None
        box = self.container_job.outcome()
        return box.get("value") if "error" not in box else {"error": box["error"], "command": None}

    @cached_property
    def node_job(self) -> Background | None:
        """This node's Node object read in a thread, once its GPU resources settled (None outside Kubernetes);
        under DRA its ResourceSliceList, once the driver listed the node's devices."""
        if not self.kube.get("enabled"):
            return None
        reader = slices.read_settled if self.kube.get("allocation") == "dra" else runtime.read_node_settled
        return Background(reader, self.kube)

    @cached_property
    def node_object(self) -> tuple[dict[str, Any] | None, str | None] | None:
        """``(Node object, error)`` (under DRA ``(ResourceSliceList, error)``), or None when this is not a
        Kubernetes node."""
        if self.node_job is None:
            return None
        box = self.node_job.outcome()
        return box.get("value") or (None, box.get("error"))

    @cached_property
    def labels_job(self) -> Background | None:
        """Under DRA, this node's Node object read in a thread for GPU Feature Discovery's labels, where they are
        expected (None elsewhere: without DRA the Node is :attr:`node_object`)."""
        wanted = self.kube.get("enabled") and self.kube.get("allocation") == "dra" and self.kube.get("labels")
        return Background(runtime.read_node, self.kube) if wanted else None

    @cached_property
    def labelled_node(self) -> tuple[dict[str, Any] | None, str | None] | None:
        """``(Node object, error)`` whose labels GPU Feature Discovery set: :attr:`node_object`, or under DRA the
        Node read beside its ResourceSlices (``(None, None)`` where no labels are expected); None outside
        Kubernetes."""
        if self.kube.get("allocation") != "dra" or self.node_job is None:
            return self.node_object
        if self.labels_job is None:
            return None, None
        box = self.labels_job.outcome()
        return box.get("value") or (None, box.get("error"))

    @cached_property
    def pod_job(self) -> Background | None:
        """The CUDA pod run in a thread (None outside Kubernetes or without a pod image)."""
        wanted = self.kube.get("enabled") and self.kube.get("pod_image")
        return Background(runtime.run_pod, self.kube) if wanted else None

    @cached_property
    def pod(self) -> tuple[dict[str, Any] | None, str | None] | None:
        """``(pod probe result, error)``, or None when no pod ran."""
        if self.pod_job is None:
            return None
        box = self.pod_job.outcome()
        return box.get("value") or (None, box.get("error"))
