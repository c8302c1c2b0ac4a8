"""Fixtures for the command-line grammar tests: loopback cluster files whose nodes refuse connections."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def down_cluster(tmp_path: Path, closed_port: int) -> Path:
    """A cluster file (JSON is YAML) with three loopback GPU nodes nobody answers for: a, b and c."""
    doc = {
        "version": "v1",
        "cluster": {"name": "cli-test", "kubernetes": {"enabled": False},
                    "ssh": {"user": "root", "connect_timeout": 1, "strict_host_key_checking": False}},
        "nodes": [{"name": name, "address": f"127.0.0.{n}", "ssh": {"port": closed_port},
                   "gpus": {"model": "H200", "count": 1}} for n, name in enumerate(("a", "b", "c"), 1)],
    }
    path = tmp_path / "cluster.yaml"
    path.write_text(json.dumps(doc))
    return path
