"""The settings reference page (``docs/cluster-file.md``), laid out from :mod:`gpu_provision.spec.settings`.

Each setting is described once, in the settings description; this page only lays the descriptions out, one row per
setting with its type, allowed values, default and description. tests/test_docs.py fails when the page is stale.
"""

from __future__ import annotations

import json
from typing import Any

from gpu_provision.spec.settings import NODE_SETTINGS, SCHEMA, entries

_COLUMNS = "| setting | type | allowed | default | description |\n| --- | --- | --- | --- | --- |"

HEADER = f"""# Cluster file reference (version v1)

Generated from `gpu_provision/spec/settings.py` by `tools/gen_docs.py`; edit the settings there, not this page.
Settings under `defaults`, `groups.<name>` and each node merge: node over group over defaults (mappings merge key by
key; lists and other values replace). A setting left out takes its default; one without a default is unset unless
its description says how it is worked out. `gpu-provision validate FILE` checks a file; `gpu-provision plan FILE`
shows what each node resolves to.

{_COLUMNS}
"""

NODE_SETTINGS_NOTE = "Node settings: see the node settings table below."


def _type(schema: dict[str, Any]) -> str:
    t = schema.get("type")
    if isinstance(t, list):
        return " or ".join(t)
    if t:
        return str(t)
    if "enum" in schema or "const" in schema:
        return "string"
    return ""


def _allowed(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return ", ".join(f"`{v if isinstance(v, str) else json.dumps(v)}`" for v in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    items = schema.get("items")
    if isinstance(items, dict) and "enum" in items:
        return "each one of " + _allowed(items)
    parts = []
    if "x-allowed" in schema:
        parts.append(schema["x-allowed"])
    for key, word in (("minimum", "min"), ("maximum", "max")):
        if key in schema:
            parts.append(f"{word} {schema[key]}")
    return "; ".join(parts)


def _default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    value = schema["default"]
    text = value if isinstance(value, str) else json.dumps(value)
    return f"`{text}`".replace("|", "\\|")


def _rows(root: dict[str, Any]) -> list[str]:
    out = []
    for path, schema in entries(root):
        desc = schema.get("description", "").replace("|", "\\|").replace("\n", " ")
        if path in ("defaults", "groups.<name>"):
            desc += " " + NODE_SETTINGS_NOTE
        out.append(f"| `{path}` | {_type(schema)} | {_allowed(schema)} | {_default(schema)} | {desc} |")
    return out


def render() -> str:
    """The reference page text: cluster-wide settings, then the node settings once."""
    out = _rows(SCHEMA)
    out.append("| `nodes[].<setting>` | | | | Any node setting below. |")
    out += ["", "## Node settings", "",
            "Allowed in `defaults`, in `groups.<name>` and in each entry of `nodes`.", "", _COLUMNS]
    out += _rows(NODE_SETTINGS)
    return HEADER + "\n".join(out) + "\n"
