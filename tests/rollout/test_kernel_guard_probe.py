"""The kernel guard from probe answers, and the probe's reading of which kernels have NVIDIA modules."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gpu_provision.kernel_guard import blocked_reboot
from gpu_provision.node.probe import system as probe
from gpu_provision.spec import load_cluster
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")
RUNNING, PENDING = "6.8.0-45-generic", "6.8.0-50-generic"


def state(modules: dict[str, Any] | None, headers: bool = True, loaded: tuple[str, ...] = (),
          pending: str = PENDING) -> NodeStateData:
    system: dict[str, Any] = {"kernel": RUNNING, "kernel_pending": pending, "modules": list(loaded),
                              "headers": {RUNNING: True, pending: headers}}
    if modules is not None:
        system["nvidia_modules"] = modules
    return NodeStateData({"system": system})


def test_a_pending_kernel_without_nvidia_modules_blocks_the_reboot() -> None:
    assert blocked_reboot(H200, state({RUNNING: "dkms", PENDING: None})) == (
        "kernel 6.8.0-50-generic is installed but has no NVIDIA modules; a reboot would leave the node without a "
        "GPU driver")


def test_dkms_modules_need_the_pending_kernels_headers_too() -> None:
    assert "has no headers" in str(blocked_reboot(H200, state({RUNNING: "dkms", PENDING: "dkms"}, headers=False)))
    # Precompiled modules (Ubuntu with Secure Boot) need no headers; nor do modules of a package.
    assert blocked_reboot(H200, state({RUNNING: "dkms", PENDING: "dkms"}, headers=False), dkms=False) is None
    assert blocked_reboot(H200, state({RUNNING: "package", PENDING: "package"}, headers=False)) is None


@pytest.mark.parametrize("source", ["dkms", "package", "files"])
def test_modules_of_any_origin_let_the_node_reboot(source: str) -> None:
    assert blocked_reboot(H200, state({RUNNING: source, PENDING: source})) is None


def test_the_driver_loaded_counts_as_a_driver_to_lose() -> None:
    assert blocked_reboot(H200, state({RUNNING: None, PENDING: None}, loaded=("nvidia",))) is not None


def test_nothing_to_lose_or_nothing_pending_or_nothing_read_never_blocks() -> None:
    assert blocked_reboot(H200, state({RUNNING: None, PENDING: None})) is None  # no driver yet
    assert blocked_reboot(H200, state({RUNNING: "dkms"}, pending=RUNNING)) is None  # the running kernel is newest
    assert blocked_reboot(H200, state(None)) is None  # an older probe that did not read the modules
    no_gpus = replace(H200, gpus=replace(H200.gpus, count=0))
    assert blocked_reboot(no_gpus, state({RUNNING: "dkms", PENDING: None})) is None


def test_the_probe_names_where_each_kernels_modules_come_from(monkeypatch: pytest.MonkeyPatch) -> None:
    files = {"6.8.0-45-generic": ["/lib/modules/6.8.0-45-generic/updates/dkms/nvidia.ko.zst"],
             "6.8.0-47-generic": ["/lib/modules/6.8.0-47-generic/kernel/nvidia-580srv/nvidia.ko"],
             "6.8.0-48-generic": ["/lib/modules/6.8.0-48-generic/extra/nvidia.ko.xz"]}
    monkeypatch.setattr(probe, "_module_files", lambda k: files.get(k, []))
    monkeypatch.setattr(probe, "_dkms_built", lambda: {"6.8.0-49-generic"})
    monkeypatch.setattr(probe, "_precompiled_packages",
                        lambda: {"linux-modules-nvidia-580-server-open-6.8.0-47-generic"})
    kernels = ["6.8.0-45-generic", "6.8.0-47-generic", "6.8.0-48-generic", "6.8.0-49-generic", "6.8.0-50-generic"]
    assert probe.nvidia_modules(kernels) == {"6.8.0-45-generic": "dkms", "6.8.0-47-generic": "package",
                                             "6.8.0-48-generic": "files", "6.8.0-49-generic": "dkms",
                                             "6.8.0-50-generic": None}


def test_the_probe_reads_dkms_status_old_and_new(monkeypatch: pytest.MonkeyPatch) -> None:
    text = ("nvidia/580.95.05, 6.8.0-45-generic, x86_64: installed\n"
            "nvidia/580.95.05, 6.8.0-50-generic, x86_64: built\n"
            "nvidia, 535.183.01, 5.15.0-100-generic, x86_64: installed\n"
            "zfs/2.2.2, 6.8.0-50-generic, x86_64: installed\n")

    # The probe runs its commands through its bounded runner: (exit status, output), None when it could not start.
    def run(argv: list[str], timeout: Any = None, **kwargs: Any) -> tuple[int | None, str]:
        assert argv == ["dkms", "status"]
        return 0, text

    monkeypatch.setattr(probe._command, "run", run)
    monkeypatch.setattr(probe._command, "available", lambda name: name == "dkms")
    assert probe._dkms_built() == {"6.8.0-45-generic", "5.15.0-100-generic"}

    def missing(argv: list[str], timeout: Any = None, **kwargs: Any) -> tuple[int | None, str]:
        return None, "[Errno 2] No such file or directory: 'dkms'"

    monkeypatch.setattr(probe._command, "run", missing)
    assert probe._dkms_built() == set()
    # A node without dkms on its PATH: nothing built by it, and no process started to find that out.
    monkeypatch.setattr(probe._command, "available", lambda name: False)
    monkeypatch.setattr(probe._command, "run", run)
    assert probe._dkms_built() == set()


def test_the_probe_finds_module_files_outside_build_and_source(monkeypatch: pytest.MonkeyPatch) -> None:
    tree = [("/lib/modules/k", ["updates", "build", "kernel"], ["modules.dep"]),
            ("/lib/modules/k/updates", ["dkms"], []),
            ("/lib/modules/k/updates/dkms", [], ["nvidia.ko.zst", "nvidia-uvm.ko.zst"]),
            ("/lib/modules/k/kernel", [], ["nvidia.ko.bak"])]
    walked: list[list[str]] = []

    def walk(top: str) -> Any:
        assert top == "/lib/modules/k"
        for folder, dirs, names in tree:
            yield folder, dirs, names
            walked.append(list(dirs))

    monkeypatch.setattr(probe.os, "walk", walk)
    assert probe._module_files("k") == ["/lib/modules/k/updates/dkms/nvidia.ko.zst"]
    assert walked[0] == ["updates", "kernel"]
