"""The agent's slow work, started early so it overlaps: CUDA child processes and threads for outside programs.

Each GPU and each MIG slice is probed by a child process of the agent that sees only that device
(``CUDA_VISIBLE_DEVICES=<uuid>``), all children at once, so the CUDA part costs one device's time, not the sum.
Peer copies run in one child that sees every whole GPU, started with the others and told when to copy. The
container and Kubernetes probes run in threads while the other readings are taken.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import threading
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # the agent imports no typing at run time (see report.Check)
    from typing import Any, Callable, Dict, List, Tuple

    #: The argv prefix and environment that start this agent again (see ``main.self_command``).
    Relaunch = Tuple[List[str], Dict[str, str]]

PROBE_TIMEOUT_S = 180.0


class Probes:
    """CUDA probe child processes, one per GPU or MIG slice, started together and awaited together."""

    def __init__(self, libcuda: str, relaunch: Relaunch):
        self.libcuda = libcuda
        self.relaunch = relaunch
        self.running: dict[str, subprocess.Popen[str]] = {}
        self.results: dict[str, dict[str, Any]] = {}

    def start(self, uuids: list[str]) -> None:
        """Start one child per device UUID."""
        prefix, env = self.relaunch
        for uuid in uuids:
            child_env = dict(env, CUDA_VISIBLE_DEVICES=uuid, CUDA_DEVICE_ORDER="PCI_BUS_ID")
            self.running[uuid] = subprocess.Popen(
                [*prefix, "--cuda-probe", "--libcuda", self.libcuda], env=child_env,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self) -> dict[str, dict[str, Any]]:
        """Collect every child's JSON result; a child that failed yields ``{error}``."""
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        for uuid, proc in self.running.items():
            try:
                out, err = proc.communicate(timeout=max(deadline - time.monotonic(), 1.0))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                self.results[uuid] = {"error": f"CUDA probe timed out after {PROBE_TIMEOUT_S:.0f} s"}
                continue
            try:
                self.results[uuid] = json.loads(out.strip().splitlines()[-1])
            except (ValueError, IndexError):
                tail = err.strip().splitlines()[-1:] or ["no output"]
                self.results[uuid] = {"error": f"CUDA probe exited {proc.returncode}: {tail[0][:200]}"}
        self.running.clear()
        return self.results


class PeerProbe:
    """The peer-copy child: one process that sees every whole GPU.

    Started beside the GPUs' own children, so its CUDA start and its contexts (hundreds of milliseconds a GPU)
    overlap theirs; it copies only once :meth:`result` says go, after those children are done, so no peer copy
    disturbs their bandwidth readings. A child never told (the agent ended first) sees its input close and exits
    without copying.
    """

    def __init__(self, relaunch: Relaunch, libcuda: str, uuids: list[str], together: bool):
        prefix, env = relaunch
        argv = [*prefix, "--peer-probe", "--peer-wait", "--libcuda", libcuda, *(["--peer-rounds"] if together else [])]
        self.seconds = 0.0
        self.proc: subprocess.Popen[str] | None = None
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                         text=True, env=dict(env, CUDA_VISIBLE_DEVICES=",".join(uuids),
                                                             CUDA_DEVICE_ORDER="PCI_BUS_ID"))
        except OSError as exc:
            self.failed = f"cannot start the peer probe: {exc}"

    def result(self) -> dict[str, Any]:
        """Say go and wait: the child's JSON result, or ``{error}``; :attr:`seconds` is the time from go to its end."""
        if self.proc is None:
            return {"error": self.failed}
        started = time.perf_counter()
        try:
            out, err = self.proc.communicate("go\n", timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.stop()
            return {"error": f"peer probe timed out after {PROBE_TIMEOUT_S:.0f} s"}
        finally:
            self.seconds = time.perf_counter() - started
        try:
            return dict(json.loads(out.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            return {"error": f"peer probe exited {self.proc.returncode}: {err.strip()[-200:]}"}

    def stop(self) -> None:
        """End a child that is still running (never told to go, or past its time)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


def libcuda_problem(library: str) -> str | None:
    """Say why the CUDA driver library cannot be used here, or None when it loads."""
    try:
        ctypes.CDLL(library)
    except OSError as exc:
        return f"{library} not loadable: {exc}"
    return None


def device_result(probe: dict[str, Any]) -> dict[str, Any] | None:
    """The single device entry of a one-device probe, with a top-level error folded in."""
    if "error" in probe:
        return {"error": probe["error"]}
    devices = probe.get("devices") or []
    return devices[0] if devices else None


class Background:
    """``func(*args)`` running in a thread; :meth:`outcome` waits for it."""

    def __init__(self, func: Callable[..., Any], *args: Any):
        self.box: dict[str, Any] = {}
        self.thread = threading.Thread(target=self._target, args=(func, *args), daemon=True)
        self.thread.start()

    def _target(self, func: Callable[..., Any], *args: Any) -> None:
        try:
            self.box["value"] = func(*args)
        except Exception as exc:  # reported as the check's failure, never lost
            self.box["error"] = f"{type(exc).__name__}: {exc}"

    def outcome(self) -> dict[str, Any]:
        """Wait for the thread; ``{value}`` with the function's return value, or ``{error}`` with its exception."""
        self.thread.join()
        return self.box
