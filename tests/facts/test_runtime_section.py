"""The runtime probe section on a prepared directory tree and fake tools printing the real tools' output."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from gpu_provision import bundle
from gpu_provision.node.probe import runtime

# Output of the real tools (nvidia-ctk 1.17.8, Docker's containerd.io 1.7.24, Debian 12's docker.io).
TOOLS = {
    "nvidia-ctk": "NVIDIA Container Toolkit CLI version 1.17.8\ncommit: f202b80a9b9d0db00d9b1d73c0128c8962c55f4d",
    "containerd": "containerd containerd.io 1.7.24 88bf19b2105c8b17560993bee28a01ddc2f97182",
    "dockerd": "Docker version 20.10.24+dfsg1, build 297e128",
    "apt-cache": "linux-modules-nvidia-580-server-open-6.8.0-45-generic\n"
                 "linux-modules-nvidia-580-server-open-6.8.0-31-generic\n"
                 "linux-headers-6.8.0-45-generic\nlinux-headers-6.8.0-45\n"
                 "nvidia-driver-pinning-580.159.04\nnvidia-driver-pinning-580\nnvidia-driver",
}


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A node tree: fake tools on PATH, dpkg info, /dev with NVIDIA device files, /lib/modules."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in TOOLS.items():
        tool = bin_dir / name
        # apt-cache pkgnames PREFIX lists the index's names starting with PREFIX.
        body = f"printf '%b\\n' {json.dumps(text)} | grep \"^$2\"" if name == "apt-cache" else \
            f"printf '%b\\n' {json.dumps(text)}"
        tool.write_text(f"#!/bin/sh\n{body}\n")
        tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    info = tmp_path / "dpkg"
    info.mkdir()
    for name, stamp in (("nvidia-driver.list", 1_700_000_000), ("nvidia-open.list", 1_700_000_500),
                        ("nvidia-container-toolkit.list", 1_800_000_000)):
        (info / name).write_text("")
        os.utime(info / name, (stamp, stamp))
    dev = tmp_path / "dev"
    (dev / "char").mkdir(parents=True)
    (dev / "nvidia-caps").mkdir()
    for name, major, minor in (("nvidia0", 195, 0), ("nvidiactl", 195, 255), ("nvidia-caps/nvidia-cap1", 511, 1)):
        os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    (dev / "char" / "195:0").symlink_to("../nvidia0")
    spec = tmp_path / "nvidia.yaml"
    spec.write_text("cdiVersion: 0.5.0\n")
    os.utime(spec, (1_700_000_100, 1_700_000_100))
    modules = tmp_path / "modules"
    (modules / "6.8.0-45-generic").mkdir(parents=True)
    for attr, value in (("DPKG_INFO", info), ("DEV", dev), ("CDI_SPEC", spec), ("MODULES_DIR", modules),
                        ("RUN_CDI_SPEC", tmp_path / "no-run-spec.yaml")):
        monkeypatch.setattr(runtime, attr, str(value))
    monkeypatch.setattr(runtime, "running_kernel", lambda: "6.8.0-31-generic")
    return tmp_path


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_section_reads_versions_ages_links_and_available_packages(node: Path) -> None:
    assert runtime.collect({}) == {
        "nvidia_ctk_version": "1.17.8",
        "containerd_version": "1.7.24",
        "docker_version": "20.10.24",
        "cdi_spec_mtime": 1_700_000_100,
        "cdi_run_spec_mtime": None,
        # The newest driver package counts; the toolkit package is not the driver.
        "driver_installed_at": 1_700_000_500,
        "precompiled_modules": ["linux-modules-nvidia-580-server-open-6.8.0-31-generic",
                                "linux-modules-nvidia-580-server-open-6.8.0-45-generic"],
        "headers_available": ["linux-headers-6.8.0-45-generic"],
        "dev_char_missing": [f"{node}/dev/nvidia-caps/nvidia-cap1", f"{node}/dev/nvidiactl"],
    }


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_asked_prefixes_list_what_the_index_knows_from_the_same_apt_cache_call(node: Path, monkeypatch) -> None:
    calls: list[list[str]] = []
    real = runtime._run
    monkeypatch.setattr(runtime, "_run", lambda argv: calls.append(argv) or real(argv))
    answer = runtime.collect({"apt_prefixes": ["nvidia-driver-pinning-"]})
    assert answer["apt_names"] == {"nvidia-driver-pinning-": ["nvidia-driver-pinning-580",
                                                              "nvidia-driver-pinning-580.159.04"]}
    assert answer["headers_available"] == ["linux-headers-6.8.0-45-generic"]
    assert [c for c in calls if c[0] == "apt-cache"] == [["apt-cache", "pkgnames"]]  # one call for every prefix


def test_containerd_2_and_debian_version_strings() -> None:
    assert runtime._version(["printf", "containerd github.com/containerd/containerd/v2 v2.0.2 c507a02\n"],
                            r"\sv?(\d+\.\d+\.\d+)") == "2.0.2"
    assert runtime._version(["printf", "containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1\n"],
                            r"\sv?(\d+\.\d+\.\d+)") == "1.6.20"
    assert runtime._version(["false"], r"(.*)") is None
    assert runtime._version(["/nonexistent/tool"], r"(.*)") is None


def test_section_runs_inside_the_bundled_probe_on_this_machine() -> None:
    proc = subprocess.run(["sh", "-c", bundle.probe_command({"runtime": {}})], capture_output=True, text=True,
                          check=True, timeout=120)
    answer = json.loads(proc.stdout)["runtime"]
    assert set(answer) == {"nvidia_ctk_version", "containerd_version", "docker_version", "cdi_spec_mtime",
                           "cdi_run_spec_mtime", "driver_installed_at", "precompiled_modules", "headers_available", "dev_char_missing"}
