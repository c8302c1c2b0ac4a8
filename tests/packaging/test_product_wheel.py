"""The product's wheel and sdist: everything the product reads at run time, and no test rig, stand-in or simulator.

Both are built from a copy of the sources (the product and the rig's distribution side by side, as in the
repository), so the build's files never land in the working tree; ``python -m build`` makes the wheel from the sdist,
so the sdist is proven complete too.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCES = ("pyproject.toml", "README.md", "LICENSE", "MANIFEST.in", "gpu_provision", "rig", "deploys", "inventory.py",
           "inventory", "docs", "tools", "schemas")
RIG_PATH = re.compile(r"(^|/)(rig|gpu_provision_rig|standins|sim)(/|$)|gpusim")
#: What the installed product reads through importlib.resources, besides its modules.
RUN_TIME_FILES = ("gpu_provision/schemas/cluster.v1.schema.json", "gpu_provision/schemas/verify-report.v1.schema.json",
                  "gpu_provision/data/gpus/H200.json", "gpu_provision/data/packages.json",
                  "gpu_provision/node/__main__.py", "gpu_provision/scaffold/inventory.py",
                  "gpu_provision/scaffold/deploys/gpu_node.py", "gpu_provision/deploys/gpu_node.py",
                  "gpu_provision/deploys/verify.py", "gpu_provision/deploys/cluster.py")


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(wheel, sdist) built by ``python -m build`` from a copy of the sources, the wheel from the sdist."""
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("dist")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in SOURCES:
        path = REPO / name
        if path.is_symlink():
            (src / name).symlink_to(path.readlink())
        elif path.is_dir():
            shutil.copytree(path, src / name, ignore=ignore)
        else:
            shutil.copy(path, src / name)
    proc = subprocess.run([sys.executable, "-m", "build", "-o", str(out), str(src)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    (wheel,) = out.glob("gpu_provision-*.whl")
    (sdist,) = out.glob("gpu_provision-*.tar.gz")
    return wheel, sdist


@pytest.fixture(scope="module")
def wheel(dists: tuple[Path, Path]) -> Path:
    return dists[0]


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


@pytest.mark.slow
def test_product_wheel_holds_what_the_product_reads_at_run_time(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    assert [name for name in RUN_TIME_FILES if name not in names] == []
    assert "gpu_provision/commands/init.py" in names
    assert not any(name.startswith(("deploys/", "inventory/", "schemas/")) for name in names)


@pytest.mark.slow
def test_product_wheel_ships_the_conformance_suite_as_a_pytest_plugin(wheel: Path) -> None:
    """``pytest --pyargs gpu_provision.conformance --cluster FILE`` from the installed wheel: the suite's modules,
    its options through the ``pytest11`` entry point, pytest and testinfra as the ``conformance`` extra only."""
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = next(n.rsplit("/", 1)[0] for n in names if n.endswith(".dist-info/METADATA"))
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        metadata = archive.read(f"{info}/METADATA").decode()
    suite = {f"gpu_provision/conformance/{m}.py" for m in ("__init__", "plugin", "conftest", "expect", "checks",
                                                             "test_node")}
    assert sorted(suite - names) == []
    assert "[pytest11]\ngpu_provision.conformance.plugin = gpu_provision.conformance.plugin" in entry_points
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert "Requires-Dist: pytest-testinfra>=10; extra == \"conformance\"" in requires
    assert not [r for r in requires if "testinfra" in r and "extra" not in r]
    assert not [r for r in requires if "pyinfra-testing" in r or "nvidia-ml-py" in r and "extra" in r]


@pytest.mark.slow
def test_sdist_holds_the_entry_files_examples_and_docs(dists: tuple[Path, Path]) -> None:
    _, sdist = dists
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    wanted = {"LICENSE", "README.md", "inventory.py", "deploys/gpu_node.py", "deploys/verify.py", "deploys/cluster.py",
              "inventory/cluster.yaml", "inventory/mig-parted.yaml", "docs/cluster-file.md", *RUN_TIME_FILES}
    assert sorted(wanted - names) == []
    assert [name for name in names if RIG_PATH.search(name)] == []


def test_top_level_schemas_is_the_package_folder() -> None:
    """Readers of the repository find the schemas at schemas/; there is one copy, inside the package."""
    assert (REPO / "schemas").resolve() == (REPO / "gpu_provision" / "schemas").resolve()
    assert (REPO / "schemas" / "cluster.v1.schema.json").is_file()


def test_product_never_imports_the_rig() -> None:
    offenders = [str(path.relative_to(REPO)) for path in sorted((REPO / "gpu_provision").rglob("*.py"))
                 if "gpu_provision_rig" in path.read_text(encoding="utf-8")]
    assert offenders == []
