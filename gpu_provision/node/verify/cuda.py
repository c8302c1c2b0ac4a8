"""CUDA checks through the driver API (``libcuda.so.1``) with ctypes: no CUDA toolkit, no compiler.

Kernels are hand-written PTX loaded with ``cuModuleLoadData``; the driver compiles them for whatever GPU it finds.
Device memory is taken with plain ``cuMemAlloc`` (never managed memory). Each function returns plain dicts that
``checks`` turns into report entries.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any, Callable

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
#: The high bytes of the words a peer copy carries; the low byte is the source device's ordinal.
PEER_PATTERN = 0x5A5A5A00


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

    def event(self) -> ctypes.c_void_p:
        """A new CUDA event on the current context (destroy it with :meth:`destroy_events`)."""
        event = ctypes.c_void_p()
        self.call("cuEventCreate", ctypes.byref(event), 0)
        return event

    def event_ms(self, start: ctypes.c_void_p, stop: ctypes.c_void_p) -> float:
        """Wait for ``stop``; the milliseconds between two recorded events."""
        self.call("cuEventSynchronize", stop)
        ms = ctypes.c_float()
        self.call("cuEventElapsedTime", ctypes.byref(ms), start, stop)
        return ms.value

    def destroy_events(self, *events: ctypes.c_void_p) -> None:
        """Destroy events from :meth:`event`."""
        for event in events:
            self.call("cuEventDestroy_v2", event)

    def enable_peer_access(self, peer: ctypes.c_void_p) -> None:
        """Let the current context reach ``peer``'s memory directly; enabled already is fine."""
        result = self.lib.cuCtxEnablePeerAccess(peer, 0)
        if result not in (0, 704):  # 704 = CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            raise CudaError(f"cuCtxEnablePeerAccess failed: {self.error_name(result)}")

    def elapsed_ms(self, run: Any) -> float:
        """Time ``run()`` (which enqueues work on the null stream) with CUDA events; return milliseconds."""
        start, stop = self.event(), self.event()
        try:
            self.call("cuEventRecord", start, None)
            run()
            self.call("cuEventRecord", stop, None)
            return self.event_ms(start, stop)
        finally:
            self.destroy_events(start, stop)


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


def pair_rounds(count: int, together: bool) -> list[list[tuple[int, int]]]:
    """Every ordered pair of ``count`` devices, grouped in rounds whose copies run side by side.

    ``together``: no two pairs of a round share a device, so no GPU's links carry two copies at once (the circle
    method: n - 1 rounds of n / 2 pairs for an even n, each direction in a round of its own, so 2(n - 1) rounds;
    for an odd n one device sits out each round). Otherwise one pair a round, sources in order.
    """
    if not together:
        return [[(src, dst)] for src in range(count) for dst in range(count) if src != dst]
    seats = list(range(count)) + ([-1] if count % 2 else [])
    rounds: list[list[tuple[int, int]]] = []
    for _ in range(len(seats) - 1):
        pairs = [(seats[i], seats[-1 - i]) for i in range(len(seats) // 2) if -1 not in (seats[i], seats[-1 - i])]
        rounds += [pairs, [(dst, src) for src, dst in pairs]]
        seats = [seats[0], seats[-1], *seats[1:-1]]
    return [pairs for pairs in rounds if pairs]


def retain_contexts(cuda: Cuda, devices: list[int]) -> list[ctypes.c_void_p]:
    """Retain every device's primary context, each in a thread of its own.

    A context costs about a tenth of a second per GPU (0.09-0.11 s on an H100,
    ``tests/fixtures/device/peer-rounds``); ctypes lets go of the interpreter lock during the call, so the driver
    may create them side by side rather than one after the other.
    """
    contexts = [ctypes.c_void_p() for _ in devices]
    errors: list[str] = []

    def retain(index: int) -> None:
        try:
            cuda.call("cuDevicePrimaryCtxRetain", ctypes.byref(contexts[index]), devices[index])
        except CudaError as exc:
            errors.append(f"device {index}: {exc}")

    threads = [threading.Thread(target=retain, args=(index,)) for index in range(len(devices))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise CudaError("; ".join(sorted(errors)))
    return contexts


def _pattern(index: int) -> int:
    """The 32-bit word device ``index`` sends: one per source, so a copy that delivered nothing is seen."""
    return PEER_PATTERN | (index & 0xFF)


class PeerCopies:
    """Peer copies between the devices of this process, with their contexts already retained.

    Every device holds one source buffer (filled with its own :func:`_pattern`) and one target buffer, for the
    whole run, so a round costs the copies and not allocations. Peer access is enabled for every ordered pair
    that has it (a context setting, not a GPU setting), so copies take the direct path (NVLink or PCIe P2P).
    """

    def __init__(self, cuda: Cuda, contexts: list[ctypes.c_void_p], nbytes: int = PEER_BYTES,
                 repeats: int = PEER_REPEATS):
        self.cuda, self.contexts, self.repeats = cuda, contexts, repeats
        self.sources: list[ctypes.c_uint64] = []
        self.targets: list[ctypes.c_uint64] = []
        self.access: dict[tuple[int, int], bool] = {}
        free = []
        for ctx in contexts:
            cuda.call("cuCtxSetCurrent", ctx)
            free.append(cuda.mem_info()[0])
        # An eighth of the smallest device's free memory at most, as the copy bandwidth check takes.
        self.nbytes = min([nbytes] + [(f // 8) & ~0xFFFFF for f in free])

    def __enter__(self) -> PeerCopies:
        cuda, count = self.cuda, len(self.contexts)
        for index, ctx in enumerate(self.contexts):
            cuda.call("cuCtxSetCurrent", ctx)
            self.sources.append(cuda.alloc(self.nbytes))
            self.targets.append(cuda.alloc(self.nbytes))
            cuda.call("cuMemsetD32", self.sources[-1], ctypes.c_uint32(_pattern(index)),
                      ctypes.c_size_t(self.nbytes // 4))
            cuda.call("cuMemsetD32", self.targets[-1], ctypes.c_uint32(0), ctypes.c_size_t(self.nbytes // 4))
            cuda.call("cuCtxSynchronize")
        for src in range(count):
            for dst in range(count):
                if src != dst:
                    can = ctypes.c_int()
                    cuda.call("cuDeviceCanAccessPeer", ctypes.byref(can), cuda.device(src), cuda.device(dst))
                    self.access[(src, dst)] = bool(can.value)
                    if can.value:
                        cuda.call("cuCtxSetCurrent", self.contexts[src])
                        cuda.enable_peer_access(self.contexts[dst])
        return self

    def __exit__(self, *_: object) -> None:
        for ctx, buffers in zip(self.contexts, zip(self.sources, self.targets)):
            with contextlib.suppress(CudaError):
                self.cuda.call("cuCtxSetCurrent", ctx)
                for buf in buffers:
                    self.cuda.free(buf)

    def _copy(self, src: int, dst: int) -> None:
        self.cuda.call("cuMemcpyPeerAsync", self.targets[dst], self.contexts[dst], self.sources[src],
                       self.contexts[src], ctypes.c_size_t(self.nbytes), None)

    def copy_round(self, pairs: list[tuple[int, int]]) -> list[dict[str, Any]]:
        """Copy over every pair of a round at once (a warm-up copy each, then the timed ones): every pair's
        copies are queued on its source's stream before any is waited for. One entry per pair: the copy's GB/s
        (bytes copied, one direction) and whether both ends of the target hold the source's words, or
        ``error``."""
        cuda = self.cuda
        entries: dict[tuple[int, int], dict[str, Any]] = {
            pair: {"src": pair[0], "dst": pair[1], "can_access_peer": self.access[pair],
                   "bytes_per_copy": self.nbytes, "repeats": self.repeats} for pair in pairs}
        events: dict[tuple[int, int], tuple[ctypes.c_void_p, ctypes.c_void_p]] = {}

        def each(step: Callable[[int, int], None], among: list[tuple[int, int]]) -> list[tuple[int, int]]:
            ok = []
            for pair in among:
                try:
                    cuda.call("cuCtxSetCurrent", self.contexts[pair[0]])
                    step(*pair)
                    ok.append(pair)
                except CudaError as exc:
                    entries[pair]["error"] = str(exc)
            return ok

        def timed(src: int, dst: int) -> None:
            events[(src, dst)] = start, stop = cuda.event(), cuda.event()
            cuda.call("cuEventRecord", start, None)
            for _ in range(self.repeats):
                self._copy(src, dst)
            cuda.call("cuEventRecord", stop, None)

        def measured(src: int, dst: int) -> None:
            ms = cuda.event_ms(*events[(src, dst)])
            cuda.call("cuCtxSetCurrent", self.contexts[dst])
            probe = array.array("I", bytes(32))
            cuda.call("cuMemcpyDtoH", _host_ptr(probe), self.targets[dst], ctypes.c_size_t(16))
            tail = ctypes.c_uint64(self.targets[dst].value + self.nbytes - 16)
            cuda.call("cuMemcpyDtoH", _host_ptr(probe, 16), tail, ctypes.c_size_t(16))
            entries[(src, dst)].update(ms=ms, gbps=self.nbytes * self.repeats / (ms / 1000.0) / 1e9,
                                       data_ok=all(word == _pattern(src) for word in probe))

        try:
            live = each(self._copy, pairs)  # warm-up, also wakes the links
            live = each(lambda *_: cuda.call("cuCtxSynchronize"), live)
            live = each(timed, live)
            each(measured, live)
        finally:
            for start, stop in events.values():
                cuda.destroy_events(start, stop)
        return list(entries.values())


def probe_peers(library: str = "libcuda.so.1", together: bool = False,
                ready: Callable[[], bool] | None = None) -> dict[str, Any]:
    """Check every ordered pair of devices for peer access and copy bandwidth.

    The driver starts and every device's context is retained first, then ``ready()`` is awaited where given: the
    agent starts this probe beside the GPUs' own probes so this start overlaps theirs, and says go once they are
    done, so no peer copy disturbs their bandwidth readings. ``ready()`` false ends the probe before any copy
    (the agent went away). ``together`` runs the copies of disjoint pairs side by side (:func:`pair_rounds`).
    """
    try:
        cuda = Cuda(library)
        cuda.init()
        devices = [cuda.device(i) for i in range(cuda.device_count())]
        bus_ids = [cuda.device_bus_id(dev) for dev in devices]
        contexts = retain_contexts(cuda, devices)
    except (OSError, CudaError) as exc:
        return {"error": str(exc)}
    try:
        if ready is not None and not ready():
            return {"error": "the agent went away before the peer copies"}
        with PeerCopies(cuda, contexts) as copies:
            pairs = [entry for pairs in pair_rounds(len(devices), together) for entry in copies.copy_round(pairs)]
    except CudaError as exc:
        return {"error": str(exc)}
    finally:
        for dev in devices:
            # A context that was never retained has nothing to release.
            with contextlib.suppress(CudaError):
                cuda.release_context(dev)
    for entry in pairs:
        entry.update(src_bus_id=bus_ids[entry["src"]], dst_bus_id=bus_ids[entry["dst"]])
    return {"pairs": sorted(pairs, key=lambda entry: (entry["src"], entry["dst"])), "together": together}
