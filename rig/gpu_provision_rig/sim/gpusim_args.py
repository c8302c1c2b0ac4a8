"""The command-line pieces the simulator's ``nvidia-smi`` and ``gpu-sim`` share: the help text, option values and
instance id lists (stand-in, not NVIDIA software)."""

from __future__ import annotations

from gpusim_errors import RC_INVALID_ARG, SimError

HELP = """NVIDIA System Management Interface -- stand-in for the gpu-provision test rig (gpu-sim).

Supported: nvidia-smi [-i ID] [-L | -q [-x] | --query-gpu=F --format=csv[,noheader][,nounits] |
  --query-compute-apps=F --format=csv | -mig 0|1 | -r | -pm 0|1 | --version | topo -m]
  nvidia-smi mig [-i ID] -lgip | -lgipp | -lgi | -lci [-gi ID] | -cgi P[,P...][:start] [-C] |
  -cci [ID,...] [-gi ID] | -dci [-gi ID] [-ci ID] | -dgi [-gi ID]
"""


def take(args: list[str], i: int, flag: str) -> str:
    if i + 1 >= len(args):
        raise SimError(f"Option \"{flag}\" requires a value.\n\n{HELP}", RC_INVALID_ARG)
    return args[i + 1]


def parse_ids(value: str | None) -> set[int] | None:
    if value is None:
        return None
    try:
        return {int(x) for x in value.split(",") if x.strip()}
    except ValueError as exc:
        raise SimError(f"Invalid instance id list: {value}", RC_INVALID_ARG) from exc
