"""Setting inheritance: node over group over defaults, remembering where each value came from.

Mappings merge key by key; any other value (lists included) replaces the inherited one. The provenance map lets a
problem found in a resolved node point at the line where the offending value was written.
"""

from __future__ import annotations

from typing import Any

from gpu_provision.spec.yamlsafe import Path

NODE_ONLY = ("name", "address", "group")


def _merge(into: dict[str, Any], layer: dict[str, Any], origin: Path, provenance: dict[Path, Path],
           rel: Path = ()) -> None:
    for key, value in layer.items():
        here = (*rel, key)
        if isinstance(value, dict) and isinstance(into.get(key), dict) and key not in ("layout", "mig-devices"):
            _merge(into[key], value, (*origin, key), provenance, here)
        else:
            into[key] = _copy(value)
            provenance[here] = (*origin, key)
            if isinstance(value, dict):
                _record(value, (*origin, key), provenance, here)


def _record(value: dict[str, Any], origin: Path, provenance: dict[Path, Path], rel: Path) -> None:
    for key, child in value.items():
        provenance[rel + (key,)] = origin + (key,)
        if isinstance(child, dict):
            _record(child, (*origin, key), provenance, (*rel, key))


def _copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def resolve_node(document: dict[str, Any], index: int) -> tuple[dict[str, Any], dict[Path, Path]]:
    """The settings of node ``index`` with inheritance applied, and where each setting came from.

    Provenance maps a path relative to the node (``("mig", "layout")``) to its absolute path in the document.
    """
    node = document["nodes"][index]
    resolved: dict[str, Any] = {}
    provenance: dict[Path, Path] = {}
    _merge(resolved, document.get("defaults") or {}, ("defaults",), provenance)
    group = node.get("group")
    groups = document.get("groups") or {}
    if isinstance(group, str) and group in groups:
        _merge(resolved, groups[group] or {}, ("groups", group), provenance)
    _merge(resolved, node, ("nodes", index), provenance)
    return resolved, provenance


def origin(provenance: dict[Path, Path], index: int, rel: Path) -> Path:
    """Absolute document path of a node-relative path (its nearest recorded ancestor, else the node itself)."""
    probe = rel
    while probe:
        if probe in provenance:
            return (*provenance[probe], *rel[len(probe):])
        probe = probe[:-1]
    return ("nodes", index, *rel)
