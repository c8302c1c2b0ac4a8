"""The peer probe's schedule and copies, against a driver double that keeps each buffer's one word.

No machine here has two GPUs; the real driver ran this code on an H100 (``tests/fixtures/device/h100-peer-rounds``).
The double answers the driver calls the probe makes, records them in order, and can drop the copies of chosen
ordered pairs, as a broken link would.
"""

from __future__ import annotations

import ctypes
import itertools
import sys
from typing import Any

import pytest

from gpu_provision.node.verify import cuda
from gpu_provision.node.verify.probes import PeerProbe

CONTEXT_BASE = 100


class DriverDouble(cuda.Cuda):
    """A libcuda stand-in for the peer probe's calls: every buffer holds one repeated 32-bit word."""

    def __init__(self, library: str = "double", count: int = 4, dropped: set[tuple[int, int]] | None = None):
        self.fn: dict[str, Any] = {}
        self.count, self.dropped = count, dropped or set()
        self.current: int | None = None
        self.log: list[tuple[str, int | None]] = []
        self.words: dict[int, int] = {}
        self.next_pointer = 1 << 20
        self.retained: dict[int, int] = {}

    def call(self, name: str, *args: Any) -> None:
        self.log.append((name, self.current))
        getattr(self, "_" + name)(*args)

    def enable_peer_access(self, peer: ctypes.c_void_p) -> None:
        self.log.append(("enable_peer_access", self.current))

    def _buffer(self, address: int) -> int:
        return max(base for base in self.words if base <= address)

    def _cuInit(self, flags: int) -> None:
        pass

    def _cuDeviceGetCount(self, out: Any) -> None:
        out._obj.value = self.count

    def _cuDeviceGet(self, out: Any, ordinal: int) -> None:
        out._obj.value = ordinal

    def _cuDeviceGetPCIBusId(self, buf: Any, size: int, dev: int) -> None:
        buf.value = f"0000:{dev + 0x18:02X}:00.0".encode()

    def _cuDevicePrimaryCtxRetain(self, out: Any, dev: int) -> None:
        out._obj.value = CONTEXT_BASE + dev
        self.retained[dev] = self.retained.get(dev, 0) + 1

    def _cuDevicePrimaryCtxRelease(self, dev: int) -> None:
        self.retained[dev] -= 1

    def _cuCtxSetCurrent(self, ctx: ctypes.c_void_p) -> None:
        self.current = ctx.value

    def _cuCtxSynchronize(self) -> None:
        pass

    def _cuMemGetInfo(self, free: Any, total: Any) -> None:
        free._obj.value = total._obj.value = 80 << 30

    def _cuMemAlloc(self, out: Any, size: ctypes.c_size_t) -> None:
        out._obj.value, self.words[self.next_pointer] = self.next_pointer, 0xDEADBEEF
        self.next_pointer += size.value

    def _cuMemFree(self, pointer: ctypes.c_uint64) -> None:
        del self.words[pointer.value]

    def _cuMemsetD32(self, pointer: ctypes.c_uint64, word: ctypes.c_uint32, count: ctypes.c_size_t) -> None:
        self.words[pointer.value] = word.value

    def _cuDeviceCanAccessPeer(self, out: Any, src: int, dst: int) -> None:
        out._obj.value = 1

    def _cuMemcpyPeerAsync(self, dst: ctypes.c_uint64, dst_ctx: ctypes.c_void_p, src: ctypes.c_uint64,
                           src_ctx: ctypes.c_void_p, size: ctypes.c_size_t, stream: None) -> None:
        if (src_ctx.value - CONTEXT_BASE, dst_ctx.value - CONTEXT_BASE) not in self.dropped:
            self.words[dst.value] = self.words[src.value]

    def _cuMemcpyDtoH(self, host: ctypes.c_void_p, src: ctypes.c_uint64, size: ctypes.c_size_t) -> None:
        word = self.words[self._buffer(src.value)]
        ctypes.memmove(host.value, (ctypes.c_uint32 * 4)(*[word] * 4), size.value)

    def _cuEventCreate(self, out: Any, flags: int) -> None:
        out._obj.value = len(self.log)

    def _cuEventRecord(self, event: ctypes.c_void_p, stream: None) -> None:
        pass

    def _cuEventSynchronize(self, event: ctypes.c_void_p) -> None:
        pass

    def _cuEventElapsedTime(self, out: Any, start: ctypes.c_void_p, stop: ctypes.c_void_p) -> None:
        out._obj.value = 20.0

    def _cuEventDestroy_v2(self, event: ctypes.c_void_p) -> None:
        pass


@pytest.mark.parametrize("count", range(0, 10))
def test_every_ordered_pair_is_copied_once_and_no_gpu_twice_in_a_round(count: int) -> None:
    every = {(a, b) for a, b in itertools.permutations(range(count), 2)}
    for together in (False, True):
        rounds = cuda.pair_rounds(count, together)
        flat = [pair for pairs in rounds for pair in pairs]
        assert sorted(flat) == sorted(every)
        if together:
            for pairs in rounds:
                devices = [device for pair in pairs for device in pair]
                assert len(devices) == len(set(devices)), pairs
        else:
            assert all(len(pairs) == 1 for pairs in rounds)
    if count >= 2:
        rounds = cuda.pair_rounds(count, together=True)
        assert len(rounds) == (2 * (count - 1) if count % 2 == 0 else 2 * count)


def test_eight_gpus_copy_in_fourteen_rounds_of_four_pairs() -> None:
    rounds = cuda.pair_rounds(8, together=True)
    assert [len(pairs) for pairs in rounds] == [4] * 14


def test_a_round_queues_every_pairs_copies_before_it_waits_for_any() -> None:
    driver = DriverDouble(count=4)
    contexts = cuda.retain_contexts(driver, [0, 1, 2, 3])
    with cuda.PeerCopies(driver, contexts) as copies:
        start = len(driver.log)
        entries = copies.copy_round([(0, 3), (1, 2)])
    calls = driver.log[start:]
    copies_at = [i for i, (name, _) in enumerate(calls) if name == "cuMemcpyPeerAsync"]
    waits_at = [i for i, (name, _) in enumerate(calls) if name == "cuEventSynchronize"]
    assert len(copies_at) == 2 * (1 + cuda.PEER_REPEATS) and len(waits_at) == 2
    assert max(copies_at) < min(waits_at)
    # Each copy is queued on its source's context, so the two pairs' copies run side by side.
    assert {calls[i][1] for i in copies_at} == {CONTEXT_BASE + 0, CONTEXT_BASE + 1}
    assert [(e["src"], e["dst"], e["data_ok"]) for e in entries] == [(0, 3, True), (1, 2, True)]
    assert entries[0]["gbps"] == pytest.approx(copies.nbytes * cuda.PEER_REPEATS / 0.020 / 1e9)


def test_a_pair_whose_copies_deliver_nothing_fails_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    driver = DriverDouble(count=4, dropped={(2, 1)})
    monkeypatch.setattr(cuda, "Cuda", lambda library: driver)
    outcome = cuda.probe_peers("double", together=True)
    assert outcome["together"] is True
    assert [(p["src"], p["dst"]) for p in outcome["pairs"]] == sorted(itertools.permutations(range(4), 2))
    assert {(p["src"], p["dst"]) for p in outcome["pairs"] if not p["data_ok"]} == {(2, 1)}
    assert outcome["pairs"][0]["src_bus_id"] == "0000:18:00.0"
    assert set(driver.retained.values()) == {0}
    assert driver.words == {}


def test_a_probe_never_told_to_go_copies_nothing_and_lets_go_of_every_context(
        monkeypatch: pytest.MonkeyPatch) -> None:
    driver = DriverDouble(count=3)
    monkeypatch.setattr(cuda, "Cuda", lambda library: driver)
    outcome = cuda.probe_peers("double", together=True, ready=lambda: False)
    assert outcome == {"error": "the agent went away before the peer copies"}
    assert driver.retained == {0: 0, 1: 0, 2: 0}
    assert not any(name in ("cuMemAlloc", "cuMemcpyPeerAsync") for name, _ in driver.log)


CHILD = "import json, sys; line = sys.stdin.readline(); print(json.dumps({'pairs': [], 'said': line, 'argv': sys.argv[1:]}))"


def test_the_peer_child_is_told_go_and_learns_whether_pairs_copy_together() -> None:
    job = PeerProbe(([sys.executable, "-c", CHILD], {}), "libcuda.so.1", ["GPU-a", "GPU-b"], together=True)
    outcome = job.result()
    assert outcome["said"] == "go\n"
    assert outcome["argv"] == ["--peer-probe", "--peer-wait", "--libcuda", "libcuda.so.1", "--peer-rounds"]
    apart = PeerProbe(([sys.executable, "-c", CHILD], {}), "libcuda.so.1", ["GPU-a", "GPU-b"], together=False)
    assert "--peer-rounds" not in apart.result()["argv"]


def test_a_peer_child_nobody_asks_for_is_ended() -> None:
    job = PeerProbe(([sys.executable, "-c", "import time; time.sleep(60)"], {}), "libcuda.so.1", ["a", "b"], True)
    job.stop()
    assert job.proc is not None and job.proc.returncode is not None


class Recorded:
    """Stands in for PeerProbe in NodeReadings: records how it was started and whether it was stopped."""

    def __init__(self, relaunch: Any, libcuda: str, uuids: list[str], together: bool):
        self.uuids, self.together, self.stopped = uuids, together, False

    def stop(self) -> None:
        self.stopped = True


def readings_of(gpus: list[dict[str, Any]], nvlink: dict[int, float]) -> Any:
    from gpu_provision.node.verify.node_readings import NodeReadings

    node = NodeReadings({}, ([sys.executable], {}))
    node.__dict__.update(gpus=gpus, cuda_skip=None, nvlink=nvlink)
    return node


def gpu(index: int, mig: bool = False) -> dict[str, Any]:
    return {"index": index, "uuid": f"GPU-{index}", "mig_current": mig}


@pytest.mark.parametrize(("nvlink", "together"), [
    ({0: 478.1, 1: 478.1, 2: 478.1}, True),  # every whole GPU on NVLink (an NVSwitch board)
    ({0: 478.1, 1: 478.1}, False),           # GPU 2 without active links: its pairs go over PCIe
    ({}, False),                             # a PCIe board
])
def test_pairs_copy_side_by_side_only_where_every_gpu_has_nvlink(monkeypatch: pytest.MonkeyPatch,
                                                                 nvlink: dict[int, float], together: bool) -> None:
    from gpu_provision.node.verify import node_readings

    monkeypatch.setattr(node_readings, "PeerProbe", Recorded)
    node = readings_of([gpu(0), gpu(1), gpu(2), gpu(3, mig=True)], nvlink)
    job = node.peer_job
    assert (job.uuids, job.together) == (["GPU-0", "GPU-1", "GPU-2"], together)
    node.close()
    assert job.stopped


def test_no_peer_child_for_a_single_whole_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_provision.node.verify import node_readings

    monkeypatch.setattr(node_readings, "PeerProbe", Recorded)
    node = readings_of([gpu(0), gpu(1, mig=True)], {0: 478.1, 1: 478.1})
    assert node.peer_job is None and node.peer_pairs == []
