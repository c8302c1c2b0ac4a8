"""Fixtures of the rollout tests: the stand-in Kubernetes API on loopback."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from standin_harness import GPU_TAINT, kubectl, kubelet, node, standin_api


@pytest.fixture
def server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The stand-in API server on a free loopback port, its objects in ``tmp_path``; a kubeconfig naming it."""
    monkeypatch.setattr(kubelet, "STORE", str(tmp_path / "objects.json"))
    monkeypatch.setattr(kubectl, "EVICTION_RETRY", 0.2)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), kubelet.Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    address = f"127.0.0.1:{httpd.server_address[1]}"
    config = tmp_path / "admin.conf"
    config.write_text(f"clusters:\n- cluster:\n    server: https://{address}\n")
    monkeypatch.setenv("KUBECONFIG", str(config))
    for ns in ("default", "serving"):
        standin_api.put(address, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for name in ("gpu-01", "gpu-02"):
        standin_api.put(address, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {}}})
    yield address
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def cluster(server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The loopback API with one GPU node whose kubelet (this process) runs pods and serves their logs, and the
    control plane's passes running."""
    monkeypatch.setattr(kubelet, "POD_LOGS", str(tmp_path / "pods"))
    logs = ThreadingHTTPServer(("127.0.0.1", 0), kubelet.LogHandler)
    monkeypatch.setattr(kubelet, "KUBELET_PORT", logs.server_address[1])
    threading.Thread(target=logs.serve_forever, daemon=True).start()
    standin_api.put(server, node("gpu-01", gpus=2, taints=[GPU_TAINT]))
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            with kubelet.LOCK:
                items = kubelet.load()
                if any([step(items) for step in kubelet.CONTROLLERS]):
                    kubelet.save(items)
            kubelet.run_pods(server, "gpu-01", standin_api.objects(server))
            time.sleep(0.2)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    yield server
    stop.set()
    thread.join(5)
    for proc in list(kubelet.PROCS.values()):
        proc.kill()
        proc.wait()
    kubelet.PROCS.clear()
    logs.shutdown()
    logs.server_close()
