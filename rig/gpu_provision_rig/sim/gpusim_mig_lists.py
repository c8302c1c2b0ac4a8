"""``nvidia-smi mig`` listings: profiles, their placements, GPU and compute instances (stand-in, not NVIDIA
software)."""

from __future__ import annotations

from gpusim_errors import RC_NOT_FOUND, SimError
from gpusim_hardware import Gpu
from gpusim_output import Out
from gpusim_placement import free_count
from gpusim_state import State, mig_enabled_gpus


def table_head(out: Out, title: str, columns: list[str]) -> str:
    """Print a listing's boxed title and column heads (as wide as they are); return its row rule."""
    width = len(columns[0]) - 2
    bar = "+" + "-" * width + "+"
    out.line(bar)
    out.line(f"| {title}".ljust(width + 1) + "|")
    for column in columns:
        out.line(column)
    out.line("|" + "=" * width + "|")
    return bar


def lgip(out: Out, gpus: list[Gpu], state: State) -> None:
    """``nvidia-smi mig -lgip``: profiles with free/total counts and resources (MIG may be off)."""
    capable = [g for g in gpus if g.mig_capable]
    if not capable:
        raise SimError("No MIG-supported devices found.", RC_NOT_FOUND)
    bar = table_head(out, "GPU instance profiles:", [
        "| GPU   Name               ID    Instances   Memory     P2P    SM    DEC   ENC  |",
        "|                                Free/Total   GiB              CE    JPEG  OFA  |",
    ])
    for gpu in capable:
        gs = state.gpu_state(gpu)
        for p in gpu.profiles:
            r = gpu.resources(p)
            free = free_count(gpu, gs, p) if gs["mig_current"] else int(p["max_instances"])
            inst = f"{free}/{p['max_instances']}"
            mem = f"{float(r['memory_gib']):.2f}"
            p2p = "Yes" if r.get("p2p") else "No"
            out.line(
                f"| {gpu.index:>3}  MIG {p['name']:<15}{p['id']:>3}     {inst:<11}{mem:<11}{p2p:<7}"
                f"{r['sm']:<7}{r['dec']:<6}{r['enc']:<4}|"
            )
            out.line(f"|{'':63}{r['ce']:<6}{r['jpeg']:<6}{r['ofa']:<4}|")
            out.line(bar)


def lgipp(out: Out, gpus: list[Gpu]) -> None:
    """``nvidia-smi mig -lgipp``: possible placements per profile."""
    capable = [g for g in gpus if g.mig_capable]
    if not capable:
        raise SimError("No MIG-supported devices found.", RC_NOT_FOUND)
    for gpu in capable:
        for p in gpu.profiles:
            starts = ",".join(str(s) for s in p["starts"])
            word = "Placements:" if len(p["starts"]) > 1 else "Placement :"
            out.line(f"GPU {gpu.index:>2} Profile ID {p['id']:>2} {word} {{{starts}}}:{p['memory_slices']}")


def lgi(out: Out, gpus: list[Gpu], state: State) -> None:
    """``nvidia-smi mig -lgi``."""
    enabled = mig_enabled_gpus(gpus, state)
    rows = [(g, gi) for g in enabled for gi in sorted(state.gpu_state(g)["gis"], key=lambda x: x["id"])]
    if not rows:
        raise SimError("No GPU instances found: Not Found", RC_NOT_FOUND)
    bar = table_head(out, "GPU instances:", [
        "| GPU   Name               Profile  Instance   Placement  |",
        "|                            ID       ID       Start:Size |",
    ])
    for gpu, gi in rows:
        place = f"{gi['start']}:{gi['size']}"
        out.line(f"| {gpu.index:>3}  MIG {gi['name']:<16}{gi['profile_id']:>4}{gi['id']:>9}{place:>13}     |")
        out.line(bar)


def lci(out: Out, gpus: list[Gpu], state: State, gi_filter: set[int] | None) -> None:
    """``nvidia-smi mig -lci [-gi ID]``."""
    enabled = mig_enabled_gpus(gpus, state)
    rows = []
    for gpu in enabled:
        for gi in sorted(state.gpu_state(gpu)["gis"], key=lambda x: x["id"]):
            if gi_filter is not None and gi["id"] not in gi_filter:
                continue
            for ci in gi["cis"]:
                rows.append((gpu, gi, ci))
    if not rows:
        raise SimError("No compute instances found: Not Found", RC_NOT_FOUND)
    bar = table_head(out, "Compute instances:", [
        "| GPU     GPU       Name             Profile   Instance   Placement  |",
        "|       Instance                       ID        ID       Start:Size |",
        "|         ID                                                         |",
    ])
    for gpu, gi, ci in rows:
        place = f"{ci['start']}:{ci['compute_slices']}"
        out.line(
            f"| {gpu.index:>3}{gi['id']:>7}       MIG {ci['name']:<16}{ci['profile_id']:>2}{ci['id']:>10}{place:>13}     |"
        )
        out.line(bar)
