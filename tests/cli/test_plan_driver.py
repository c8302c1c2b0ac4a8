"""``gpu-provision plan`` shows the driver version the driver stage installs and pins, for an apt and a dnf node,
with an exact version and with a branch only: both take it from ``Driver.spell``."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from gpu_provision import cli
from gpu_provision.spec import load_cluster
from gpu_provision.stages import driver
from gpu_provision.state import NodeStateData

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "stages"))
from nodestates import fresh  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "inventory" / "cluster.yaml"


def _plan(capsys: pytest.CaptureFixture[str], path: Path) -> dict[str, dict]:
    assert cli.main(["plan", "--cluster", str(path), "--json"]) == 0
    return {p["node"]: p for p in json.loads(capsys.readouterr().out) if "driver" in p}


@pytest.mark.parametrize("os_key", ["debian12", "rocky9", "ubuntu2404"])
@pytest.mark.parametrize("exact", [None, "580.159.04"])
def test_plan_driver_version_is_what_the_driver_stage_installs_and_pins(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], os_key: str, exact: str | None) -> None:
    # The example's neighbours (its mig-parted file) come along: the file names them by relative path.
    shutil.copytree(EXAMPLE.parent, tmp_path / "inventory")
    path = tmp_path / "inventory" / EXAMPLE.name
    if exact:
        path.write_text(path.read_text().replace("    branch: 580\n", f'    version: "{exact}"\n', 1))
    cluster = load_cluster(str(path))
    plans = _plan(capsys, path)
    checked = 0
    for name, plan in plans.items():
        node = cluster.node(name)
        if node.driver.install_method != "package":
            continue
        shown = plan["driver"]["version"]
        assert shown == (exact or "580.*")
        state = NodeStateData(fresh(os_key, gpus=node.gpus.count))
        packages = [n for n in driver.driver_packages(node, state) if not driver.kernel_versioned(n)]
        installed = {w.version for w in driver.package_wants(node, state) if w.name in packages}
        if os_key == "ubuntu2404" and not exact:
            # Ubuntu's driver packages carry the branch in their names and install that branch's newest version.
            assert installed == {None}
            assert all(f"-{shown.removesuffix('.*')}" in n for n in packages)
        else:
            assert installed == {shown}
        pins = {pin.version for pin in driver.repository_pins(node, state)}
        assert pins == ({shown if shown.endswith("*") else shown + "*"} if os_key == "debian12" else set())
        checked += 1
    assert checked
