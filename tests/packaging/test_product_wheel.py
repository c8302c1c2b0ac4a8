"""The product's wheel holds the product only: no test rig, no stand-in package, no GPU simulator.

The wheel is built from a copy of the sources (the product and the rig's distribution side by side, as in the
repository), so the build's files never land in the working tree.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "gpu_provision", "rig")
RIG_PATH = re.compile(r"(^|/)(rig|gpu_provision_rig|standins|sim)(/|$)|gpusim")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy(path, src / name)
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (built,) = out.glob("gpu_provision-*.whl")
    return built


@pytest.mark.slow
def test_product_wheel_has_no_rig_file(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "gpu_provision/cli.py" in names and "gpu_provision/data/gpus/H200.json" in names
    assert [name for name in names if RIG_PATH.search(name)] == []


@pytest.mark.slow
def test_product_wheel_has_no_rig_command(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_points,) = [name for name in names if name.endswith(".dist-info/entry_points.txt")]
        scripts = archive.read(entry_points).decode()
    assert "gpu-provision = gpu_provision.cli:main" in scripts and "rig" not in scripts
    assert "gpu_provision/commands/vagrant.py" in names and "gpu_provision/commands/rig.py" not in names


def test_product_never_imports_the_rig() -> None:
    offenders = [str(path.relative_to(REPO)) for path in sorted((REPO / "gpu_provision").rglob("*.py"))
                 if "gpu_provision_rig" in path.read_text(encoding="utf-8")]
    assert offenders == []
