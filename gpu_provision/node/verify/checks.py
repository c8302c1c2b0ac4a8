"""Decisions: parsed readings plus expectations in, checks out. No I/O here, so every rule is tested on fixtures.

Expectations are the plain dict the controller writes (``gpu_provision.verify.expect.Expectations.to_json``).
A reading that is missing makes its check a skip with the reason; only a reading that contradicts the
expectation makes a failure.
"""

from __future__ import annotations

from ..driver_version import module_version
from ..versions import version_key
from .nvsmi import device_count, parse_list
from .report import Check, failed, judge, passed, skipped

TYPE_CHECKING = False
if TYPE_CHECKING:  # no typing at run time, and the MIG model (dataclasses) only where MIG is wanted: see report.Check
    from typing import Any

    from ..mig.model import GpuLayout


def driver_matches(actual: str, pinned: str) -> bool:
    """True when ``actual`` is the pinned version or lies on the pinned branch (``580`` matches ``580.159.04``)."""
    return actual == pinned or actual.startswith(pinned + ".")


def driver_checks(proc_version: str | None, smi_driver: str | None, expect: dict[str, Any]) -> list[Check]:
    """node.driver.loaded and node.driver.version."""
    checks = []
    if proc_version is None:
        checks.append(failed("node.driver.loaded", None, "/proc/driver/nvidia/version present",
                             "the nvidia kernel module is not loaded (/proc/driver/nvidia/version missing)"))
    else:
        first = proc_version.strip().splitlines()[0] if proc_version.strip() else ""
        checks.append(passed("node.driver.loaded", first, "/proc/driver/nvidia/version present"))
    loaded = module_version(proc_version)
    actual = smi_driver or loaded
    pinned = (expect.get("driver") or {}).get("version")
    if not pinned:
        checks.append(skipped("node.driver.version", "no driver version pinned in the cluster file"))
    elif actual is None:
        checks.append(failed("node.driver.version", None, pinned, "driver version unreadable: nvidia-smi gave none"))
    elif smi_driver and loaded and smi_driver != loaded:
        checks.append(failed("node.driver.version", {"user_space": smi_driver, "kernel_module": loaded}, pinned,
                             "user-space driver and loaded kernel module differ (reboot or module reload pending)"))
    else:
        checks.append(judge("node.driver.version", driver_matches(actual, pinned), actual, pinned,
                            f"driver {actual} is not the pinned {pinned}"))
    return checks


def cuda_version_check(cuda_version: str | None, expect: dict[str, Any], source: str) -> Check:
    """node.cuda.version: the driver's CUDA version is at least the cluster file's minimum."""
    minimum = expect.get("cuda_min")
    if not minimum:
        return skipped("node.cuda.version", "no minimum CUDA version in the cluster file")
    if cuda_version is None:
        return skipped("node.cuda.version", f"CUDA driver version unreadable ({source})", expected=f">= {minimum}")
    return judge("node.cuda.version", version_key(cuda_version) >= version_key(minimum), cuda_version,
                 f">= {minimum}", f"driver supports CUDA {cuda_version}, below the required {minimum}")


def count_checks(smi_gpus: list[dict[str, Any]] | None, pci_gpus: list[dict[str, Any]] | None,
                 expect: dict[str, Any]) -> list[Check]:
    """node.gpu.count (driver's view) and node.pci.gpus (bus view), both against the cluster file."""
    gpu = expect["gpu"]
    want = gpu["count"]
    ids = {i.upper() for i in gpu.get("pci_device_ids", [])}
    checks = []
    if smi_gpus is None:
        checks.append(failed("node.gpu.count", None, want, "nvidia-smi gave no GPU list"))
    else:
        checks.append(judge("node.gpu.count", len(smi_gpus) == want, len(smi_gpus), want,
                            f"driver sees {len(smi_gpus)} GPU(s), the cluster file says {want}"))
    if pci_gpus is None:
        checks.append(skipped("node.pci.gpus", "PCI devices unreadable (no /sys/bus/pci/devices)", expected=want))
        return checks
    matching = [d for d in pci_gpus if not ids or d["device_id"].upper() in ids]
    bus_ids = [d["bus_id"] for d in matching]
    measured = {"on_bus": len(matching), "bus_ids": bus_ids}
    if len(matching) != want:
        others = [d["device_id"] for d in pci_gpus if d not in matching]
        extra = f"; other NVIDIA GPUs on the bus: {', '.join(others)}" if others else ""
        checks.append(failed("node.pci.gpus", measured, want,
                             f"{len(matching)} {gpu['model']} GPU(s) on the PCI bus, expected {want}{extra}"))
    elif smi_gpus is not None and len(smi_gpus) < len(matching):
        seen = {g.get("bus_id") for g in smi_gpus}
        lost = [b for b in bus_ids if b not in seen]
        checks.append(failed("node.pci.gpus", measured, want,
                             f"GPU(s) on the bus but not seen by the driver: {', '.join(lost) or 'unknown'}"))
    else:
        checks.append(passed("node.pci.gpus", measured, want))
    return checks


def _subject(index: int) -> dict[str, Any]:
    return {"gpu": index}


def model_check(gpu: dict[str, Any], expect: dict[str, Any]) -> Check:
    """gpuN.model: product name and PCI device id belong to the expected model."""
    spec = expect["gpu"]
    names = spec.get("product_names", [])
    ids = [i.upper() for i in spec.get("pci_device_ids", [])]
    measured = {"name": gpu.get("name"), "pci_device_id": gpu.get("pci_device_id")}
    expected = {"model": spec["model"], "product_names": names, "pci_device_ids": spec.get("pci_device_ids", [])}
    ok_name = not names or gpu.get("name") in names
    ok_id = not ids or (gpu.get("pci_device_id") or "").upper() in ids
    return judge(f"gpu{gpu['index']}.model", ok_name and ok_id, measured, expected,
                 f"GPU is {gpu.get('name')} ({gpu.get('pci_device_id')}), not a {spec['model']}",
                 **_subject(gpu["index"]))


def persistence_check(gpu: dict[str, Any], expect: dict[str, Any]) -> Check:
    """gpuN.persistence: persistence mode as the cluster file wants it (on by default)."""
    want = expect.get("persistence", True)
    cid, subject = f"gpu{gpu['index']}.persistence", _subject(gpu["index"])
    actual = gpu.get("persistence_mode")
    if actual is None:
        return skipped(cid, "persistence mode not reported", expected=want, **subject)
    return judge(cid, actual == want, actual, want,
                 f"persistence mode is {'on' if actual else 'off'}, expected {'on' if want else 'off'}", **subject)



def _state(enabled: Any) -> str:
    return "enabled" if enabled else "disabled"


def _mode_check(check_id: str, current: Any, pending: Any, want: Any, subject: dict[str, Any],
                pending_reason: str, wrong_reason: str) -> Check:
    """A mode the driver reports as current and pending: a pending change fails, else current must be wanted."""
    if pending is not None and pending != current:
        return failed(check_id, {"current": current, "pending": pending}, want, pending_reason, **subject)
    return judge(check_id, current == want, current, want, wrong_reason, **subject)

def ecc_checks(gpu: dict[str, Any], expect: dict[str, Any]) -> list[Check]:
    """gpuN.ecc.mode, gpuN.ecc.uncorrected, gpuN.ecc.remapped_rows, gpuN.ecc.retired_pages."""
    index, subject = gpu["index"], _subject(gpu["index"])
    want = expect.get("ecc", True)
    checks = []
    current, pending = gpu.get("ecc_current"), gpu.get("ecc_pending")
    if current is None:
        checks.append(skipped(f"gpu{index}.ecc.mode", "ECC mode not reported (GPU without ECC?)",
                              expected=want, **subject))
    else:
        checks.append(_mode_check(f"gpu{index}.ecc.mode", current, pending, want, subject,
                                  "ECC mode change pending: takes effect after a GPU reset or reboot",
                                  f"ECC is {_state(current)}, expected {_state(want)}"))
    volatile = gpu.get("ecc_uncorrected_volatile")
    if volatile is None:
        checks.append(skipped(f"gpu{index}.ecc.uncorrected", "uncorrected ECC counters not reported",
                              expected=0, **subject))
    else:
        measured = {"volatile": volatile, "aggregate": gpu.get("ecc_uncorrected_aggregate")}
        checks.append(judge(f"gpu{index}.ecc.uncorrected", volatile == 0, measured, {"volatile": 0},
                            f"{volatile} uncorrected ECC error(s) since the driver loaded", **subject))
    remap = gpu.get("remapped_rows")
    if remap is None:
        checks.append(skipped(f"gpu{index}.ecc.remapped_rows", "row remapping not reported (pre-Ampere GPU)",
                              **subject))
    elif remap.get("failure"):
        checks.append(failed(f"gpu{index}.ecc.remapped_rows", remap, {"pending": False, "failure": False},
                             "row remapping failed: the GPU needs service", **subject))
    elif remap.get("pending"):
        checks.append(failed(f"gpu{index}.ecc.remapped_rows", remap, {"pending": False, "failure": False},
                             "row remapping pending: reset the GPU to apply it", **subject))
    else:
        checks.append(passed(f"gpu{index}.ecc.remapped_rows", remap, {"pending": False, "failure": False},
                             **subject))
    pending_pages = gpu.get("retired_pending")
    if pending_pages is None:
        checks.append(skipped(f"gpu{index}.ecc.retired_pages",
                              "page retirement not reported (GPUs with row remapping do not retire pages)",
                              expected={"pending": False}, **subject))
    else:
        checks.append(judge(f"gpu{index}.ecc.retired_pages", not pending_pages,
                            {"pending": pending_pages, "retired": gpu.get("retired_count")}, {"pending": False},
                            "retired pages pending: reset the GPU to apply the retirement", **subject))
    return checks


def pcie_checks(gpu: dict[str, Any], relinked: tuple[int | None, int | None] | None = None) -> list[Check]:
    """gpuN.pcie.link_gen and gpuN.pcie.link_width against the link's maximum.

    An idle GPU lowers its link generation to save power, so ``relinked`` (a reading taken after the CUDA load)
    is used when the first reading was below the maximum.
    """
    index, subject = gpu["index"], _subject(gpu["index"])
    checks = []
    for kind, current_key, max_key in (("gen", "pcie_gen_current", "pcie_gen_max"),
                                       ("width", "pcie_width_current", "pcie_width_max")):
        cid = f"gpu{index}.pcie.link_{kind}"
        current, maximum = gpu.get(current_key), gpu.get(max_key)
        if relinked is not None and current is not None and maximum is not None and current < maximum:
            again = relinked[0 if kind == "gen" else 1]
            current = again if again is not None else current
        if current is None or maximum is None:
            checks.append(skipped(cid, f"PCIe link {kind} not reported", **subject))
            continue
        measured: Any = current
        if kind == "gen" and gpu.get("pcie_gen_device_max") not in (None, maximum):
            measured = {"current": current, "device_max": gpu.get("pcie_gen_device_max")}
        label = f"Gen{current}" if kind == "gen" else f"x{current}"
        label_max = f"Gen{maximum}" if kind == "gen" else f"x{maximum}"
        checks.append(judge(cid, current >= maximum, measured, maximum,
                            f"PCIe link runs at {label}, below its maximum {label_max}", **subject))
    return checks


def _placements(layout: GpuLayout) -> list[dict[str, Any]]:
    """A layout's placements as the report shows them: ``[{profile, start, size}]`` in start order."""
    return [{"profile": p.profile, "start": p.start, "size": p.size} for p in layout.placements]


def mig_checks(gpu: dict[str, Any], expect: dict[str, Any], lgi: list[dict[str, Any]] | None,
               lci: list[dict[str, Any]] | None) -> list[Check]:
    """gpuN.mig.mode, gpuN.mig.layout and gpuN.mig.compute_instances against the cluster file's layout.

    The wanted and the found layout are compared as :class:`GpuLayout` values of the one MIG model.
    """
    index, subject = gpu["index"], _subject(gpu["index"])
    wanted = (expect.get("mig") or {}).get(str(index))
    want_enabled = wanted is not None
    current, pending = gpu.get("mig_current"), gpu.get("mig_pending")
    checks = []
    if current is None:
        if want_enabled:
            checks.append(failed(f"gpu{index}.mig.mode", None, True, "GPU reports no MIG mode (not MIG-capable)",
                                 **subject))
        else:
            checks.append(skipped(f"gpu{index}.mig.mode", "GPU is not MIG-capable; none wanted", expected=False,
                                  **subject))
        return checks
    checks.append(_mode_check(f"gpu{index}.mig.mode", current, pending, want_enabled, subject,
                              "MIG mode change pending: reset the GPU to apply it",
                              f"MIG is {_state(current)}, the cluster file wants it {_state(want_enabled)}"))
    if not want_enabled:
        return checks
    from ..mig.model import GpuLayout, Placement

    expected = GpuLayout.placed(Placement.from_dict(i) for i in wanted or [])
    if lgi is None:
        checks.append(skipped(f"gpu{index}.mig.layout", "nvidia-smi mig -lgi gave no answer",
                              expected=_placements(expected), **subject))
        return checks
    mine = [r for r in lgi if r["gpu"] == index]
    found = GpuLayout.placed(Placement.from_dict(r) for r in mine)
    if found == expected:
        checks.append(passed(f"gpu{index}.mig.layout", _placements(found), _placements(expected), **subject))
    else:
        missing = [p for p in expected.placements if p not in found.placements]
        extra = [p for p in found.placements if p not in expected.placements]
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{p.profile}@{p.start}" for p in missing))
        if extra:
            parts.append("unexpected " + ", ".join(f"{p.profile}@{p.start}" for p in extra))
        checks.append(failed(f"gpu{index}.mig.layout", _placements(found), _placements(expected),
                             "MIG layout differs: " + "; ".join(parts), **subject))
    if lci is None:
        checks.append(skipped(f"gpu{index}.mig.compute_instances", "nvidia-smi mig -lci gave no answer",
                              **subject))
    else:
        with_ci = {r["gpu_instance_id"] for r in lci if r["gpu"] == index}
        bare = [r["instance_id"] for r in mine if r["instance_id"] not in with_ci]
        checks.append(judge(f"gpu{index}.mig.compute_instances", not bare,
                            {"gpu_instances": len(mine), "without_compute_instance": bare},
                            {"without_compute_instance": []},
                            f"GPU instance(s) {bare} have no compute instance, so CUDA cannot use them",
                            **subject))
    return checks


def device_file_check(cid: str, path: str, stat: dict[str, Any] | None, expect: dict[str, Any],
                      **subject: Any) -> Check:
    """Ownership and mode of one device file against ``device_permissions`` {group, mode}."""
    wanted = expect.get("device_permissions")
    if not wanted:
        return skipped(cid, "no device permissions in the cluster file", **subject)
    expected = {"path": path, "group": wanted.get("group", "root"), "mode": wanted.get("mode", "0666")}
    if stat is None:
        return failed(cid, None, expected, f"{path} does not exist", **subject)
    problems = []
    if stat["group"] != expected["group"]:
        problems.append(f"group {stat['group']} (want {expected['group']})")
    if int(stat["mode"], 8) != int(expected["mode"], 8):
        problems.append(f"mode {stat['mode']} (want {expected['mode']})")
    measured = {"path": path, "owner": stat["owner"], "group": stat["group"], "mode": stat["mode"]}
    return judge(cid, not problems, measured, expected, f"{path}: " + ", ".join(problems), **subject)


def cuda_checks(prefix: str, probe: dict[str, Any] | None, expect: dict[str, Any], skip_reason: str | None,
                bandwidth_share: float = 1.0, **subject: Any) -> list[Check]:
    """<prefix>.cuda.vector_add and <prefix>.memory.bandwidth from one device's probe result.

    ``bandwidth_share`` scales the model's figure for a MIG slice (its memory slices over the GPU's).
    """
    spec = expect["gpu"]
    ratio = float(expect.get("bandwidth_ratio", 0.85))
    model_gbs = spec.get("memory_bandwidth_gbs")
    floor = round(model_gbs * bandwidth_share * ratio, 1) if model_gbs else None
    expected_bw = {"min_gbps": floor, "model_gbps": model_gbs, "share": round(bandwidth_share, 4),
                   "ratio": ratio, "counting": "bytes read + bytes written"}
    if skip_reason:
        return [skipped(f"{prefix}.cuda.vector_add", skip_reason, expected={"mismatches": 0}, **subject),
                skipped(f"{prefix}.memory.bandwidth", skip_reason, expected=expected_bw, **subject)]
    if probe is None:
        reason = "CUDA did not list this device"
        return [failed(f"{prefix}.cuda.vector_add", None, {"mismatches": 0}, reason, **subject),
                skipped(f"{prefix}.memory.bandwidth", reason, expected=expected_bw, **subject)]
    if "error" in probe and "vector_add" not in probe:
        return [failed(f"{prefix}.cuda.vector_add", None, {"mismatches": 0}, probe["error"], **subject),
                skipped(f"{prefix}.memory.bandwidth", "vector add did not run", expected=expected_bw, **subject)]
    vadd = probe["vector_add"]
    checks = [judge(f"{prefix}.cuda.vector_add", vadd["mismatches"] == 0,
                    {"elements": vadd["elements"], "mismatches": vadd["mismatches"],
                     "seconds": round(vadd["seconds"], 4), "device": probe.get("name")},
                    {"mismatches": 0}, f"{vadd['mismatches']} of {vadd['elements']} sums wrong", **subject)]
    bw = probe.get("bandwidth")
    if bw is None:
        checks.append(failed(f"{prefix}.memory.bandwidth", None, expected_bw,
                             probe.get("error", "bandwidth not measured"), **subject))
        return checks
    measured = {"gbps": round(bw["gbps"], 1), "bytes_per_copy": bw["bytes_per_copy"], "repeats": bw["repeats"],
                "data_ok": bw["data_ok"]}
    if not bw["data_ok"]:
        checks.append(failed(f"{prefix}.memory.bandwidth", measured, expected_bw, "copied data is wrong",
                             **subject))
    elif floor is None:
        checks.append(skipped(f"{prefix}.memory.bandwidth", "no expected bandwidth for this model",
                              expected=expected_bw, **subject))
        checks[-1].measured = measured
    else:
        pct = 100.0 * bw["gbps"] / (model_gbs * bandwidth_share)
        checks.append(judge(f"{prefix}.memory.bandwidth", bw["gbps"] >= floor, measured, expected_bw,
                            f"{bw['gbps']:.0f} GB/s is {pct:.0f}% of the model's "
                            f"{model_gbs * bandwidth_share:.0f} GB/s (floor {ratio:.0%})", **subject))
    return checks


def peer_checks(pair: dict[str, Any], p2p: dict[str, str] | None, nvlink_gbps: float | None,
                expect: dict[str, Any]) -> list[Check]:
    """gpuA-gpuB.p2p.access and gpuA-gpuB.p2p.bandwidth for one ordered pair.

    With active NVLinks the copy must reach ``peer_nvlink_ratio`` (default 0.5) of their one-way sum; over
    PCIe there is no model figure, so only the copy's correctness decides.
    """
    cid = f"gpu{pair['src']}-gpu{pair['dst']}.p2p"
    subject = {"gpu": pair["src"]}
    checks = []
    access_measured = {"can_access_peer": pair.get("can_access_peer"), "nvml": p2p}
    if "error" in pair and "gbps" not in pair:
        return [failed(f"{cid}.access", access_measured, True, pair["error"], **subject)]
    checks.append(judge(f"{cid}.access", bool(pair["can_access_peer"]), access_measured, True,
                        "CUDA reports no peer access between these GPUs", **subject))
    ratio = float(expect.get("peer_nvlink_ratio", 0.5))
    floor = round(nvlink_gbps * ratio, 1) if nvlink_gbps else None
    expected = {"data_ok": True, "min_gbps": floor, "nvlink_gbps": nvlink_gbps, "ratio": ratio if floor else None,
                "counting": "bytes copied, one direction"}
    measured = {"gbps": round(pair["gbps"], 1), "bytes_per_copy": pair["bytes_per_copy"],
                "repeats": pair["repeats"], "data_ok": pair["data_ok"]}
    if not pair["data_ok"]:
        checks.append(failed(f"{cid}.bandwidth", measured, expected, "peer copy delivered wrong data", **subject))
    elif floor is not None:
        checks.append(judge(f"{cid}.bandwidth", pair["gbps"] >= floor, measured, expected,
                            f"{pair['gbps']:.0f} GB/s over NVLink, below {floor:.0f} GB/s", **subject))
    else:
        checks.append(passed(f"{cid}.bandwidth", measured, expected,
                             "no NVLink: copy checked for correctness, speed reported only", **subject))
    return checks


def container_check(result: dict[str, Any] | None, expect: dict[str, Any], want_devices: int) -> Check:
    """node.container.gpus: ``nvidia-smi -L`` inside a container lists every expected GPU (or MIG device)."""
    runtime = expect.get("container") or {}
    kind = runtime.get("kind", "none")
    if kind == "none":
        return skipped("node.container.gpus", "no container runtime in the cluster file")
    expected = {"devices": want_devices, "runtime": kind, "cdi": bool(runtime.get("cdi"))}
    if result is None:
        return skipped("node.container.gpus", "no container image configured for the check", expected=expected)
    if result.get("error"):
        return failed("node.container.gpus", {"command": result.get("command")}, expected, result["error"])
    out = result.get("stdout", "")
    seen = device_count(parse_list(out))
    measured = {"devices": seen, "command": result.get("command")}
    if result.get("returncode") != 0:
        tail = (result.get("stderr") or out).strip().splitlines()[-1:] or [""]
        return failed("node.container.gpus", measured, expected,
                      f"container exited {result.get('returncode')}: {tail[0][:200]}")
    return judge("node.container.gpus", seen == want_devices, measured, expected,
                 f"container sees {seen} GPU device(s), expected {want_devices}")


def allocatable_check(node_json: dict[str, Any] | None, error: str | None, expect: dict[str, Any]) -> Check:
    """node.kubernetes.allocatable: the node's allocatable GPU resources equal what the cluster file implies."""
    kube = expect.get("kubernetes") or {}
    wanted = {k: int(v) for k, v in (kube.get("allocatable") or {}).items()}
    if error:
        return failed("node.kubernetes.allocatable", None, wanted, error)
    allocatable = ((node_json or {}).get("status") or {}).get("allocatable") or {}
    gpu_keys = {k for k in allocatable if k.startswith("nvidia.com/")}
    measured = {k: int(allocatable[k]) for k in sorted(gpu_keys | set(wanted)) if k in allocatable}
    wrong = [f"{k}={measured.get(k, 0)} (want {v})" for k, v in sorted(wanted.items()) if measured.get(k, 0) != v]
    wrong += [f"{k}={measured[k]} (not expected)" for k in sorted(gpu_keys - set(wanted)) if measured[k]]
    return judge("node.kubernetes.allocatable", not wrong, measured, wanted,
                 "allocatable differs: " + ", ".join(wrong))


def pod_check(result: dict[str, Any] | None, error: str | None) -> Check:
    """node.kubernetes.pod_cuda: a pod asking for one GPU ran the CUDA vector add correctly."""
    expected = {"mismatches": 0, "devices": 1}
    if error:
        return failed("node.kubernetes.pod_cuda", None, expected, error)
    assert result is not None
    if "error" in result:
        return failed("node.kubernetes.pod_cuda", None, expected, f"in the pod: {result['error']}")
    devices = result.get("devices", [])
    bad = [d for d in devices if "error" in d or d.get("vector_add", {}).get("mismatches") != 0]
    measured = {"devices": len(devices), "mismatches": sum(d.get("vector_add", {}).get("mismatches", 0)
                                                           for d in devices)}
    ok = len(devices) == 1 and not bad
    reason = (bad[0].get("error") if bad and "error" in bad[0] else
              f"pod saw {len(devices)} device(s)" if len(devices) != 1 else "vector add wrong in the pod")
    return judge("node.kubernetes.pod_cuda", ok, measured, expected, reason)
