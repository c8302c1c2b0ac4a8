"""YAML loading that keeps line and column of every value and survives hostile input.

PyYAML's composer builds a node graph in which aliases are shared, not copied; converting that graph ourselves lets
us count every value an alias would expand to (billion-laughs documents stop at a budget), bound the nesting depth,
reject duplicate keys, and remember where each value and key stands in the file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_provision.errors import SpecError, SpecProblem

MAX_BYTES = 2 * 1024 * 1024
MAX_VALUES = 200_000
MAX_DEPTH = 48

Path = tuple[str | int, ...]


def format_path(path: Path) -> str:
    """``("nodes", 0, "mig")`` -> ``$.nodes[0].mig``."""
    out = "$"
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else f".{part}"
    return out


@dataclass
class Positions:
    """Where each value (and each mapping key) of a document stands: 1-based line and column.

    For each scalar it also keeps the text as written, so messages can quote ``012`` or ``no`` rather than the
    ``10`` or ``False`` YAML 1.1 made of them.
    """

    values: dict[Path, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path, tuple[int, int]] = field(default_factory=dict)
    #: Scalar text as it stands in the file (quotes included) and whether it was written plain (unquoted).
    scalars: dict[Path, tuple[str, bool]] = field(default_factory=dict)

    def written(self, path: Path) -> str | None:
        """The scalar at ``path`` exactly as the file writes it, None for a mapping, a list or a missing path."""
        found = self.scalars.get(tuple(path))
        return found[0] if found else None

    def plain(self, path: Path) -> bool:
        """Whether the scalar at ``path`` was written without quotes, the form YAML 1.1 may read as a non-string."""
        found = self.scalars.get(tuple(path))
        return bool(found and found[1])

    def of(self, path: Path, *, key: bool = False) -> tuple[int, int]:
        """Position of ``path``, or of its nearest ancestor that has one."""
        table = self.keys if key else self.values
        probe = tuple(path)
        while probe:
            # A block mapping or list starts on the line after its key; the key's line is where a reader looks.
            if not key and probe in self.values and probe in self.keys and self.values[probe][0] != self.keys[probe][0]:
                return self.keys[probe]
            if probe in table:
                return table[probe]
            if not key and probe in self.keys:
                return self.keys[probe]
            probe = probe[:-1]
        return self.values.get((), (1, 1))


class _Budget:
    """Values converted so far, and the text they are read from (for quoting scalars as written)."""

    def __init__(self, source: str) -> None:
        self.values = 0
        self.source = source


def load_yaml(text: str | bytes, filename: str) -> tuple[Any, Positions]:
    """Parse one YAML document into plain Python values and their positions.

    Raises :class:`SpecError` with a located message for invalid YAML, duplicate keys, documents that expand past
    the value budget, nesting deeper than :data:`MAX_DEPTH`, or input that is not UTF-8 text.
    """
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise _error(filename, 1, 1, (), f"file is larger than {MAX_BYTES // 1024} KiB")
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _error(filename, 1, 1, (), f"file is not UTF-8 text (byte {exc.start})") from None
    if len(text) > MAX_BYTES:
        raise _error(filename, 1, 1, (), f"file is larger than {MAX_BYTES // 1024} KiB")
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise _error(filename, line, 1, (), "file contains NUL bytes; it is not a YAML text file")

    loader = None
    try:
        loader = yaml.SafeLoader(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise _error(filename, line, col, (), f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        raise _error(filename, 1, 1, (), f"invalid YAML: {exc}") from None
    except RecursionError:
        raise _error(filename, 1, 1, (), f"nesting is deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()

    positions = Positions()
    if root is None:
        return None, positions
    value = _convert(root, (), loader, positions, _Budget(text), filename, 0)
    return value, positions


def _error(filename: str, line: int, col: int, path: Path, message: str) -> SpecError:
    return SpecError([SpecProblem(filename, line, col, format_path(path), message)])


def _convert(node: yaml.Node, path: Path, loader: yaml.SafeLoader, positions: Positions, budget: _Budget,
             filename: str, depth: int) -> Any:
    mark = node.start_mark
    here = (mark.line + 1, mark.column + 1)
    budget.values += 1
    if budget.values > MAX_VALUES:
        raise _error(filename, *here, path,
                     f"document expands to more than {MAX_VALUES} values (aliases are counted each time they are used)")
    if depth > MAX_DEPTH:
        raise _error(filename, *here, path, f"nesting is deeper than {MAX_DEPTH} levels")
    positions.values.setdefault(path, here)

    if isinstance(node, yaml.ScalarNode):
        if path not in positions.scalars:
            written = budget.source[mark.index:node.end_mark.index]
            positions.scalars[path] = (written.rstrip(), node.style is None)
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise _error(filename, *here, path, f"invalid value: {exc}") from None
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, n), loader, positions, budget, filename, depth + 1)
                for n, item in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        try:
            loader.flatten_mapping(node)
        except yaml.YAMLError as exc:
            raise _error(filename, *here, path, f"invalid merge key: {exc}") from None
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key_mark = key_node.start_mark
            key_here = (key_mark.line + 1, key_mark.column + 1)
            if not isinstance(key_node, yaml.ScalarNode):
                raise _error(filename, *key_here, path, "mapping keys must be plain scalars")
            key = loader.construct_object(key_node)
            key = key if isinstance(key, str) else str(key)
            child = (*path, key)
            if key in out:
                first = positions.keys.get(child, (0, 0))
                raise _error(filename, *key_here, child, f"duplicate key '{key}' (first given on line {first[0]})")
            positions.keys[child] = key_here
            out[key] = _convert(value_node, child, loader, positions, budget, filename, depth + 1)
        return out
    raise _error(filename, *here, path, f"unsupported YAML node {type(node).__name__}")
