"""Fixtures of the rollout tests: the stand-in Kubernetes API on loopback."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path

import pytest
from standin_harness import kubectl, kubelet, standin_api


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
    for node in ("gpu-01", "gpu-02"):
        standin_api.put(address, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {}}})
    yield address
    httpd.shutdown()
    httpd.server_close()
