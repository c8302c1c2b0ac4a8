"""The schema and the settings reference are generated; the committed files must match their generators."""

from __future__ import annotations

import json
import runpy
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_schema_file_is_current() -> None:
    generated = runpy.run_path(str(ROOT / "tools" / "gen_schema.py"))["schema"]
    assert json.loads((ROOT / "schemas" / "cluster.v1.schema.json").read_text()) == generated


def test_reference_page_is_current() -> None:
    render = runpy.run_path(str(ROOT / "tools" / "gen_docs.py"))["render"]
    assert (ROOT / "docs" / "cluster-file.md").read_text() == render()


def test_every_property_is_described() -> None:
    schema = json.loads((ROOT / "schemas" / "cluster.v1.schema.json").read_text())

    def walk(node, path):
        if isinstance(node, dict):
            for name, sub in node.get("properties", {}).items():
                assert sub.get("description"), f"{path}.{name} has no description"
                walk(sub, f"{path}.{name}")
            for key in ("additionalProperties", "items"):
                if isinstance(node.get(key), dict):
                    walk(node[key], f"{path}.{key}")
            if node.get("type") == "object" and "properties" in node:
                assert node.get("additionalProperties") is False, f"{path} is open to unknown keys"

    walk(schema, "$")
