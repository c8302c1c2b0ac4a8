"""The agent's slow work, started early so it overlaps: CUDA child processes and threads for outside programs.

Each GPU and each MIG slice is probed by a child process of the agent that sees only that device
(``CUDA_VISIBLE_DEVICES=<uuid>``), all children at once, so the CUDA part costs one device's time, not the sum.
Peer copies run in one child that sees every whole GPU. The container and Kubernetes probes run in threads while
the other readings are taken.
"""

from __future__ import annotations

import ctypes
import json
import subprocess
import threading
import time

from .readings import run

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


def peer_probe(relaunch: Relaunch, libcuda: str, uuids: list[str]) -> dict[str, Any]:
    """Run the peer-copy child over the GPUs ``uuids`` (in that order); its JSON result, or ``{error}``."""
    prefix, env = relaunch
    done = run([*prefix, "--peer-probe", "--libcuda", libcuda], timeout=PROBE_TIMEOUT_S,
               env=dict(env, CUDA_VISIBLE_DEVICES=",".join(uuids), CUDA_DEVICE_ORDER="PCI_BUS_ID"))
    try:
        return dict(json.loads(done.get("stdout", "").strip().splitlines()[-1]))
    except (ValueError, IndexError):
        return {"error": done.get("error") or f"peer probe exited {done.get('returncode')}: "
                f"{(done.get('stderr') or '').strip()[-200:]}"}


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
