"""The rig's own command line (``gpu-provision-rig``) and its one error family; no rig is started."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpu_provision.cli import main as product_main
from gpu_provision.errors import GpuProvisionError
from gpu_provision_rig.cli import build_parser, main
from gpu_provision_rig.debs import DebBuildError
from gpu_provision_rig.errors import RigError
from gpu_provision_rig.mirror import MirrorError

SSH_CONFIG = Path(__file__).resolve().parents[1] / "vagrant" / "data" / "vagrant-ssh-config-libvirt.txt"


def test_subcommands() -> None:
    subparsers = next(a for a in build_parser()._actions if a.dest == "rig_command")
    assert sorted(subparsers.choices) == ["box", "down", "inventory", "libvirt", "reset", "status", "up",
                                          "vagrant-cluster"]


def test_module_runs_the_command_line() -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_provision_rig", "--help"], capture_output=True, text=True,
                          timeout=60, check=True)
    assert proc.stdout.startswith("usage: gpu-provision-rig")


@pytest.mark.parametrize("error", [RigError, MirrorError, DebBuildError])
def test_rig_errors_are_one_family_under_the_products(error: type[Exception]) -> None:
    assert issubclass(error, RigError) and issubclass(error, GpuProvisionError)
    assert not issubclass(error, RuntimeError)


def test_rig_error_is_printed_as_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--nodes", "999"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "node count 999 outside 1..200\n" and captured.out == ""


def test_the_product_has_no_rig_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        product_main(["rig", "status"])
    assert "invalid choice: 'rig'" in capsys.readouterr().err


def test_vagrant_cluster_is_the_products(tmp_path: Path) -> None:
    ours, products = tmp_path / "rig.yaml", tmp_path / "product.yaml"
    assert main(["vagrant-cluster", str(SSH_CONFIG), "-o", str(ours)]) == 0
    assert product_main(["vagrant-cluster", str(SSH_CONFIG), "-o", str(products)]) == 0
    assert ours.read_text() == products.read_text()
