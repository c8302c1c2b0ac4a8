"""What a cluster file resolves to: inherited settings, and values derived once the file is known to be valid.

Inheritance (:func:`resolve_node`) runs before the checks of meaning, which read resolved nodes: node over group over
defaults; mappings merge key by key, any other value (lists included) replaces the inherited one. The provenance map
lets a problem found in a resolved node point at the line where the offending value was written.

Derivation (:func:`derive`) runs after every check has passed, so it never meets a problem to report: it stores each
GPU's planned MIG layout (a :class:`GpuLayout`: MIG mode and placements on the model's placement table) beside the
counts the file wrote, and fills in the device plugin's MIG strategy when the file leaves it out.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from gpu_provision.node.mig.model import GpuLayout
from gpu_provision.spec import catalog, mig
from gpu_provision.spec.model import Cluster, MigLayout, MigStrategy, Node
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


def mig_strategy_for(layouts: dict[int, MigLayout]) -> MigStrategy:
    """``single`` when every GPU has MIG on with the same layout of one profile, else ``mixed``."""
    shapes = {tuple(sorted(lay.profiles.items())) for lay in layouts.values() if lay.enabled}
    single = len(shapes) == 1 and len(next(iter(shapes))) == 1 and all(lay.enabled for lay in layouts.values())
    return "single" if single else "mixed"


def _planned(layout: MigLayout, model: catalog.GpuModel | None) -> GpuLayout:
    """The GPU layout ``layout`` asks for. The checks have passed: a layout with MIG on has a model with a table."""
    if not layout.enabled:
        return GpuLayout(False)
    assert model is not None and model.mig is not None
    return GpuLayout(True, mig.plan(model.mig, layout.profiles))


def _derive_node(node: Node) -> Node:
    if not node.mig.layouts:
        return node
    model = catalog.model(node.gpus.model) if node.gpus.model else None
    layouts = {gpu: replace(layout, planned=_planned(layout, model))
               for gpu, layout in sorted(node.mig.layouts.items())}
    node = replace(node, mig=replace(node.mig, layouts=layouts))
    if node.mig.enabled and node.device_plugin.mig_strategy == "none":
        node = replace(node, device_plugin=replace(node.device_plugin, mig_strategy=mig_strategy_for(layouts)))
    return node


def derive(cluster: Cluster) -> Cluster:
    """The valid ``cluster`` with derived values filled in: planned MIG layouts and the device plugin's MIG strategy.

    A strategy of ``none`` on a node with MIG on can only be the default here (the checks refuse it when written),
    so it is replaced by the one the layouts allow.
    """
    return replace(cluster, nodes=tuple(_derive_node(node) for node in cluster.nodes))
