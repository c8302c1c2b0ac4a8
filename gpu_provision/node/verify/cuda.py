"""CUDA checks through the driver API (``libcuda.so.1``) with ctypes: no CUDA toolkit, no compiler.

Kernels are hand-written PTX loaded with ``cuModuleLoadData``; the driver compiles them for whatever GPU it finds.
Device memory is taken with plain ``cuMemAlloc`` (never managed memory). Each function returns plain dicts that
``checks`` turns into report entries.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any

# c[i] = a[i] + b[i] for i < n; PTX ISA 6.0 / sm_50 so that every driver since CUDA 9 can JIT it.
VECTOR_ADD_PTX = b"""
.version 6.0
.target sm_50
.address_size 64

.visible .entry vector_add(
    .param .u64 param_a,
    .param .u64 param_b,
    .param .u64 param_c,
    .param .u32 param_n
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<11>;

    ld.param.u64 %rd1, [param_a];
    ld.param.u64 %rd2, [param_b];
    ld.param.u64 %rd3, [param_c];
    ld.param.u32 %r1, [param_n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd4, %rd1;
    cvta.to.global.u64 %rd5, %rd2;
    cvta.to.global.u64 %rd6, %rd3;
    mul.wide.u32 %rd7, %r5, 4;
    add.s64 %rd8, %rd4, %rd7;
    add.s64 %rd9, %rd5, %rd7;
    add.s64 %rd10, %rd6, %rd7;
    ld.global.f32 %f1, [%rd8];
    ld.global.f32 %f2, [%rd9];
    add.f32 %f3, %f1, %f2;
    st.global.f32 [%rd10], %f3;
DONE:
    ret;
}
"""

VECTOR_ELEMENTS = 1 << 20
COPY_BYTES = 1 << 30
COPY_REPEATS = 10
PEER_BYTES = 1 << 30
PEER_REPEATS = 5


def _host_ptr(buf: array.array, offset: int = 0) -> ctypes.c_void_p:
    """Return a pointer into a host array; a bare int would be passed as a 32-bit C int."""
    return ctypes.c_void_p(buf.buffer_info()[0] + offset)


class CudaError(Exception):
    """A CUDA driver call returned an error; the message names the call and the driver's error name."""


class Cuda:
    """Thin ctypes wrapper over the few driver-API entry points the checks use."""

    def __init__(self, library: str = "libcuda.so.1"):
        self.lib = ctypes.CDLL(library)
        self._bind_versions()

    def _bind_versions(self) -> None:
        # The _v2 entry points are the 64-bit ABI the headers map the plain names to since CUDA 3.2/11.
        names = {
            "cuMemAlloc": "cuMemAlloc_v2", "cuMemFree": "cuMemFree_v2", "cuMemcpyHtoD": "cuMemcpyHtoD_v2",
            "cuMemcpyDtoH": "cuMemcpyDtoH_v2", "cuMemcpyDtoD": "cuMemcpyDtoD_v2",
            "cuMemsetD32": "cuMemsetD32_v2", "cuMemGetInfo": "cuMemGetInfo_v2",
            "cuDevicePrimaryCtxRelease": "cuDevicePrimaryCtxRelease_v2",
        }
        self.fn: dict[str, Any] = {}
        for plain, versioned in names.items():
            self.fn[plain] = getattr(self.lib, versioned, None) or getattr(self.lib, plain)

    def call(self, name: str, *args: Any) -> None:
        """Call a driver function by its plain name and raise CudaError on a non-zero result."""
        func = self.fn.get(name) or getattr(self.lib, name)
        result = func(*args)
        if result != 0:
            raise CudaError(f"{name} failed: {self.error_name(result)}")

    def error_name(self, code: int) -> str:
        """Return the driver's name for an error code (``CUDA_ERROR_NO_DEVICE``), or the number."""
        text = ctypes.c_char_p()
        if self.lib.cuGetErrorName(code, ctypes.byref(text)) == 0 and text.value:
            return f"{text.value.decode()} ({code})"
        return str(code)

    def init(self) -> None:
        """Initialize the driver API."""
        self.call("cuInit", 0)

    def driver_version(self) -> int:
        """Return the CUDA version the driver supports, as an integer (13000 = 13.0)."""
        version = ctypes.c_int()
        self.call("cuDriverGetVersion", ctypes.byref(version))
        return version.value

    def device_count(self) -> int:
        """Return the number of devices CUDA sees (MIG devices only when named in CUDA_VISIBLE_DEVICES)."""
        count = ctypes.c_int()
        self.call("cuDeviceGetCount", ctypes.byref(count))
        return count.value

    def device(self, ordinal: int) -> int:
        """Return the CUdevice handle for an ordinal."""
        dev = ctypes.c_int()
        self.call("cuDeviceGet", ctypes.byref(dev), ordinal)
        return dev.value

    def device_name(self, dev: int) -> str:
        """Return the device's marketing name."""
        buf = ctypes.create_string_buffer(256)
        self.call("cuDeviceGetName", buf, 256, dev)
        return buf.value.decode()

    def device_bus_id(self, dev: int) -> str:
        """Return the device's PCI bus id in sysfs form (``0000:00:06.0``)."""
        buf = ctypes.create_string_buffer(64)
        self.call("cuDeviceGetPCIBusId", buf, 64, dev)
        return buf.value.decode().lower()

    def primary_context(self, dev: int) -> ctypes.c_void_p:
        """Retain the device's primary context and make it current on this thread."""
        ctx = ctypes.c_void_p()
        self.call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), dev)
        self.call("cuCtxSetCurrent", ctx)
        return ctx

    def release_context(self, dev: int) -> None:
        """Release the primary context retained by ``primary_context``."""
        self.call("cuDevicePrimaryCtxRelease", dev)

    def alloc(self, size: int) -> ctypes.c_uint64:
        """Allocate plain device memory."""
        ptr = ctypes.c_uint64()
        self.call("cuMemAlloc", ctypes.byref(ptr), ctypes.c_size_t(size))
        return ptr

    def free(self, ptr: ctypes.c_uint64) -> None:
        """Free device memory from ``alloc``."""
        self.call("cuMemFree", ptr)

    def mem_info(self) -> tuple[int, int]:
        """Return (free, total) bytes of the current context's device."""
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        self.call("cuMemGetInfo", ctypes.byref(free), ctypes.byref(total))
        return free.value, total.value

    def elapsed_ms(self, run: Any) -> float:
        """Time ``run()`` (which enqueues work on the null stream) with CUDA events; return milliseconds."""
        start, stop = ctypes.c_void_p(), ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(start), 0)
        self.call("cuEventCreate", ctypes.byref(stop), 0)
        try:
            self.call("cuEventRecord", start, None)
            run()
            self.call("cuEventRecord", stop, None)
            self.call("cuEventSynchronize", stop)
            ms = ctypes.c_float()
            self.call("cuEventElapsedTime", ctypes.byref(ms), start, stop)
            return ms.value
        finally:
            self.call("cuEventDestroy_v2", start)
            self.call("cuEventDestroy_v2", stop)


def vector_add(cuda: Cuda, n: int = VECTOR_ELEMENTS) -> dict[str, Any]:
    """Run the PTX vector add on the current context and compare every element with the host's sums."""
    start = time.perf_counter()
    module, func = ctypes.c_void_p(), ctypes.c_void_p()
    cuda.call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(VECTOR_ADD_PTX))
    try:
        cuda.call("cuModuleGetFunction", ctypes.byref(func), module, b"vector_add")
        host_a = array.array("f", range(n))
        host_b = array.array("f", (2.0 * i for i in range(n)))
        expected = array.array("f", (3.0 * i for i in range(n)))
        nbytes = 4 * n
        buffers = [cuda.alloc(nbytes) for _ in range(3)]
        try:
            for buf, host in zip(buffers, (host_a, host_b)):
                cuda.call("cuMemcpyHtoD", buf, _host_ptr(host), ctypes.c_size_t(nbytes))
            count = ctypes.c_uint32(n)
            params = (ctypes.c_void_p * 4)(*(ctypes.addressof(v) for v in (*buffers, count)))
            threads = 256
            blocks = (n + threads - 1) // threads
            cuda.call("cuLaunchKernel", func, blocks, 1, 1, threads, 1, 1, 0, None, params, None)
            cuda.call("cuCtxSynchronize")
            result = array.array("f", bytes(nbytes))
            cuda.call("cuMemcpyDtoH", _host_ptr(result), buffers[2], ctypes.c_size_t(nbytes))
        finally:
            for buf in buffers:
                cuda.free(buf)
    finally:
        cuda.call("cuModuleUnload", module)
    mismatches = sum(1 for got, want in zip(result, expected) if got != want) if result != expected else 0
    return {"elements": n, "mismatches": mismatches, "seconds": time.perf_counter() - start}


def copy_bandwidth(cuda: Cuda, nbytes: int = COPY_BYTES, repeats: int = COPY_REPEATS) -> dict[str, Any]:
    """Measure device-to-device copy bandwidth on the current context, in GB/s counting bytes read + written.

    The buffer shrinks to an eighth of free memory on small MIG slices so the check never starves the device.
    """
    free, _ = cuda.mem_info()
    nbytes = min(nbytes, (free // 8) & ~0xFFFFF)
    src, dst = cuda.alloc(nbytes), cuda.alloc(nbytes)
    try:
        cuda.call("cuMemsetD32", src, ctypes.c_uint32(0x3F800000), ctypes.c_size_t(nbytes // 4))
        cuda.call("cuMemcpyDtoD", dst, src, ctypes.c_size_t(nbytes))  # warm-up, also wakes clocks
        cuda.call("cuCtxSynchronize")

        def copies() -> None:
            for _ in range(repeats):
                cuda.call("cuMemcpyDtoD", dst, src, ctypes.c_size_t(nbytes))

        ms = cuda.elapsed_ms(copies)
        probe = array.array("I", bytes(16))
        cuda.call("cuMemcpyDtoH", _host_ptr(probe), ctypes.c_uint64(dst.value + nbytes - 16),
                  ctypes.c_size_t(16))
    finally:
        cuda.free(src)
        cuda.free(dst)
    moved = 2 * nbytes * repeats
    return {"bytes_per_copy": nbytes, "repeats": repeats, "ms": ms, "gbps": moved / (ms / 1000.0) / 1e9,
            "data_ok": all(word == 0x3F800000 for word in probe)}


def peer_copy(cuda: Cuda, src_dev: int, dst_dev: int, nbytes: int = PEER_BYTES,
              repeats: int = PEER_REPEATS) -> dict[str, Any]:
    """Check peer access from ``src_dev`` to ``dst_dev`` and time ``cuMemcpyPeerAsync`` (GB/s, one direction).

    Peer access is enabled in both primary contexts (a context setting, not a GPU setting) so the copy takes the
    direct path (NVLink or PCIe P2P) where one exists; the copied data is checked at both ends.
    """
    can = ctypes.c_int()
    cuda.call("cuDeviceCanAccessPeer", ctypes.byref(can), src_dev, dst_dev)
    dst_ctx = cuda.primary_context(dst_dev)
    src_ctx = cuda.primary_context(src_dev)
    if can.value:
        for ctx_here, ctx_peer in ((src_ctx, dst_ctx), (dst_ctx, src_ctx)):
            cuda.call("cuCtxSetCurrent", ctx_here)
            result = cuda.lib.cuCtxEnablePeerAccess(ctx_peer, 0)
            if result not in (0, 704):  # 704 = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                raise CudaError(f"cuCtxEnablePeerAccess failed: {cuda.error_name(result)}")
    cuda.call("cuCtxSetCurrent", dst_ctx)
    dst = cuda.alloc(nbytes)
    cuda.call("cuCtxSetCurrent", src_ctx)
    src = cuda.alloc(nbytes)
    try:
        cuda.call("cuMemsetD32", src, ctypes.c_uint32(0x5A5A5A5A), ctypes.c_size_t(nbytes // 4))
        cuda.call("cuCtxSynchronize")

        def copies() -> None:
            for _ in range(repeats):
                cuda.call("cuMemcpyPeerAsync", dst, dst_ctx, src, src_ctx, ctypes.c_size_t(nbytes), None)

        copies()  # warm-up
        cuda.call("cuCtxSynchronize")
        ms = cuda.elapsed_ms(copies)
        cuda.call("cuCtxSetCurrent", dst_ctx)
        cuda.call("cuCtxSynchronize")
        probe = array.array("I", bytes(32))
        cuda.call("cuMemcpyDtoH", _host_ptr(probe), dst, ctypes.c_size_t(16))
        cuda.call("cuMemcpyDtoH", _host_ptr(probe, 16), ctypes.c_uint64(dst.value + nbytes - 16),
                  ctypes.c_size_t(16))
    finally:
        cuda.call("cuCtxSetCurrent", src_ctx)
        cuda.free(src)
        cuda.call("cuCtxSetCurrent", dst_ctx)
        cuda.free(dst)
    return {"can_access_peer": bool(can.value), "bytes_per_copy": nbytes, "repeats": repeats, "ms": ms,
            "gbps": nbytes * repeats / (ms / 1000.0) / 1e9,
            "data_ok": all(word == 0x5A5A5A5A for word in probe)}


def probe_devices(library: str = "libcuda.so.1", bandwidth: bool = True) -> dict[str, Any]:
    """Run the vector add (and the copy bandwidth) on every device CUDA sees in this process.

    Returns ``{driver_version, devices: [{ordinal, name, bus_id, vector_add, bandwidth}|{ordinal, error}]}``,
    or ``{error}`` when the library cannot be loaded or initialized.
    """
    try:
        cuda = Cuda(library)
    except OSError as exc:
        return {"error": f"{library} not loadable: {exc}"}
    try:
        cuda.init()
        result: dict[str, Any] = {"driver_version": cuda.driver_version(), "devices": []}
        count = cuda.device_count()
    except CudaError as exc:
        return {"error": f"CUDA initialization failed: {exc}"}
    for ordinal in range(count):
        entry: dict[str, Any] = {"ordinal": ordinal}
        try:
            dev = cuda.device(ordinal)
            entry["name"] = cuda.device_name(dev)
            entry["bus_id"] = cuda.device_bus_id(dev)
            cuda.primary_context(dev)
            try:
                entry["vector_add"] = vector_add(cuda)
                if bandwidth:
                    entry["bandwidth"] = copy_bandwidth(cuda)
            finally:
                cuda.release_context(dev)
        except CudaError as exc:
            entry["error"] = str(exc)
        result["devices"].append(entry)
    return result


def probe_peers(library: str = "libcuda.so.1") -> dict[str, Any]:
    """Check every ordered pair of devices for peer access and copy bandwidth."""
    try:
        cuda = Cuda(library)
        cuda.init()
        count = cuda.device_count()
        bus_ids = [cuda.device_bus_id(cuda.device(i)) for i in range(count)]
    except (OSError, CudaError) as exc:
        return {"error": str(exc)}
    pairs = []
    for src in range(count):
        for dst in range(count):
            if src == dst:
                continue
            entry: dict[str, Any] = {"src": src, "dst": dst, "src_bus_id": bus_ids[src], "dst_bus_id": bus_ids[dst]}
            try:
                entry.update(peer_copy(cuda, cuda.device(src), cuda.device(dst)))
            except CudaError as exc:
                entry["error"] = str(exc)
            pairs.append(entry)
    for ordinal in range(count):
        # A context that was never retained has nothing to release.
        with contextlib.suppress(CudaError):
            cuda.release_context(cuda.device(ordinal))
    return {"pairs": pairs}
