"""How the GPU simulator fails: nvidia-smi's exit codes and the error that carries one (stand-in, not NVIDIA software).

Every layer of the simulator raises :class:`SimError`; only the entry point (``gpusim.py``) prints it, so a command
fails with the message on the stream and the exit code nvidia-smi uses.
"""

from __future__ import annotations

# NVML / nvidia-smi return codes (nvidia-smi(1) "RETURN VALUE").
RC_INVALID_ARG = 2
RC_NOT_SUPPORTED = 3
RC_NO_PERMISSION = 4
RC_NOT_FOUND = 6
RC_DRIVER_NOT_LOADED = 9
RC_LIB_MISMATCH = 18
RC_OTHER = 255


class SimError(Exception):
    """A failure reported the way nvidia-smi reports it: message on stdout/stderr and an exit code."""

    def __init__(self, message: str, code: int = RC_OTHER, stream: str = "stdout") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.stream = stream
