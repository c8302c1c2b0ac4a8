"""The simulator as the stand-in driver package installs it: the product's catalog reader beside it, no product."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from simnode import H200X2_HOST, SIM, SIM_MODULES, SimNode

from gpu_provision.node import catalog


def test_installed_layout_reads_models_through_the_catalog_beside_it(sim_node: SimNode, tmp_path: Path) -> None:
    sim_node.configure(H200X2_HOST)
    lib = tmp_path / "usr-lib-gpu-sim"
    shutil.copytree(SIM.parent, lib)
    shutil.copy(catalog.__file__, lib / "catalog.py")
    # -S -E: no site-packages, no PYTHONPATH: only the standard library and the files beside the simulator.
    proc = subprocess.run([sys.executable, "-S", "-E", str(lib / "gpusim.py"), "nvidia-smi", "-L"], env=sim_node.env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == sim_node.smi("-L")
    assert proc.stdout.count("NVIDIA H200") == 2


def test_simulator_has_no_model_file_reader_of_its_own() -> None:
    source = "".join(path.read_text() for path in SIM_MODULES)
    assert "load_model(model_key, models_dir)" in source
    assert '".json"' not in source
