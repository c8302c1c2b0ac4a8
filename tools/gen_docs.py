"""Writes docs/cluster-file.md, the settings reference, from schemas/cluster.v1.schema.json.

Each setting is described once, in the schema; this page only lays the descriptions out. tests/test_docs.py fails
when the page is stale. Run: python tools/gen_docs.py
"""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

HEADER = """# Cluster file reference (version v1)

Generated from `schemas/cluster.v1.schema.json` by `tools/gen_docs.py`; edit the schema, not this page.
Settings under `defaults`, `groups.<name>` and each node merge: node over group over defaults (mappings merge key by
key; lists and other values replace). `gpu-provision validate FILE` checks a file; `gpu-provision plan FILE` shows
what each node resolves to.

| setting | type | allowed | description |
| --- | --- | --- | --- |
"""


def _type(schema: dict) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        return " or ".join(t)
    if t:
        return t
    if "enum" in schema or "const" in schema:
        return "string"
    return ""


def _allowed(schema: dict) -> str:
    if "enum" in schema:
        return ", ".join(f"`{v}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    parts = []
    if "x-allowed" in schema:
        parts.append(schema["x-allowed"])
    for key, word in (("minimum", "min"), ("maximum", "max")):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    return "; ".join(parts)


NODE_SETTINGS_NOTE = "Node settings: see the node settings table below."


def rows(schema: dict, path: str, out: list[str], skip: set[str]) -> None:
    if path:
        desc = schema.get("description", "").replace("|", "\\|").replace("\n", " ")
        if path in ("defaults", "groups.<name>"):
            desc += " " + NODE_SETTINGS_NOTE
        out.append(f"| `{path}` | {_type(schema)} | {_allowed(schema)} | {desc} |")
        if path in ("defaults", "groups.<name>"):
            return
    props = schema.get("properties", {})
    for name, sub in props.items():
        if path == "nodes[]" and name in skip:
            continue
        rows(sub, f"{path}.{name}" if path else name, out, skip)
    extra = schema.get("additionalProperties")
    if isinstance(extra, dict) and extra.get("type") == "object" or isinstance(extra, dict) and "properties" in extra:
        key = "<index>" if "index" in json.dumps(schema.get("propertyNames", {})) else "<name>"
        rows(extra, f"{path}.{key}", out, skip)
    items = schema.get("items")
    if isinstance(items, dict) and items.get("type") == "object":
        rows(items, f"{path}[]", out, skip)


def render() -> str:
    """The reference page text."""
    schema = json.loads((ROOT / "schemas" / "cluster.v1.schema.json").read_text())
    settings = schema["properties"]["defaults"]
    out: list[str] = []
    rows(schema, "", out, set(settings["properties"]))
    out.append("| `nodes[].<setting>` | | | Any node setting below. |")
    out += ["", "## Node settings", "",
            "Allowed in `defaults`, in `groups.<name>` and in each entry of `nodes`.", "",
            "| setting | type | allowed | description |", "| --- | --- | --- | --- |"]
    rows(settings, "", out, set())
    return HEADER + "\n".join(out) + "\n"


if __name__ == "__main__":
    target = ROOT / "docs" / "cluster-file.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text(render())
    print(f"wrote {target}")
