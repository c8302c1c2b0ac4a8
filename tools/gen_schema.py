"""Writes schemas/cluster.v1.schema.json from the settings description (gpu_provision/spec/settings.py).

Run: python tools/gen_schema.py
"""

from __future__ import annotations

import json
from pathlib import Path

from gpu_provision.spec.settings import SCHEMA

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    out = ROOT / "schemas" / "cluster.v1.schema.json"
    out.write_text(json.dumps(SCHEMA, indent=2) + "\n")
    print(f"wrote {out}")
