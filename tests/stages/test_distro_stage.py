"""``driver.install_method: distro``: which kernels DKMS builds for, what is refused, and how a node converged by
Debian's packages reads to the driver stage, preflight, drift and the kernel guard."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from nodestates import converged, fresh

from gpu_provision.desired import PackageWant
from gpu_provision.kernel_guard import blocked_reboot
from gpu_provision.node.probe import system as probe
from gpu_provision.spec import load_cluster
from gpu_provision.stages import distro, driver, preflight
from gpu_provision.state import NodeStateData

CLUSTER = load_cluster(str(Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"))
H200 = CLUSTER.node("h200-01")
DEBIAN = replace(H200, gpus=replace(H200.gpus, count=1),
                 driver=replace(H200.driver, install_method="distro", version="535.309.01",
                                kernel_modules="proprietary", fabric_manager=None))
HOST_KERNEL, IMAGE_KERNEL = "6.18.44-host", "6.1.0-57-amd64"


def container_node() -> dict[str, Any]:
    """A Debian 12 node that runs its host's kernel and holds Debian's 6.1 kernel, without its headers yet."""
    raw = fresh("debian12", gpus=1)
    raw["system"].update(kernel=HOST_KERNEL, kernel_pending=IMAGE_KERNEL, kernels_installed=[IMAGE_KERNEL],
                         headers={HOST_KERNEL: False, IMAGE_KERNEL: False},
                         nvidia_modules={HOST_KERNEL: None, IMAGE_KERNEL: None})
    return raw


def test_a_running_kernel_the_node_does_not_hold_is_not_built_for() -> None:
    state = NodeStateData(container_node())
    assert distro.build_kernels(state) == [IMAGE_KERNEL]
    assert driver.header_packages(DEBIAN, state) == [f"linux-headers-{IMAGE_KERNEL}"]
    assert [c.split(" do ")[1] for c in distro.build_commands(state)] == [
        f'dkms install "$m" -k {IMAGE_KERNEL} || exit 1; done']
    # A machine that holds its running kernel builds for it and for the pending one, as before.
    raw = fresh("ubuntu2404", gpus=1)
    raw["system"]["kernels_installed"] = ["6.8.0-45-generic", "6.8.0-47-generic"]
    assert distro.build_kernels(NodeStateData(raw)) == ["6.8.0-45-generic", "6.8.0-47-generic"]


def test_debian_wants_its_headless_set_pinned_and_held_without_the_cuda_repository() -> None:
    state = NodeStateData(container_node())
    packages = {w.name: w for w in driver.package_wants(DEBIAN, state)}
    for name in ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "firmware-nvidia-gsp"):
        assert packages[name] == PackageWant(name, "535.309.01", held=True)
    assert packages["nvidia-persistenced"] == PackageWant("nvidia-persistenced", held=True)
    assert "nvidia-fabricmanager" not in packages
    paths = [w.path for w in driver.repository_wants(DEBIAN, CLUSTER, state)]
    assert paths == ["/etc/apt/sources.list.d/gpu-provision-debian-nonfree.sources",
                     "/etc/apt/preferences.d/gpu-provision-debian-nonfree.pref"]
    assert distro.pins(DEBIAN, state)[0].version == "535.309.01-*"


def test_the_debian_pin_is_the_drivers_own_spelling_for_an_exact_version_and_for_a_branch() -> None:
    """The preferences file's version comes from ``Driver.spell("debian_pin")``, as every other use's does."""
    state = NodeStateData(container_node())
    branch_only = replace(DEBIAN, driver=replace(DEBIAN.driver, version=None, branch="535"))
    assert DEBIAN.driver.spell("debian_pin") == "535.309.01-*"
    assert branch_only.driver.spell("debian_pin") == "535.*"
    for node in (DEBIAN, branch_only):
        assert [p.version for p in distro.pins(node, state)] == [node.driver.spell("debian_pin")]
        pref = distro.pin_file(node, state)
        assert pref is not None and f"Pin: version {node.driver.spell('debian_pin')}\n" in str(pref.content)


def test_every_use_of_the_driver_version_has_its_spelling() -> None:
    exact, branch = DEBIAN.driver, replace(DEBIAN.driver, version=None, branch="535")
    assert {use: exact.spell(use) for use in ("branch", "package", "pin", "debian_pin", "reported")} == {
        "branch": "535", "package": "535.309.01", "pin": "535.309.01*", "debian_pin": "535.309.01-*",
        "reported": "535.309.01"}
    assert {use: branch.spell(use) for use in ("branch", "package", "pin", "debian_pin", "reported")} == {
        "branch": "535", "package": "535.*", "pin": "535.*", "debian_pin": "535.*", "reported": "535"}
    assert branch.spell("package", "ubuntu") is None


def test_rhel_a_foreign_branch_and_fabric_manager_are_refused_by_preflight() -> None:
    rocky = NodeStateData(fresh("rocky9", gpus=1))
    assert distro.problems(DEBIAN, rocky) == [
        "driver.install_method: distro needs the OS's own NVIDIA driver packages and rhel ships none; use "
        "install_method: package (NVIDIA's CUDA repository)"]
    on_580 = replace(DEBIAN, driver=replace(DEBIAN.driver, version=None, branch="580"))
    debian = NodeStateData(container_node())
    assert distro.problems(on_580, debian) == [
        "driver.install_method: distro: Debian 12 ships driver branch 535 and the file wants 580; set "
        "driver.branch: \"535\" or a 535 driver.version"]
    assert "no NVIDIA Fabric Manager" in distro.problems(DEBIAN, debian, fabric_manager=True)[0]
    found = preflight.findings(DEBIAN, CLUSTER, rocky)
    assert any(f.check == "install-method" and f.fatal for f in found)


def test_a_node_converged_by_debians_packages_is_in_sync() -> None:
    raw = container_node()
    wants = driver.wants(DEBIAN, CLUSTER, NodeStateData(raw))
    done = converged(raw, wants)
    done["packages"]["packages"].update({name: {"version": "535.309.01-0+deb12u1", "held": True} for name in
                                         ("nvidia-kernel-dkms", "nvidia-smi", "libcuda1", "firmware-nvidia-gsp")})
    done["system"].update(headers={HOST_KERNEL: False, IMAGE_KERNEL: True},
                          nvidia_modules={HOST_KERNEL: None, IMAGE_KERNEL: "dkms"})
    state = NodeStateData(done)
    assert driver.header_packages(DEBIAN, state) == [] and distro.build_commands(state) == []
    assert driver.installed_version(DEBIAN, state) == "535.309.01"
    assert driver.extra_differences(DEBIAN, CLUSTER, state) == []
    # The host's kernel is not the node's to boot: nothing to lose on it, so the guard lets the node be.
    assert blocked_reboot(DEBIAN, state) is None


def test_debians_module_name_is_read_loaded_built_and_on_disk(monkeypatch: Any) -> None:
    raw = fresh("debian12", gpus=1, modules=("nvidia_current",))
    raw["system"].update(kernel_pending="6.1.0-58-amd64", nvidia_modules={"6.1.0-28-amd64": "dkms",
                                                                          "6.1.0-58-amd64": None})
    assert "no NVIDIA modules" in str(blocked_reboot(DEBIAN, NodeStateData(raw)))
    monkeypatch.setattr(probe._command, "available", lambda name: name == "dkms")
    monkeypatch.setattr(probe._command, "run", lambda argv, timeout=None, **kw: (
        0, "nvidia-current/535.309.01, 6.1.0-57-amd64, x86_64: installed\n"))
    assert probe._dkms_built() == {"6.1.0-57-amd64"}
    assert "nvidia-current.ko.xz" in probe.MODULE_FILES
