"""A new GPU model is one data file: a copy of the catalog with one more file, named by GPU_PROVISION_GPU_DATA, is
enough for ``validate``, ``plan`` and ``mig-plan`` to know it, with no other file of the project touched."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from gpu_provision.spec.catalog import DATA_ENV

ROOT = Path(__file__).resolve().parents[2]
CLI = "import sys; from gpu_provision.cli import main; sys.exit(main(sys.argv[1:]))"
CLUSTER = """\
version: v1
cluster:
  name: t
  kubernetes: {enabled: false}
nodes:
  - name: x1
    address: 192.0.2.10
    gpus: {model: X100, count: 8}
    mig:
      layout: {"1g.20gb": 2, "3g.80gb": 1}
"""


def _new_model(directory: Path) -> None:
    """X100: the B200's file under another name, PCI id and memory, as a vendor's new part would arrive."""
    doc = json.loads((directory / "B200.json").read_text())
    doc.update(model="X100", product_names=["NVIDIA X100"], pci_device_ids=["0x2FFF10DE"], memory_gib=160)
    for profile in doc["mig"]["profiles"]:
        size = {1: 20, 2: 40, 4: 80, 8: 160}[profile["memory_slices"]]
        profile["name"] = profile["name"].split(".")[0] + f".{size}gb" + ("+me" if "+me" in profile["name"] else "")
    (directory / "X100.json").write_text(json.dumps(doc, indent=2))


def _run(data: Path, *argv: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, DATA_ENV: str(data), "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-c", CLI, *argv], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120, check=False)


def test_a_model_file_in_a_copied_catalog_is_all_a_new_gpu_needs(tmp_path: Path) -> None:
    data = tmp_path / "gpus"
    shutil.copytree(ROOT / "gpu_provision" / "data" / "gpus", data)
    _new_model(data)
    (tmp_path / "cluster.yaml").write_text(CLUSTER)

    checked = _run(data, "validate", "cluster.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    planned = _run(data, "plan", "cluster.yaml", "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "X100" in planned.stdout and "3g.80gb" in planned.stdout
    placed = _run(data, "mig-plan", "--gpu", "nvidia x100", "1g.20gb x2 + 3g.80gb", cwd=tmp_path)
    assert placed.returncode == 0, placed.stderr
    assert "X100: " in placed.stdout and "fits" in placed.stdout

    # The package's own catalog does not know the model: the directory above is what taught it.
    unknown = _run(ROOT / "gpu_provision" / "data" / "gpus", "mig-plan", "--gpu", "X100", cwd=tmp_path)
    assert unknown.returncode == 2 and "unknown GPU model 'X100'" in unknown.stderr
