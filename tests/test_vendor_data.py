"""Vendor facts live once, in gpu_provision/data/: repository locations and default versions are read from
packages.json, never written again in the package's code."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_provision"
DATA = json.loads((PACKAGE / "data" / "packages.json").read_text())
VENDOR_HOSTS = ("download.nvidia.com", "nvidia.github.io", "pkgs.k8s.io", "download.docker.com",
                "dl.fedoraproject.org", "deb.debian.org")


def test_no_vendor_download_url_is_written_in_the_package_code() -> None:
    found = [f"{path.relative_to(ROOT)}:{number}" for path in sorted(PACKAGE.rglob("*.py"))
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if any(f"//{host}" in line or f".{host}/" in line or f"//{host}/" in line for host in VENDOR_HOSTS)]
    assert found == []


def test_every_upstream_repository_and_the_toolkit_default_come_from_the_data_file() -> None:
    from gpu_provision.spec.defaults import TOOLKIT_VERSION, UPSTREAM
    from gpu_provision.spec.settings import default

    repositories = {k: v for k, v in DATA["repositories"].items() if k != "about"}
    assert set(UPSTREAM) == set(repositories) == {"cuda", "container_toolkit", "docker", "kubernetes"}
    assert all(entry["source"] in DATA["sources"] for entry in repositories.values())
    assert {name: default(f"cluster.mirrors.{name}") for name in UPSTREAM} == {
        name: {k: v for k, v in entry.items() if k != "source"} for name, entry in repositories.items()}
    assert default("toolkit.version") == TOOLKIT_VERSION == DATA["toolkit"]["default_version"]
