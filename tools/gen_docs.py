"""Writes docs/cluster-file.md, the settings reference, from the settings description (gpu_provision.spec.reference).

Run: python tools/gen_docs.py
"""

from __future__ import annotations

from pathlib import Path

from gpu_provision.spec.reference import render

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    target = ROOT / "docs" / "cluster-file.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(render())
    print(f"wrote {target}")
