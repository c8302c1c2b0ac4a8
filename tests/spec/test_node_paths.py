"""Paths from the cluster file: a file written on a node (``prometheus_scrape_file``) is absolute, in normal form and
inside its documented directories; a CNI manifest is an http(s) URL or a regular file on the controller. Anything
else is a located error (exit 2, FILE:LINE:COL, no traceback)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_provision.cli import main
from gpu_provision.spec import load_cluster, nodepaths

CLUSTER = """version: v1
cluster:
  name: t
  kubernetes:
    cni: calico
{extra}
nodes:
  - {{name: cp, address: 10.0.0.1, role: control-plane}}
"""


def _write(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(extra=extra))
    return path


def _scrape(value: str) -> str:
    return f"    monitoring:\n      prometheus_scrape_file: {value}"


@pytest.mark.parametrize("value", ["/etc/prometheus/gpu.yml", "/etc/gpu-provision/scrape/gpu.yaml"])
def test_scrape_files_in_the_documented_directories_are_accepted(tmp_path: Path, value: str) -> None:
    cluster = load_cluster(_write(tmp_path, _scrape(value)))
    assert cluster.kubernetes.monitoring.prometheus_scrape_file == value


@pytest.mark.parametrize(("value", "why"), [
    ("gpu.yml", "is not an absolute path"),
    ("/etc/sudoers.d/gpu", "is outside the directories"),
    ("/etc/prometheus/../sudoers.d/gpu", "is not in normal form: write it as '/etc/sudoers.d/gpu'"),
    ("/etc/prometheus//gpu.yml", "is not in normal form"),
    ("/etc/prometheus/", "is not in normal form"),
    ("/etc/prometheus", "is outside the directories"),
    ("/etc/prometheusX/gpu.yml", "is outside the directories"),
    ("'/etc/prometheus/gpu yml'", "has characters other than"),
    ("/etc/prometheus/.hidden", "names a hidden file"),
    ("//etc/prometheus/gpu.yml", "is not in normal form"),
])
def test_scrape_files_elsewhere_are_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                                   why: str) -> None:
    path = _write(tmp_path, _scrape(value))
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{path}:7:31: $.cluster.kubernetes.monitoring.prometheus_scrape_file: ")
    assert why in line and "allowed: an absolute path in /etc/prometheus/ or /etc/gpu-provision/" in line


def test_every_documented_directory_is_absolute_and_normal() -> None:
    for dirs in nodepaths.NODE_DIRS.values():
        for folder in dirs:
            assert folder.startswith("/") and os.path.normpath(folder) == folder and folder != "/"


@pytest.mark.parametrize(("value", "why"), [
    ("missing.yaml", "cannot read CNI manifest"),
    ("/dev/zero", "CNI manifest is a device, FIFO or socket, not a regular file"),
    ("cni", "CNI manifest is a directory, not a regular file"),
    ("big.yaml", "CNI manifest is larger than"),
    ("file:///etc/kubernetes/admin.conf", "is not in the expected form (allowed: an http:// or https:// URL, or a "
                                          "file path on the controller"),
])
def test_unusable_cni_manifests_are_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str,
                                                   why: str) -> None:
    (tmp_path / "cni").mkdir()
    with open(tmp_path / "big.yaml", "wb") as f:
        f.truncate(3 * 1024 * 1024)
    path = _write(tmp_path, f"    cni_manifest: {value}")
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"{path}:6:19: $.cluster.kubernetes.cni_manifest: ") and why in line, line


def test_a_cni_manifest_file_or_url_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "calico.yaml").write_text("kind: List\n")
    assert load_cluster(_write(tmp_path, "    cni_manifest: calico.yaml")).kubernetes.cni_manifest == "calico.yaml"
    url = "https://mirror.internal/calico.yaml"
    assert load_cluster(_write(tmp_path, f"    cni_manifest: {url}")).kubernetes.cni_manifest == url
