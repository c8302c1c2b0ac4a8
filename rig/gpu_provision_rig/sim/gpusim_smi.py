"""The simulator's ``nvidia-smi`` command line: options parsed as nvidia-smi takes them, each command run on the
locked state (stand-in, not NVIDIA software)."""

from __future__ import annotations

import gpusim_query
from gpusim_args import HELP, parse_ids, take
from gpusim_csv import query_compute_apps, query_gpu
from gpusim_device import reset, set_mig_mode, set_persistence
from gpusim_driver import check_driver
from gpusim_errors import RC_INVALID_ARG, RC_NOT_FOUND, RC_NOT_SUPPORTED, SimError
from gpusim_hardware import load_gpus, select_gpus
from gpusim_instances import create_cis, create_gis, destroy_cis, destroy_gis
from gpusim_mig_lists import lci, lgi, lgip, lgipp
from gpusim_output import Out
from gpusim_state import locked_state
from gpusim_table import list_gpus, summary, topo, version


def run_mig(args: list[str], out: Out) -> int:
    """``nvidia-smi mig ...``."""
    opts: dict[str, str | None] = {}
    action = None
    with_ci = False
    i = 0
    value_flags = {"-i", "--id", "-gi", "--gpu-instance-id", "-ci", "--compute-instance-id"}
    actions_with_value = {"-cgi": "cgi", "--create-gpu-instance": "cgi"}
    optional_value = {"-cci": "cci", "--create-compute-instance": "cci"}
    plain = {
        "-lgip": "lgip", "--list-gpu-instance-profiles": "lgip",
        "-lgipp": "lgipp", "--list-gpu-instance-possible-placements": "lgipp",
        "-lgi": "lgi", "--list-gpu-instances": "lgi",
        "-lci": "lci", "--list-compute-instances": "lci",
        "-dci": "dci", "--destroy-compute-instance": "dci",
        "-dgi": "dgi", "--destroy-gpu-instance": "dgi",
    }
    while i < len(args):
        a = args[i]
        if a in value_flags:
            key = {"--id": "-i", "--gpu-instance-id": "-gi", "--compute-instance-id": "-ci"}.get(a, a)
            opts[key] = take(args, i, a)
            i += 2
        elif a in actions_with_value:
            action = actions_with_value[a]
            opts["spec"] = take(args, i, a)
            i += 2
        elif a in optional_value:
            action = optional_value[a]
            if i + 1 < len(args) and not args[i + 1].startswith("-"):
                opts["spec"] = args[i + 1]
                i += 2
            else:
                i += 1
        elif a in plain:
            action = plain[a]
            i += 1
        elif a in ("-C", "--default-compute-instance"):
            with_ci = True
            i += 1
        else:
            raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi mig -h' for help.\n", RC_INVALID_ARG)
    if action is None:
        raise SimError(HELP, RC_INVALID_ARG)
    info = check_driver()
    all_gpus = load_gpus()
    gpus = select_gpus(all_gpus, opts.get("-i"))
    read_only = action in ("lgip", "lgipp", "lgi", "lci")
    with locked_state(all_gpus, write=not read_only) as state:
        del info
        if action == "lgip":
            lgip(out, gpus, state)
        elif action == "lgipp":
            lgipp(out, gpus)
        elif action == "lgi":
            lgi(out, gpus, state)
        elif action == "lci":
            lci(out, gpus, state, parse_ids(opts.get("-gi")))
        elif action == "cgi":
            return create_gis(out, gpus, state, opts["spec"] or "", with_ci)
        elif action == "cci":
            return create_cis(out, gpus, state, opts.get("spec"), parse_ids(opts.get("-gi")))
        elif action == "dci":
            return destroy_cis(out, gpus, state, parse_ids(opts.get("-gi")), parse_ids(opts.get("-ci")))
        elif action == "dgi":
            return destroy_gis(out, gpus, state, parse_ids(opts.get("-gi")))
    return 0


def run_smi(args: list[str], out: Out) -> int:
    """Entry point for the ``nvidia-smi`` command line."""
    if args and args[0] == "mig":
        return run_mig(args[1:], out)
    if args and args[0] == "topo":
        if args[1:2] != ["-m"]:
            raise SimError("Only 'nvidia-smi topo -m' is simulated.", RC_NOT_SUPPORTED)
        check_driver()
        topo(out, load_gpus())
        return 0
    opts: dict[str, str] = {}
    flags: set[str] = set()
    i = 0
    while i < len(args):
        a = args[i]
        if a.startswith("--query-gpu=") or a.startswith("--query-compute-apps=") or a.startswith("--format="):
            key, _, value = a.partition("=")
            opts[key] = value
            i += 1
        elif a in ("--query-gpu", "--query-compute-apps", "--format"):
            opts[a] = take(args, i, a)
            i += 2
        elif a.startswith("--id="):
            opts["-i"] = a.split("=", 1)[1]
            i += 1
        elif a in ("-i", "--id", "-mig", "--multi-instance-gpu", "-pm", "--persistence-mode"):
            key = {"--id": "-i", "--multi-instance-gpu": "-mig", "--persistence-mode": "-pm"}.get(a, a)
            opts[key] = take(args, i, a)
            i += 2
        elif a in ("-L", "--list-gpus", "-q", "--query", "-x", "--xml-format", "-r", "--gpu-reset", "--version",
                   "-h", "--help"):
            flags.add({"--list-gpus": "-L", "--query": "-q", "--xml-format": "-x", "--gpu-reset": "-r"}.get(a, a))
            i += 1
        else:
            raise SimError("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n", RC_INVALID_ARG)
    if flags & {"-h", "--help"}:
        out.stdout.append(HELP)
        return 0
    info = check_driver()
    if "--version" in flags:
        version(out, info)
        return 0
    all_gpus = load_gpus()
    if not all_gpus:
        raise SimError("No devices were found", RC_NOT_FOUND)
    gpus = select_gpus(all_gpus, opts.get("-i"))
    mutating = "-mig" in opts or "-r" in flags or "-pm" in opts
    with locked_state(all_gpus, write=mutating) as state:
        if "-mig" in opts:
            if opts["-mig"] not in ("0", "1"):
                raise SimError(f"Invalid MIG mode: {opts['-mig']}", RC_INVALID_ARG)
            return set_mig_mode(out, gpus, state, opts["-mig"] == "1")
        if "-pm" in opts:
            return set_persistence(out, gpus, state, opts["-pm"] == "1")
        if "-r" in flags:
            return reset(out, gpus, state, "-i" in opts)
        if "--query-gpu" in opts:
            query_gpu(out, gpus, state, info, opts["--query-gpu"], opts.get("--format", ""))
        elif "--query-compute-apps" in opts:
            query_compute_apps(out, gpus, state, opts["--query-compute-apps"], opts.get("--format", ""))
        elif "-L" in flags:
            list_gpus(out, gpus, state)
        elif "-q" in flags:
            out.stdout.append(gpusim_query.render(gpus, state, info, "-x" in flags))
        else:
            summary(out, gpus, state, info)
    return 0
