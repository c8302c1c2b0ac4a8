"""Cluster files for the Kubernetes tests, loaded through the real loader."""

from __future__ import annotations

import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from gpu_provision.spec import load_cluster
from gpu_provision.spec.model import Cluster

ROOT = Path(__file__).resolve().parents[2]

#: A second cluster that exercises what the example file does not: a registry mirror, the nvidia runtime not the
#: default, MPS sharing, no MIG, Kubernetes 1.35 (the oldest supported minor), a scrape file and a team under the restricted
#: Pod Security Standard.
VARIANT = """\
version: v1
cluster:
  name: variant
  kubernetes:
    version: "1.35.9"
    cni: calico
    control_plane_endpoint: api.lab.internal
    monitoring: {prometheus_scrape_file: /etc/prometheus/gpu-scrape.yml}
    teams:
      - {name: research, namespace: research-gpu, gpus: 2, users: [carol], groups: [ml], pod_security: restricted}
      - {name: solo, gpus: 1}
  mirrors:
    registry: registry.internal:5000
nodes:
  - {name: cp-1, address: 10.30.0.10, role: control-plane, taints: ["dedicated=infra:NoExecute"]}
  - name: gpu-1
    address: 10.30.0.11
    gpus: {model: L40S, count: 2}
    toolkit: {default_runtime: false, cdi: false}
    sharing: {strategy: mps, replicas: 3, rename_by_default: true}
    labels: {team: research}
"""


@pytest.fixture(scope="session")
def example() -> Cluster:
    """inventory/cluster.yaml, the documented example."""
    return load_cluster(ROOT / "inventory" / "cluster.yaml")


@pytest.fixture(scope="session")
def variant(tmp_path_factory: pytest.TempPathFactory) -> Cluster:
    """The :data:`VARIANT` cluster."""
    path = tmp_path_factory.mktemp("variant") / "cluster.yaml"
    path.write_text(VARIANT)
    return load_cluster(path)


@pytest.fixture
def make_cluster(tmp_path: Path) -> Callable[[str], Cluster]:
    """Load a cluster file from text."""
    def make(text: str) -> Cluster:
        path = tmp_path / "cluster.yaml"
        path.write_text(textwrap.dedent(text))
        return load_cluster(path)
    return make

