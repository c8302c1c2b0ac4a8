"""The rig's stand-in Kubernetes API server and stand-in kubectl, run here on loopback without the rig.

The stand-in API server is the request handler of the rig's stand-in kubelet
(``rig/.../standins/kubernetes/kubelet/root/usr/bin/kubelet``), which on a rig node serves the API from
``objects.json``; here the same handler serves a temporary store on 127.0.0.1 and a free port, and the rig's
stand-in kubectl is put on ``PATH`` pointed at it by a kubeconfig. Every request path the server answers is
recorded, so tests can count list pages.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "rig" / "gpu_provision_rig" / "standins" / "kubernetes"
COMMON = KUBERNETES / "common"
KUBELET = KUBERNETES / "kubelet" / "root" / "usr" / "bin" / "kubelet"
KUBECTL = KUBERNETES / "kubectl" / "root" / "usr" / "bin" / "kubectl"


@dataclass
class StandIn:
    """A running stand-in API server: its kubeconfig, its store and the log of the request paths it answered."""

    kubeconfig: Path
    store: Path
    log: Path

    @property
    def paths(self) -> list[str]:
        """The paths of the GET requests answered so far, in order."""
        return self.log.read_text().splitlines()

    def seed(self, objects: list[dict[str, Any]]) -> None:
        """Replace every object the server holds (written as the server stores them)."""
        self.store.write_text(json.dumps(objects))


def _kubelet_module() -> Any:
    if str(COMMON) not in sys.path:
        sys.path.insert(0, str(COMMON))
    loader = importlib.machinery.SourceFileLoader("standin_kubelet", str(KUBELET))
    spec = importlib.util.spec_from_loader("standin_kubelet", loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@contextmanager
def running(tmp_path: Path) -> Iterator[StandIn]:
    """Serve a fresh store on 127.0.0.1 from a child process (this one may have gevent's patched threads);
    ``kubectl`` in ``tmp_path/bin`` reaches it through the kubeconfig."""
    store = tmp_path / "objects.json"
    store.write_text("[]")
    log = tmp_path / "requests.log"
    log.write_text("")
    server = subprocess.Popen([sys.executable, __file__, str(store), str(log)], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        kubeconfig = tmp_path / "kubeconfig"
        kubeconfig.write_text(f"apiVersion: v1\nclusters:\n- cluster:\n    server: http://127.0.0.1:{port}\n"
                              "  name: stand-in\n")
        bin_dir = tmp_path / "bin"
        bin_dir.mkdir(exist_ok=True)
        wrapper = bin_dir / "kubectl"
        wrapper.write_text(f"#!/bin/sh\nPYTHONPATH='{COMMON}' exec '{sys.executable}' '{KUBECTL}' \"$@\"\n")
        wrapper.chmod(0o755)
        yield StandIn(kubeconfig, store, log)
    finally:
        server.terminate()
        server.wait(timeout=30)


def serve(store: str, log: str) -> None:
    """The child process: the stand-in kubelet's API handler on 127.0.0.1 and a free port (printed first),
    each GET's path appended to ``log``."""
    kubelet = _kubelet_module()
    kubelet.STORE = store

    class Recording(kubelet.Handler):  # type: ignore[misc, name-defined]
        def do_GET(self) -> None:
            with open(log, "a") as handle:
                handle.write(self.path + "\n")
            super().do_GET()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recording)
    print(server.server_port, flush=True)
    server.serve_forever()


def path_with(bin_dir: Path) -> str:
    """``PATH`` with ``bin_dir`` first."""
    return f"{bin_dir}{os.pathsep}{os.environ['PATH']}"


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
