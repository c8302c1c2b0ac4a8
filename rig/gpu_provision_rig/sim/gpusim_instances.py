"""``nvidia-smi mig`` changes: creating and destroying GPU and compute instances (stand-in, not NVIDIA software).

Each change needs root and a GPU in MIG mode, as on a real host; placements follow :mod:`gpusim_placement`, and an
instance a registered process runs in is not destroyed.
"""

from __future__ import annotations

from gpusim_errors import RC_INVALID_ARG, RC_NOT_FOUND, RC_NOT_SUPPORTED, RC_OTHER, SimError
from gpusim_hardware import Gpu
from gpusim_output import Out
from gpusim_placement import fits, make_gi
from gpusim_state import State, mig_enabled_gpus, require_root

# Compute-instance profile id by compute slices (NVML_COMPUTE_INSTANCE_PROFILE_*_SLICE order).
CI_PROFILE_ID_BY_SLICES = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def parse_cgi(spec: str) -> list[tuple[str, int | None]]:
    """``-cgi 9,3g.71gb,1g.18gb:6`` -> [(profile ref, start or None)]."""
    items: list[tuple[str, int | None]] = []
    for raw in spec.split(","):
        raw = raw.strip()
        if not raw:
            continue
        if ":" in raw:
            ref, _, start = raw.rpartition(":")
            if not start.isdigit():
                raise SimError(f"Invalid placement in '{raw}'", RC_INVALID_ARG)
            items.append((ref, int(start)))
        else:
            items.append((raw, None))
    if not items:
        raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", RC_INVALID_ARG)
    return items


def add_full_ci(gpu: Gpu, gi: dict) -> dict:
    ci = {
        "id": 0 if not gi["cis"] else max(c["id"] for c in gi["cis"]) + 1,
        "profile_id": CI_PROFILE_ID_BY_SLICES.get(gi["compute_slices"], 0),
        "name": gi["name"],
        "start": 0,
        "compute_slices": gi["compute_slices"],
    }
    gi["cis"].append(ci)
    return ci


def create_gis(out: Out, gpus: list[Gpu], state: State, spec: str, with_ci: bool) -> int:
    """``nvidia-smi mig -cgi <profiles>[:start] [-C]``. Without an explicit start the highest free
    start is taken (this reproduces the MIG user guide's ``-cgi 19,14,5`` example: 1g at 6, 2g at 4,
    4g at 0). A request that does not fit fails with "Insufficient Resources"; earlier ones stay."""
    items = parse_cgi(spec)
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("create GPU instances", gpu)
        gs = state.gpu_state(gpu)
        for ref, start in items:
            profile = gpu.profile(ref)
            candidates = [start] if start is not None else sorted(profile["starts"], reverse=True)
            chosen = next((s for s in candidates if fits(gpu, gs, profile, s)), None)
            if chosen is None:
                out.err("Failed to create GPU instances: Insufficient Resources")
                return RC_OTHER
            gi = make_gi(gpu, profile, chosen)
            gs["gis"].append(gi)
            out.line(
                f"Successfully created GPU instance ID {gi['id']:>2} on GPU {gpu.index:>2} using profile "
                f"MIG {profile['name']} (ID {profile['id']:>2})"
            )
            if with_ci:
                ci = add_full_ci(gpu, gi)
                out.line(
                    f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu.index:>2} GPU instance ID "
                    f"{gi['id']:>2} using profile MIG {ci['name']} (ID {ci['profile_id']:>2})"
                )
    return 0


def find_gis(gpu: Gpu, state: State, gi_ids: set[int] | None) -> list[dict]:
    gs = state.gpu_state(gpu)
    return [gi for gi in sorted(gs["gis"], key=lambda g: g["id"]) if gi_ids is None or gi["id"] in gi_ids]


def create_cis(out: Out, gpus: list[Gpu], state: State, spec: str | None, gi_ids: set[int] | None) -> int:
    """``nvidia-smi mig -cci [profile ids] [-gi ID]``: compute instances; only the full-size
    (default) compute instance profile of each GPU instance is simulated."""
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("create compute instances", gpu)
        gis = find_gis(gpu, state, gi_ids)
        if not gis:
            out.err("No GPU instances found: Not Found")
            return RC_NOT_FOUND
        for gi in gis:
            default_id = CI_PROFILE_ID_BY_SLICES.get(gi["compute_slices"], 0)
            wanted = [int(x) for x in spec.split(",")] if spec else [default_id]
            for pid in wanted:
                if pid != default_id:
                    out.err(f"Failed to create compute instances: Not Supported (simulated profile {default_id} only)")
                    return RC_NOT_SUPPORTED
                if gi["cis"]:
                    out.err("Failed to create compute instances: Insufficient Resources")
                    return RC_OTHER
                ci = add_full_ci(gpu, gi)
                out.line(
                    f"Successfully created compute instance ID {ci['id']:>2} on GPU {gpu.index:>2} GPU instance ID "
                    f"{gi['id']:>2} using profile MIG {ci['name']} (ID {ci['profile_id']:>2})"
                )
    return 0


def gi_busy(state: State, gpu: Gpu, gi: dict) -> bool:
    return any(p.get("gi") == gi["id"] for p in state.processes(gpu))


def destroy_cis(out: Out, gpus: list[Gpu], state: State, gi_ids: set[int] | None, ci_ids: set[int] | None) -> int:
    """``nvidia-smi mig -dci [-gi ID] [-ci ID]``."""
    found = False
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("destroy compute instances", gpu)
        for gi in find_gis(gpu, state, gi_ids):
            for ci in list(gi["cis"]):
                if ci_ids is not None and ci["id"] not in ci_ids:
                    continue
                found = True
                if gi_busy(state, gpu, gi):
                    out.err(
                        f"Unable to destroy compute instance ID {ci['id']:>2} from GPU {gpu.index:>2} GPU instance ID "
                        f"{gi['id']:>2}: In use by another client"
                    )
                    return RC_OTHER
                gi["cis"].remove(ci)
                out.line(
                    f"Successfully destroyed compute instance ID {ci['id']:>2} from GPU {gpu.index:>2} GPU instance ID {gi['id']:>2}"
                )
    if not found:
        out.err("No compute instances found: Not Found")
        return RC_NOT_FOUND
    return 0


def destroy_gis(out: Out, gpus: list[Gpu], state: State, gi_ids: set[int] | None) -> int:
    """``nvidia-smi mig -dgi [-gi ID]``: refused while compute instances exist or it is in use."""
    found = False
    for gpu in mig_enabled_gpus(gpus, state):
        require_root("destroy GPU instances", gpu)
        gs = state.gpu_state(gpu)
        for gi in find_gis(gpu, state, gi_ids):
            found = True
            if gi["cis"] or gi_busy(state, gpu, gi):
                out.err(f"Unable to destroy GPU instance ID {gi['id']:>2} from GPU {gpu.index:>2}: In use by another client")
                return RC_OTHER
            gs["gis"].remove(gi)
            out.line(f"Successfully destroyed GPU instance ID {gi['id']:>2} from GPU {gpu.index:>2}")
    if not found:
        out.err("No GPU instances found: Not Found")
        return RC_NOT_FOUND
    return 0
