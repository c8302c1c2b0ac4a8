"""Under ``gpu_allocation: dra`` a node's containerd must do CDI: what the file may and may not leave to the
distribution's archive (``requirements.containerd_unpinned`` in ``gpu_provision/data/dra.json``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import load_cluster
from gpu_provision.spec.dradata import ARCHIVE_CONTAINERD, CONTAINERD_UNPINNED, DATA

CLUSTER = """\
version: v1
cluster:
  name: t
  kubernetes: {{gpu_allocation: {allocation}}}
nodes:
  - {{name: cp, address: 10.0.0.1, role: control-plane}}
  - name: n1
    address: 10.0.0.2
    gpus: {{model: L40S, count: 1}}
    container_runtime: {runtime}
"""


def _load(tmp_path: Path, runtime: str, allocation: str = "dra") -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(runtime=runtime, allocation=allocation))
    load_cluster(path)


@pytest.mark.parametrize("runtime", [
    "{kind: containerd, docker_source: distro, version: 2.2.1-0ubuntu1~24.04.3}",
    "{kind: containerd}",
    "{kind: docker}",
])
def test_a_runtime_that_does_cdi_is_accepted(tmp_path: Path, runtime: str) -> None:
    _load(tmp_path, runtime)


@pytest.mark.parametrize("runtime", ["{kind: containerd, docker_source: distro}",
                                     "{kind: docker, docker_source: distro}",
                                     "{kind: docker, docker_source: distro, version: 29.1.3-0ubuntu3~24.04.2}"])
def test_an_archive_containerd_left_unpinned_is_refused(tmp_path: Path, runtime: str) -> None:
    with pytest.raises(GpuProvisionError, match=r"docker_source: .*containerd_unpinned"):
        _load(tmp_path, runtime)
    # The same node is fine with the device plugin, which does not need CDI.
    _load(tmp_path, runtime, allocation="device-plugin")


def test_the_requirement_is_kept_in_the_data_file_with_its_source() -> None:
    entry = DATA["requirements"]["containerd_unpinned"]
    assert CONTAINERD_UNPINNED == ("distro",) and entry["source"] in DATA["sources"]
    assert "1.7.12" in DATA["sources"][entry["source"]]
    # The refusal names the archive's releases from the data file, each as its source read it.
    assert ARCHIVE_CONTAINERD == {"Ubuntu 22.04": "1.5.9", "Ubuntu 24.04": "1.7.12"}
    assert all(f"{version}-0ubuntu" in DATA["sources"][entry["source"]] for version in ARCHIVE_CONTAINERD.values())


def test_the_refusal_names_the_archive_releases(tmp_path: Path) -> None:
    with pytest.raises(GpuProvisionError, match=r"1\.5\.9 \(Ubuntu 22\.04\), 1\.7\.12 \(Ubuntu 24\.04\)"):
        _load(tmp_path, "{kind: containerd, docker_source: distro}")
