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
from gpu_provision.spec.model import Cluster, DevicePlugin, Mig, MigLayout, MigStrategy, Node
from gpu_provision.spec.yamlsafe import Path

NODE_ONLY = ("name", "address", "group")


def _merge(into: dict[str, Any], layer: dict[str, Any], origin: Path, provenance: dict[Path, Path],
           rel: Path = ()) -> None:
    # Values are shared with the document, not copied: nothing changes a resolved node or the document, and a
    # mapping two layers both give is copied (one level) before the later layer is merged into it. Sharing also
    # lets the loader build the model's parts once per inherited mapping (10,000 nodes of one group share them).
    for key, value in layer.items():
        here = (*rel, key)
        current = into.get(key)
        if isinstance(value, dict) and isinstance(current, dict) and key not in ("layout", "mig-devices"):
            current = into[key] = dict(current)
            _merge(current, value, (*origin, key), provenance, here)
        else:
            into[key] = value
            provenance[here] = (*origin, key)
            if isinstance(value, dict):
                _record(value, (*origin, key), provenance, here)


def _record(value: dict[str, Any], origin: Path, provenance: dict[Path, Path], rel: Path) -> None:
    for key, child in value.items():
        provenance[rel + (key,)] = origin + (key,)
        if isinstance(child, dict):
            _record(child, (*origin, key), provenance, (*rel, key))


Inherited = dict[Any, tuple[dict[str, Any], dict[Path, Path]]]


def resolve_node(document: dict[str, Any], index: int,
                 inherited: Inherited | None = None) -> tuple[dict[str, Any], dict[Path, Path]]:
    """The settings of node ``index`` with inheritance applied, and where each setting came from.

    Provenance maps a path relative to the node (``("mig", "layout")``) to its absolute path in the document.
    ``inherited``, when given, keeps what the defaults and each group resolve to, so that a file's nodes merge
    them once per group rather than once per node.
    """
    node = document["nodes"][index]
    group = node.get("group")
    groups = document.get("groups") or {}
    layer = group if isinstance(group, str) and group in groups else None
    base = None if inherited is None else inherited.get(layer)
    if base is None:
        base = ({}, {})
        _merge(base[0], document.get("defaults") or {}, ("defaults",), base[1])
        if layer is not None:
            _merge(base[0], groups[layer] or {}, ("groups", layer), base[1])
        if inherited is not None:
            inherited[layer] = base
    resolved, provenance = dict(base[0]), dict(base[1])
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


class _Plans:
    """Layouts planned during one :func:`derive`: each distinct layout once, and each layout object given its plan
    once (a node-wide layout is one object shared by the node's GPUs, an inherited one by every node of its group)."""

    def __init__(self) -> None:
        self.plans: dict[tuple[Any, ...], GpuLayout] = {}
        #: id of a layout without its plan -> (that layout, the layout with its plan); holding the first keeps the id.
        self.layouts: dict[int, tuple[MigLayout, MigLayout]] = {}
        #: ids of a node's MIG settings and device plugin -> (that node, its derived MIG settings and device plugin).
        self.nodes: dict[tuple[int, int], tuple[Node, Mig, DevicePlugin]] = {}

    def planned(self, layout: MigLayout, model: catalog.GpuModel | None) -> MigLayout:
        done = self.layouts.get(id(layout))
        if done is None:
            key = (model.key if model else None, layout.enabled, tuple(layout.profiles.items()))
            plan = self.plans.get(key)
            if plan is None:
                plan = self.plans[key] = _planned(layout, model)
            done = self.layouts[id(layout)] = (layout, replace(layout, planned=plan))
        return done[1]


    def derived(self, node: Node) -> tuple[Mig, DevicePlugin]:
        """The node's MIG settings with plans and its device plugin with the strategy they allow, once per pair of
        objects (nodes of one group share both)."""
        key = (id(node.mig), id(node.device_plugin))
        done = self.nodes.get(key)
        if done is None:
            model = catalog.model(node.gpus.model) if node.gpus.model else None
            layouts = {gpu: self.planned(layout, model) for gpu, layout in sorted(node.mig.layouts.items())}
            mig = replace(node.mig, layouts=layouts)
            plugin = node.device_plugin
            if mig.enabled and plugin.mig_strategy == "none":
                plugin = replace(plugin, mig_strategy=mig_strategy_for(layouts))
            done = self.nodes[key] = (node, mig, plugin)
        return done[1], done[2]


def _derive_node(node: Node, plans: _Plans) -> Node:
    if not node.mig.layouts:
        return node
    mig, plugin = plans.derived(node)
    return node.changed(mig=mig, device_plugin=plugin)


def derive(cluster: Cluster) -> Cluster:
    """The valid ``cluster`` with derived values filled in: planned MIG layouts and the device plugin's MIG strategy.

    A strategy of ``none`` on a node with MIG on can only be the default here (the checks refuse it when written),
    so it is replaced by the one the layouts allow.
    """
    plans = _Plans()
    return replace(cluster, nodes=tuple(_derive_node(node, plans) for node in cluster.nodes))
