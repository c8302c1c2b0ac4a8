"""Writes docs/install-paths.md, every install path as the stages render it (gpu_provision.stages.paths).

Run: python tools/gen_install_paths.py
"""

from __future__ import annotations

from pathlib import Path

from gpu_provision.spec import load_cluster
from gpu_provision.stages.paths import render

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    target = ROOT / "docs" / "install-paths.md"
    target.write_text(render(load_cluster(str(ROOT / "inventory" / "cluster.yaml"))))
    print(f"wrote {target}")
