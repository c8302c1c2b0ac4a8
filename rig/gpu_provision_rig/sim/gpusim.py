#!/usr/bin/env python3
"""GPU simulator behind the test rig's stand-in ``nvidia-smi`` (stand-in, not NVIDIA software).

Hardware comes from ``/etc/gpu-sim/gpus.json`` (one entry per simulated GPU), profile tables from the
project's GPU model files copied to ``/usr/share/gpu-sim/gpus/`` and read through the project's one catalog reader
(``gpu_provision/node/catalog.py``, installed next to this file as ``catalog.py``), and mutable state (MIG mode, GPU and
compute instances, registered GPU processes) from ``/var/lib/gpu-sim/state.json`` under a file lock.

Output formats follow the real driver 580 ``nvidia-smi`` byte for byte where the project has captured
output (tests/fixtures/h200, h200x2). Python 3.9+ standard library only: it runs on rig nodes.

This file is the entry point; the modules beside it (shipped with it to ``/usr/lib/gpu-sim/``) hold the rest, each
importing only those listed before it: ``gpusim_errors`` (exit codes), ``gpusim_config`` (paths, clock),
``gpusim_procfs`` (process liveness), ``gpusim_output`` (collected output), ``gpusim_args`` (shared options),
``gpusim_hardware`` (the GPUs and their models), ``gpusim_driver`` (library and module versions), ``gpusim_state``
(the locked state store), ``gpusim_placement`` (MIG placements), ``gpusim_instances`` (MIG instance changes),
``gpusim_device`` (MIG mode, reset, persistence), ``gpusim_table`` (summary, ``-L``, ``topo -m``, ``--version``),
``gpusim_mig_lists`` (``mig -l*``), ``gpusim_csv`` (``--query-gpu``, ``--query-compute-apps``), ``gpusim_query``
(``-q``, ``-q -x``), ``gpusim_holders`` (the ``gpu-sim`` process-holder registry), ``gpusim_smi`` (the
``nvidia-smi`` command line).

Environment (for tests; defaults are the installed paths):
  GPU_SIM_CONFIG        hardware file               (/etc/gpu-sim/gpus.json)
  GPU_SIM_STATE_DIR     state directory             (/var/lib/gpu-sim)
  GPU_SIM_DATA_DIR      model data directory        (/usr/share/gpu-sim)
  GPU_SIM_LIB_DIR       driver library directory    (/usr/lib/gpu-sim; driver.json)
  GPU_SIM_RUN_DIR       "loaded module" directory   (/run/gpu-sim; version written at module load)
  GPU_SIM_BOOT_ID_FILE  boot id source              (/proc/sys/kernel/random/boot_id)
  GPU_SIM_PERSISTENCED_PID  pid file of the persistence daemon
  GPU_SIM_CLOCK         fixed clock, seconds since the epoch (UTC), for the date lines
"""

from __future__ import annotations

import os
import sys

from gpusim_errors import SimError
from gpusim_holders import run_gpu_sim
from gpusim_output import Out
from gpusim_smi import run_smi


def main(argv: list[str] | None = None) -> int:
    """Dispatch on the program name (``nvidia-smi`` or ``gpu-sim``) or on the first argument."""
    argv = list(sys.argv if argv is None else argv)
    prog = os.path.basename(argv[0])
    args = argv[1:]
    if prog not in ("nvidia-smi", "gpu-sim") and args and args[0] in ("nvidia-smi", "gpu-sim"):
        prog, args = args[0], args[1:]
    out = Out()
    try:
        rc = run_gpu_sim(args, out) if prog == "gpu-sim" else run_smi(args, out)
    except SimError as exc:
        if exc.stream == "stderr":
            out.err(exc.message)
        else:
            out.line(exc.message)
        rc = exc.code
    sys.stdout.write("".join(out.stdout))
    sys.stdout.flush()
    sys.stderr.write("".join(out.stderr))
    return rc


if __name__ == "__main__":
    sys.exit(main())
