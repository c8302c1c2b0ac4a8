"""The few NVML reads the XML report lacks, through NVIDIA's ``pynvml``.

``pynvml`` is the one module here outside the standard library: the node bundle carries it at its root, taken from
the ``nvidia-ml-py`` distribution installed with the product (``gpu_provision.bundle.BUNDLED``); in a checkout the
same installed module is imported.

Each function returns ``(value, None)`` or ``(None, reason)`` so a missing ``libnvidia-ml.so.1`` turns into a
skipped sub-check with its reason rather than an exception.
"""

from __future__ import annotations

from typing import Any

import pynvml

# nvmlGpuP2PCapsIndex_t values; pynvml's NVML_P2P_CAPS_INDEX_READ is accidentally the tuple (0,).
P2P_READ, P2P_WRITE = 0, 1
_P2P_STATUS = {
    0: "OK", 1: "chipset not supported", 2: "GPU not supported", 3: "IOH topology not supported",
    4: "disabled by registry key", 5: "not supported", 6: "unknown",
}


class Nvml:
    """An initialized NVML session; ``open()`` returns None and a reason when NVML cannot start."""

    def __init__(self) -> None:
        pynvml.nvmlInit()

    @classmethod
    def open(cls) -> tuple[Nvml | None, str | None]:
        """Initialize NVML, or say why it could not be."""
        try:
            return cls(), None
        except pynvml.NVMLError as exc:
            return None, f"NVML not available: {exc}"
        except OSError as exc:
            return None, f"libnvidia-ml.so.1 not loadable: {exc}"

    def close(self) -> None:
        """Shut NVML down."""
        pynvml.nvmlShutdown()

    def cuda_driver_version(self) -> tuple[str | None, str | None]:
        """Return the CUDA version the driver supports as ``major.minor``."""
        try:
            value = pynvml.nvmlSystemGetCudaDriverVersion_v2()
        except pynvml.NVMLError as exc:
            return None, str(exc)
        return f"{value // 1000}.{(value % 1000) // 10}", None

    def _handle(self, index: int) -> Any:
        return pynvml.nvmlDeviceGetHandleByIndex(index)

    def p2p_status(self, a: int, b: int) -> tuple[dict[str, str] | None, str | None]:
        """Return NVML's peer-to-peer read and write status between GPUs ``a`` and ``b``."""
        try:
            ha, hb = self._handle(a), self._handle(b)
            read = pynvml.nvmlDeviceGetP2PStatus(ha, hb, P2P_READ)
            write = pynvml.nvmlDeviceGetP2PStatus(ha, hb, P2P_WRITE)
        except pynvml.NVMLError as exc:
            return None, str(exc)
        return {"read": _P2P_STATUS.get(read, str(read)), "write": _P2P_STATUS.get(write, str(write))}, None
