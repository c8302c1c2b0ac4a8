"""The ``gpu-sim`` helper: the registry of processes that hold the simulated GPUs (stand-in, not NVIDIA software).

A GPU compute process (``gpu-sim hold``) is shown by nvidia-smi and blocks resets, MIG mode changes and destroying
its instance; a client (``gpu-sim client``) is a daemon holding driver handles, as DCGM does, and blocks MIG mode
changes and resets. Each record lasts as long as its process (:mod:`gpusim_procfs`).
"""

from __future__ import annotations

import json
import os
import sys

from gpusim_args import take
from gpusim_errors import RC_INVALID_ARG, SimError
from gpusim_hardware import load_gpus, select_gpus
from gpusim_output import Out
from gpusim_procfs import proc_start_time
from gpusim_state import locked_state


def register(kind: str, record: dict) -> None:
    """Add a process record (kind ``processes`` or ``clients``) under the state lock."""
    gpus = load_gpus()
    with locked_state(gpus) as state:
        state.data.setdefault(kind, []).append(record)


def hold(args: list[str]) -> int:
    """``gpu-sim hold --gpu N [--mem MiB] [--gi ID --ci ID] -- CMD...``: run CMD as a GPU process
    (shown by nvidia-smi, blocks resets and MIG changes while it lives)."""
    gpu_ref = None
    mem = 512
    gi = ci = None
    i = 0
    while i < len(args) and args[i] != "--":
        if args[i] == "--gpu":
            gpu_ref = take(args, i, "--gpu")
        elif args[i] == "--mem":
            mem = int(take(args, i, "--mem"))
        elif args[i] == "--gi":
            gi = int(take(args, i, "--gi"))
        elif args[i] == "--ci":
            ci = int(take(args, i, "--ci"))
        else:
            raise SimError(f"gpu-sim hold: unknown option {args[i]}", RC_INVALID_ARG)
        i += 2
    command = args[i + 1 :]
    if gpu_ref is None or not command:
        raise SimError("usage: gpu-sim hold --gpu N [--mem MiB] [--gi ID --ci ID] -- CMD...", RC_INVALID_ARG)
    gpus = load_gpus()
    gpu = select_gpus(gpus, gpu_ref)[0]
    if gi is not None and ci is None:
        ci = 0
    # Register this very process, then become CMD: the pid (and its start time) stay the same, so the
    # GPU process lives exactly as long as CMD and signals reach CMD directly.
    pid = os.getpid()
    register(
        "processes",
        {
            "pid": pid,
            "start_time": proc_start_time(pid),
            "gpu": gpu.uuid,
            "name": command[0],
            "used_memory": mem,
            "gi": gi,
            "ci": ci,
        },
    )
    sys.stdout.flush()
    try:
        os.execvp(command[0], command)
    except OSError as exc:
        raise SimError(f"gpu-sim hold: cannot run {command[0]}: {exc.strerror}", 127) from exc
    return 0


def client(args: list[str]) -> int:
    """``gpu-sim client --name NAME [--pid PID]``: register a daemon holding GPU handles (blocks MIG
    mode changes and resets like DCGM does) for as long as that process lives."""
    name = "client"
    pid = os.getppid()
    i = 0
    while i < len(args):
        if args[i] == "--name":
            name = take(args, i, "--name")
        elif args[i] == "--pid":
            pid = int(take(args, i, "--pid"))
        else:
            raise SimError(f"gpu-sim client: unknown option {args[i]}", RC_INVALID_ARG)
        i += 2
    register("clients", {"pid": pid, "start_time": proc_start_time(pid), "name": name, "gpus": "all"})
    return 0


def dump_state(out: Out) -> int:
    """``gpu-sim state``: the current state as JSON (for tests and debugging)."""
    gpus = load_gpus()
    with locked_state(gpus, write=False) as state:
        state.processes()
        state.clients()
        out.line(json.dumps(state.data, indent=1, sort_keys=True))
    return 0


def run_gpu_sim(args: list[str], out: Out) -> int:
    """Entry point for the ``gpu-sim`` helper."""
    if not args:
        raise SimError("usage: gpu-sim hold|client|state ...", RC_INVALID_ARG)
    if args[0] == "hold":
        return hold(args[1:])
    if args[0] == "client":
        return client(args[1:])
    if args[0] == "state":
        return dump_state(out)
    raise SimError(f"gpu-sim: unknown command {args[0]}", RC_INVALID_ARG)
