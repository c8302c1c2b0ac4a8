"""Where the problems of one cluster file are collected, each located at the line where its value was written.

The loader fills a :class:`Context` while it builds the typed model; the checks of meaning
(:mod:`gpu_provision.spec.semantics`) add to it. Keeping it apart from both lets each import it without importing
the other.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path as FsPath
from typing import Any

from gpu_provision.errors import SpecProblem
from gpu_provision.spec.resolve import origin
from gpu_provision.spec.yamlsafe import Path, Positions, format_path


@dataclass
class Context:
    """What a check needs to locate a problem: the document, its positions and each node's provenance."""

    document: dict[str, Any]
    positions: Positions
    filename: str
    base_dir: FsPath
    provenance: dict[int, dict[Path, Path]] = field(default_factory=dict)
    problems: list[SpecProblem] = field(default_factory=list)
    mig_parted: dict[str, Any] | None = None
    #: Whether YAML files are composed by libyaml (:func:`gpu_provision.spec.yamlsafe.load_yaml`'s ``fast``).
    fast: bool = False
    #: Model parts already built, by kind and the identity of the mapping they were built from (see ``part``).
    parts: dict[tuple[Any, ...], tuple[Any, Any]] = field(default_factory=dict)
    #: Nodes whose every setting is the same object as an earlier node's, by index: that node's index. Building the
    #: earlier node found no problem, so a check of meaning that reads the settings alone needs no second run.
    copies: dict[int, int] = field(default_factory=dict)

    def part(self, kind: str, raw: Any, build: Callable[[Any], Any], *extra: Any) -> Any:
        """``build(raw)``, built once per mapping ``raw`` of the document (and ``extra`` values it also depends on).

        Inherited settings are shared, not copied (:func:`gpu_provision.spec.resolve.resolve_node`), so the 10,000
        nodes of one group hand the same mappings here and share one frozen part each. The entry holds ``raw``, so
        its id is not reused during the load.
        """
        key = (kind, id(raw), *extra)
        found = self.parts.get(key)
        if found is None:
            found = self.parts[key] = (raw, build(raw))
        return found[1]

    def add(self, path: Path, message: str, *, key: bool = False) -> None:
        """Record a problem at an absolute document path."""
        line, col = self.positions.of(path, key=key)
        self.problems.append(SpecProblem(self.filename, line, col, format_path(path), message))

    def add_node(self, index: int, rel: Path, message: str) -> None:
        """Record a problem at a node-relative path, located where the value was written."""
        self.add(origin(self.provenance.get(index, {}), index, rel), message)
