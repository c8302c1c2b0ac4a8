"""packages.lock_timeout: from the cluster file (node over group over defaults) to the apt commands of a node."""

from __future__ import annotations

from pathlib import Path

from fakehost import FakeHost, run_op

from gpu_provision.desired import PackageWant
from gpu_provision.operations import packages
from gpu_provision.spec import load_cluster
from gpu_provision.spec.settings import default

CLUSTER_FILE = """\
version: v1
cluster: {name: lab, kubernetes: {enabled: false}}
defaults:
  packages: {lock_timeout: 45}
nodes:
  - {name: a, address: 127.0.0.2}
  - {name: b, address: 127.0.0.3, packages: {lock_timeout: 0}}
"""


def test_lock_timeout_defaults_to_five_minutes_and_follows_the_node(tmp_path: Path) -> None:
    assert default("packages.lock_timeout") == 300 == packages.LOCK_TIMEOUT
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER_FILE)
    cluster = load_cluster(str(path))
    assert [n.packages.lock_timeout for n in cluster.nodes] == [45, 0]
    host = FakeHost({"packages": {"manager": "apt", "packages": {}}})
    out = run_op(packages.wants, host, [PackageWant("nvidia-driver")], lock_timeout=cluster.node("a").packages.lock_timeout)
    assert out[-1].endswith("-o DPkg::Lock::Timeout=45 install nvidia-driver")
    assert "timeout -k 10 225 apt-get -o DPkg::Lock::Timeout=45 update -q" in out[0]
