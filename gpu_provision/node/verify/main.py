"""Entry point of the verification agent: read the expectations, take the readings, print one JSON report.

Usage on a node: ``python3 gpu-verify.pyz --expect /etc/gpu-provision/verify-expect.json``.
Exit status: 0 when every check passed or was skipped, 1 when any failed, 2 when the agent itself could not
work (a report is printed all the same, with ``status: error``).

Each GPU and each MIG slice is probed by a child process of this program that sees only that device
(``CUDA_VISIBLE_DEVICES=<uuid>``), all children at once, so the CUDA part costs one device's time, not the sum.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys
import threading
import time
import traceback
from typing import Any

from . import AGENT_VERSION, checks, cuda, nvsmi, readings, runtime
from .report import Check, Recorder, build_report, skipped, utc_now

DEFAULT_PATHS = {"sysfs": "/sys", "dev": "/dev", "proc": "/proc", "nvidia_smi": "nvidia-smi",
                 "libcuda": "libcuda.so.1"}
PROBE_TIMEOUT_S = 180.0


def self_command() -> tuple[list[str], dict[str, str]]:
    """Return the argv prefix and environment that start this agent again (zipapp or package)."""
    env = dict(os.environ)
    loader = type(globals().get("__loader__")).__name__
    if loader == "zipimporter" or sys.argv[0].endswith(".pyz"):
        return [sys.executable, sys.argv[0]], env
    package = __package__ or "gpu_provision.node.verify"
    root = os.path.dirname(os.path.abspath(__file__))
    for _ in range(package.count(".") + 1):
        root = os.path.dirname(root)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    return [sys.executable, "-m", package], env


class Probes:
    """CUDA probe child processes, one per GPU or MIG slice, started together and awaited together."""

    def __init__(self, libcuda: str):
        self.libcuda = libcuda
        self.running: dict[str, subprocess.Popen[str]] = {}
        self.results: dict[str, dict[str, Any]] = {}

    def start(self, uuids: list[str]) -> None:
        """Start one child per device UUID."""
        prefix, env = self_command()
        for uuid in uuids:
            child_env = dict(env, CUDA_VISIBLE_DEVICES=uuid, CUDA_DEVICE_ORDER="PCI_BUS_ID")
            self.running[uuid] = subprocess.Popen(
                [*prefix, "--cuda-probe", "--libcuda", self.libcuda], env=child_env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self) -> dict[str, dict[str, Any]]:
        """Collect every child's JSON result; a child that failed yields ``{error}``."""
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        for uuid, proc in self.running.items():
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.results[uuid] = {"error": f"CUDA probe timed out after {PROBE_TIMEOUT_S:.0f} s"}
                continue
            try:
                self.results[uuid] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                tail = err.strip().splitlines()[-1:] or ["no output"]
                self.results[uuid] = {"error": f"CUDA probe exited {proc.returncode}: {tail[0][:200]}"}
        self.running.clear()
        return self.results


def libcuda_problem(library: str) -> str | None:
    """Say why the CUDA driver library cannot be used here, or None when it loads."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        return f"{library} not loadable: {exc}"
    return None


def device_result(probe: dict[str, Any]) -> dict[str, Any] | None:
    """The single device entry of a one-device probe, with a top-level error folded in."""
    if "error" in probe:
        return {"error": probe["error"]}
    devices = probe.get("devices") or []
    return devices[0] if devices else None


def in_background(func: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    """Run ``func(*args)`` in a thread; its return value (or exception) lands in the returned dict."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = func(*args)
        except Exception as exc:  # reported as the check's failure, never lost
            box["error"] = f"{type(exc).__name__}: {exc}"

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, box


def verify(expect: dict[str, Any]) -> tuple[list[Check], dict[str, Any]]:
    """Take every reading and decide every check for one node."""
    paths = dict(DEFAULT_PATHS, **(expect.get("paths") or {}))
    rec = Recorder()
    host: dict[str, Any] = readings.host_facts(paths["proc"])
    smi = readings.Smi(paths["nvidia_smi"])

    # A test rig without a kernel module names its stand-in for this file in the expectations' paths.
    proc_version = readings.read_text(paths.get("driver_version_file")
                                      or os.path.join(paths["proc"], "driver", "nvidia", "version"))
    xml_text, xml_error = smi.text("-q", "-x")
    parsed = nvsmi.parse_query_xml(xml_text) if xml_text else None
    gpus = parsed["gpus"] if parsed else None
    host.update({"driver": parsed and parsed["driver_version"], "cuda": parsed and parsed["cuda_version"],
                 "gpus": [{k: g[k] for k in ("index", "name", "uuid", "bus_id")} for g in gpus or []]})
    listing_text, _ = smi.text("-L")
    listing = {g["index"]: g for g in nvsmi.parse_list(listing_text or "")}
    mig_on = any(g.get("mig_current") for g in gpus or []) or bool(expect.get("mig"))
    lgi = lci = None
    mig_devices: dict[int, list[dict[str, int]]] = {}
    if mig_on:
        lgi_text, _ = smi.text("mig", "-lgi")
        lci_text, _ = smi.text("mig", "-lci")
        lgi = nvsmi.parse_lgi(lgi_text) if lgi_text is not None else None
        lci = nvsmi.parse_lci(lci_text) if lci_text is not None else None
        mig_devices = nvsmi.parse_mig_devices(xml_text) if xml_text else {}

    # CUDA children start first: they run while the rest of the readings are taken.
    cuda_skip = libcuda_problem(paths["libcuda"])
    if cuda_skip is None and gpus is None:
        cuda_skip = f"no GPU list from nvidia-smi: {xml_error}"
    targets: list[tuple[str, dict[str, Any]]] = []  # (uuid, subject info)
    for gpu in gpus or []:
        listed = listing.get(gpu["index"], {})
        if gpu.get("mig_current"):
            by_device = {d["index"]: d for d in mig_devices.get(gpu["index"], [])}
            for mig in listed.get("mig", []):
                dev = by_device.get(mig["device"], {})
                gi = dev.get("gpu_instance_id")
                row = next((r for r in lgi or [] if r["gpu"] == gpu["index"] and r["instance_id"] == gi), None)
                targets.append((mig["uuid"], {"gpu": gpu["index"], "gi": gi, "device": mig["device"],
                                              "size": row["size"] if row else None}))
        elif gpu.get("uuid"):
            targets.append((gpu["uuid"], {"gpu": gpu["index"]}))
    probes = Probes(paths["libcuda"])
    cuda_started = time.perf_counter()
    if cuda_skip is None:
        probes.start([uuid for uuid, _ in targets])

    container_spec = expect.get("container") or {}
    container_job = (in_background(runtime.run_container, container_spec)
                     if container_spec.get("kind", "none") != "none" else None)
    kube = expect.get("kubernetes") or {}
    node_job = in_background(runtime.read_node_settled, kube) if kube.get("enabled") else None
    pod_job = in_background(runtime.run_pod, kube) if kube.get("enabled") and kube.get("pod_image") else None

    rec.run("node.driver", lambda: checks.driver_checks(proc_version, parsed and parsed["driver_version"], expect))
    cuda_version, cuda_source = (parsed or {}).get("cuda_version"), "nvidia-smi -q -x"
    nvml, nvml_problem = None, None
    try:
        from .nvml import Nvml

        nvml, nvml_problem = Nvml.open()
    except Exception as exc:
        nvml_problem = f"pynvml unusable: {exc}"
    if cuda_version is None and nvml is not None:
        cuda_version, why = nvml.cuda_driver_version()
        cuda_source = f"NVML: {why}" if why else "NVML"
    elif cuda_version is None:
        cuda_source = f"nvidia-smi gave none; {nvml_problem}"
    host["nvml"] = nvml_problem or "available"
    rec.run("node.cuda.version", lambda: checks.cuda_version_check(cuda_version, expect, cuda_source))
    pci = readings.pci_gpus(paths["sysfs"])
    rec.run("node.gpu.count", lambda: checks.count_checks(gpus, pci, expect))
    rec.run("node.device_file.nvidiactl", lambda: checks.device_file_check(
        "node.device_file.nvidiactl", os.path.join(paths["dev"], "nvidiactl"),
        readings.stat_device(os.path.join(paths["dev"], "nvidiactl")), expect))
    for gpu in gpus or []:
        index = gpu["index"]
        rec.run(f"gpu{index}.model", lambda g=gpu: checks.model_check(g, expect), gpu=index)
        rec.run(f"gpu{index}.persistence", lambda g=gpu: checks.persistence_check(g, expect), gpu=index)
        rec.run(f"gpu{index}.ecc", lambda g=gpu: checks.ecc_checks(g, expect), gpu=index)
        rec.run(f"gpu{index}.mig", lambda g=gpu: checks.mig_checks(g, expect, lgi, lci), gpu=index)
        dev_path = os.path.join(paths["dev"], f"nvidia{gpu.get('minor_number', index)}")
        rec.run(f"gpu{index}.device_file", lambda p=dev_path, i=index: checks.device_file_check(
            f"gpu{i}.device_file", p, readings.stat_device(p), expect, gpu=i), gpu=index)

    results = probes.wait() if cuda_skip is None else {}
    cuda_wall = time.perf_counter() - cuda_started
    relinked: dict[int, tuple[int | None, int | None]] = {}
    if any((g.get("pcie_gen_current") or 0) < (g.get("pcie_gen_max") or 0) for g in gpus or []):
        text, _ = smi.text("--query-gpu=index,pcie.link.gen.current,pcie.link.width.current",
                           "--format=csv,noheader")
        relinked = nvsmi.parse_link_query(text or "")
    for gpu in gpus or []:
        rec.run(f"gpu{gpu['index']}.pcie", lambda g=gpu: checks.pcie_checks(g, relinked.get(g["index"])),
                gpu=gpu["index"])

    mig_slices = int((expect.get("gpu") or {}).get("mig_memory_slices") or 8)
    for uuid, info in targets:
        probe = device_result(results[uuid]) if uuid in results else None
        if uuid.startswith("MIG-"):
            label = f"gi{info['gi']}" if info.get("gi") is not None else f"mig{info['device']}"
            share = (info["size"] or 0) / mig_slices if info.get("size") else 1.0
            found = checks.cuda_checks(f"gpu{info['gpu']}.{label}", probe, expect, cuda_skip, share,
                                       gpu=info["gpu"], mig_uuid=uuid)
        else:
            found = checks.cuda_checks(f"gpu{info['gpu']}", probe, expect, cuda_skip, gpu=info["gpu"])
        seconds = (probe or {}).get("vector_add", {}).get("seconds")
        for check in found:
            check.duration_s = seconds if seconds and check.id.endswith("vector_add") else cuda_wall / len(found)
            rec.add(check)
    if not targets:
        rec.add(skipped("node.cuda.vector_add", cuda_skip or "no GPU or MIG device to launch a kernel on"))
    for gpu in gpus or []:
        if gpu.get("mig_current") and not listing.get(gpu["index"], {}).get("mig"):
            rec.add(skipped(f"gpu{gpu['index']}.mig.cuda", "MIG is on but no MIG device is listed "
                            "(nvidia-smi -L); nothing to launch a kernel on", gpu=gpu["index"]))

    whole = [g for g in gpus or [] if not g.get("mig_current")]
    if len(whole) > 1:
        peer_checks(rec, whole, smi, nvml, nvml_problem, cuda_skip, expect, paths)
    if nvml is not None:
        nvml.close()

    want_devices = nvsmi.device_count(list(listing.values())) if listing else expect["gpu"]["count"]
    if container_job is not None:
        container_job[0].join()
        box = container_job[1]
        result = box.get("value") if "error" not in box else {"error": box["error"], "command": None}
        rec.add(checks.container_check(result, expect, want_devices))
    else:
        rec.add(checks.container_check(None, expect, want_devices))
    if node_job is not None:
        node_job[0].join()
        value = node_job[1].get("value") or (None, node_job[1].get("error"))
        rec.run("node.kubernetes.allocatable", lambda: checks.allocatable_check(value[0], value[1], expect))
    else:
        rec.add(skipped("node.kubernetes.allocatable", "not a Kubernetes node in the cluster file"))
    if pod_job is not None:
        pod_job[0].join()
        value = pod_job[1].get("value") or (None, pod_job[1].get("error"))
        rec.run("node.kubernetes.pod_cuda", lambda: checks.pod_check(value[0], value[1]))
    elif kube.get("enabled"):
        rec.add(skipped("node.kubernetes.pod_cuda", "no pod image with python3 configured (kubernetes.pod_image)"))
    else:
        rec.add(skipped("node.kubernetes.pod_cuda", "not a Kubernetes node in the cluster file"))
    host["cuda_wall_s"] = round(cuda_wall, 3)
    return rec.checks, host


def peer_checks(rec: Recorder, whole: list[dict[str, Any]], smi: readings.Smi, nvml: Any,
                nvml_problem: str | None, cuda_skip: str | None, expect: dict[str, Any],
                paths: dict[str, str]) -> None:
    """GPU-to-GPU checks for every ordered pair of whole (non-MIG) GPUs."""
    indexes = [g["index"] for g in whole]
    pairs_wanted = [(a, b) for a in indexes for b in indexes if a != b]
    if cuda_skip:
        for a, b in pairs_wanted:
            rec.add(skipped(f"gpu{a}-gpu{b}.p2p.access", cuda_skip, expected=True, gpu=a))
        return
    started = time.perf_counter()
    prefix, env = self_command()
    visible = ",".join(g["uuid"] for g in whole)
    done = readings.run([*prefix, "--peer-probe", "--libcuda", paths["libcuda"]], timeout=PROBE_TIMEOUT_S,
                        env=dict(env, CUDA_VISIBLE_DEVICES=visible, CUDA_DEVICE_ORDER="PCI_BUS_ID"))
    try:
        outcome = json.loads(done.get("stdout", "").strip().splitlines()[-1])
    except (ValueError, IndexError):
        outcome = {"error": done.get("error") or f"peer probe exited {done.get('returncode')}: "
                   f"{(done.get('stderr') or '').strip()[-200:]}"}
    nvlink_text, _ = smi.text("nvlink", "-s")
    nvlink = {i: sum(speeds) for i, speeds in nvsmi.parse_nvlink_status(nvlink_text or "").items()}
    elapsed = time.perf_counter() - started
    if "error" in outcome:
        for a, b in pairs_wanted:
            rec.add(checks.failed(f"gpu{a}-gpu{b}.p2p.access", None, True, outcome["error"], gpu=a))
        return
    # Children see the GPUs in CUDA_VISIBLE_DEVICES order, which is ``whole``'s order.
    for pair in outcome["pairs"]:
        src, dst = indexes[pair["src"]], indexes[pair["dst"]]
        pair = dict(pair, src=src, dst=dst)
        p2p = None
        if nvml is not None:
            p2p, why = nvml.p2p_status(src, dst)
            p2p = p2p or {"error": why}
        else:
            p2p = {"skipped": nvml_problem}
        link = min(nvlink.get(src, 0.0), nvlink.get(dst, 0.0)) or None
        for check in checks.peer_checks(pair, p2p, link, expect):
            check.duration_s = elapsed / max(len(outcome["pairs"]) * 2, 1)
            rec.add(check)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line arguments of the agent."""
    parser = argparse.ArgumentParser(prog="gpu-verify", description="Verify this GPU node; print a JSON report.")
    parser.add_argument("--expect", help="expectations JSON written by the controller")
    parser.add_argument("--output", help="also write the report to this file")
    parser.add_argument("--compact", action="store_true", help="print the report on one line (for pod logs)")
    parser.add_argument("--libcuda", default="libcuda.so.1", help=argparse.SUPPRESS)
    parser.add_argument("--cuda-probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--peer-probe", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Run the agent; print the report; return 0 (all pass/skip), 1 (a failure) or 2 (agent error)."""
    args = parse_args(argv)
    if args.cuda_probe:
        print(json.dumps(cuda.probe_devices(args.libcuda)))
        return 0
    if args.peer_probe:
        print(json.dumps(cuda.probe_peers(args.libcuda)))
        return 0
    started, clock = utc_now(), time.perf_counter()
    node, found, host, error = os.uname().nodename, [], {}, None
    try:
        if not args.expect:
            raise ValueError("--expect FILE is required")
        with open(args.expect, encoding="utf-8") as handle:
            expect = json.load(handle)
        node = expect.get("node") or node
        found, host = verify(expect)
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"
        host = dict(host, traceback=traceback.format_exc(limit=5))
    report = build_report(node, AGENT_VERSION, started, time.perf_counter() - clock, host, found, error)
    text = json.dumps(report, indent=1)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    print(json.dumps(report, separators=(",", ":")) if args.compact else text)
    return 2 if error else (1 if report["summary"]["fail"] else 0)
