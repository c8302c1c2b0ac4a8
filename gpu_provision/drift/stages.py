"""Which stage modules a drift check compares, and the small protocol they follow.

A stage is any object (normally a module ``gpu_provision.stages.<name>``) with ``request(node, cluster)`` and
``wants(node, cluster, state)``, and optionally ``extra_differences(node, cluster, state)``. The ordered list comes
from ``gpu_provision.stages.pipeline`` (its ``STAGES``); without a pipeline every module of
:mod:`gpu_provision.stages` that has both functions is used, in name order.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from gpu_provision.desired import Difference, Want
from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import Cluster, Node
from gpu_provision.state import NodeStateData, Request

PIPELINE_MODULE = "gpu_provision.stages.pipeline"
STAGES_PACKAGE = "gpu_provision.stages"


@runtime_checkable
class Stage(Protocol):
    """What the drift engine needs from a stage."""

    def request(self, node: Node, cluster: Cluster) -> Request:
        """What the probe must read for this stage on ``node``."""
        ...

    def wants(self, node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
        """The generic wants (packages, files, units, groups) of this stage on ``node``."""
        ...


def stage_name(stage: Any) -> str:
    """The name a stage's differences are reported under: its ``NAME``, else its module's last name part."""
    name = getattr(stage, "NAME", None) or getattr(stage, "name", None)
    if isinstance(name, str) and name:
        return name
    return str(getattr(stage, "__name__", type(stage).__name__)).rsplit(".", 1)[-1]


def extra_differences(stage: Any, node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """The stage's own differences (state that is not a generic want), or none if it has no such function."""
    func = getattr(stage, "extra_differences", None)
    return list(func(node, cluster, state)) if func else []


def _is_stage(obj: Any) -> bool:
    return callable(getattr(obj, "request", None)) and callable(getattr(obj, "wants", None))


def _resolve(entry: Any) -> Any:
    """A pipeline entry as a stage object: a module, a dotted module name, or anything carrying one."""
    if isinstance(entry, str):
        entry = importlib.import_module(entry if "." in entry else f"{STAGES_PACKAGE}.{entry}")
    for attr in ("module", "stage"):
        inner = getattr(entry, attr, None)
        if not _is_stage(entry) and inner is not None:
            entry = _resolve(inner)
    return entry


def _from_pipeline() -> list[Any] | None:
    try:
        pipeline = importlib.import_module(PIPELINE_MODULE)
    except ModuleNotFoundError as exc:
        if exc.name != PIPELINE_MODULE:
            raise
        return None
    entries = getattr(pipeline, "STAGES", None)
    if entries is None:
        return None
    return [_resolve(e) for e in entries]


def _discovered() -> list[ModuleType]:
    package = importlib.import_module(STAGES_PACKAGE)
    out: list[ModuleType] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name == "pipeline" or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{STAGES_PACKAGE}.{info.name}")
        if _is_stage(module):
            out.append(module)
    return out


def load_stages(names: Sequence[str] | None = None) -> list[Any]:
    """The stages to compare: ``names`` (stage names of the pipeline, or dotted module names) or all of them.

    Raises GpuProvisionError for a name that is not a stage.
    """
    available = _from_pipeline()
    if available is None:
        available = _discovered()
    available = [s for s in available if _is_stage(s)]
    if not names:
        return available
    by_name = {stage_name(s): s for s in available}
    chosen = []
    for name in names:
        if name in by_name:
            chosen.append(by_name[name])
            continue
        try:
            stage = _resolve(name) if "." in name else None
        except ImportError as exc:
            raise GpuProvisionError(f"stage {name!r}: {exc}") from exc
        if stage is None or not _is_stage(stage):
            known = ", ".join(sorted(by_name)) or "none"
            raise GpuProvisionError(f"no stage called {name!r} (stages: {known})")
        chosen.append(stage)
    return chosen


def names_of(stages: Iterable[Any]) -> list[str]:
    """Stage names, in order."""
    return [stage_name(s) for s in stages]
