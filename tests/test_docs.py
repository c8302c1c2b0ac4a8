"""The schema and the settings reference are generated; the committed files must match their generators."""

from __future__ import annotations

import json
from pathlib import Path

from gpu_provision.spec.reference import render
from gpu_provision.spec.settings import SCHEMA, defaults, entries

ROOT = Path(__file__).resolve().parents[1]


def test_schema_file_is_current() -> None:
    assert json.loads((ROOT / "schemas" / "cluster.v1.schema.json").read_text()) == SCHEMA


def test_reference_page_is_current() -> None:
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


def test_schema_file_carries_every_default() -> None:
    schema = json.loads((ROOT / "schemas" / "cluster.v1.schema.json").read_text())
    found = {path: sub["default"] for root in (schema, schema["properties"]["defaults"])
             for path, sub in entries(root) if "default" in sub}
    assert found == defaults()
    assert found["driver.reboot"] == "never" and found["permissions.mode"] == "0666"
    assert found["toolkit.default_runtime"] is True and found["cluster.kubernetes.monitoring.dcgm_exporter"] is True


def test_reference_page_shows_every_default() -> None:
    page = (ROOT / "docs" / "cluster-file.md").read_text()
    assert page.count("| setting | type | allowed | default | description |") == 2
    rows = {}
    for line in page.splitlines():
        if line.startswith("| `"):
            cells = [cell.strip() for cell in line.strip("|").split(" | ")]
            rows[cells[0].strip("`")] = cells
    for path, value in defaults().items():
        shown = value if isinstance(value, str) else json.dumps(value)
        assert rows[path][3] == f"`{shown}`", f"{path}: default column shows {rows[path][3]!r}"
    assert rows["driver.version"][3] == "", "a setting without a default shows none"


def test_install_paths_page_is_current() -> None:
    from gpu_provision.spec import load_cluster
    from gpu_provision.stages.paths import render

    assert (ROOT / "docs" / "install-paths.md").read_text() == render(load_cluster(str(ROOT / "inventory" /
                                                                                         "cluster.yaml")))
