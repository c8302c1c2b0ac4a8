"""YAML loading that keeps line and column of every value and survives hostile input.

PyYAML's composer builds a node graph in which aliases are shared, not copied; converting that graph ourselves lets
us count every value an alias would expand to (billion-laughs documents stop at a budget), bound the nesting depth,
reject duplicate keys, and remember where each value and key stands in the file.

The graph comes from libyaml's composer (PyYAML's C extension, :data:`FAST_LOADER`) when the caller asks for
``fast`` and it is installed: on a 10,000-node file it composes in about half the time of PyYAML's pure-Python one. Both
give the same line, column and index for every node once a leading byte-order mark is dropped (PyYAML counts it in
its index, libyaml does not), and a plain scalar's style reads ``''`` from one and ``None`` from the other. They
differ in the wording and sometimes the position of syntax errors, so a document libyaml refuses is composed again
by PyYAML, whose message is the one reported; in the position of an empty value at the very end of a file; and in
what they accept: libyaml takes a tab as separation where PyYAML refuses it, and drops a byte-order mark after the
start where PyYAML keeps it as text, so a document with either goes to PyYAML alone. :func:`gpu_provision.spec.loader.load_cluster` goes further and loads
a file that has any problem again without ``fast``, so every located message is PyYAML's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

import yaml

from gpu_provision.errors import SpecError, SpecProblem

MAX_BYTES = 2 * 1024 * 1024
MAX_VALUES = 200_000
MAX_DEPTH = 48
_STR = "tag:yaml.org,2002:str"
_MAP = yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG
_SEQ = yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG


def _remembering(loader: type[Any]) -> type[Any]:
    """``loader`` resolving each distinct plain scalar's tag once per document.

    The composer asks the resolver for every scalar's tag (a handful of regular expressions, in Python), and a
    cluster file repeats the same keys and values on every node. A safe loader has no path resolvers, so the tag
    depends on the text and its implicit flags alone.
    """

    class Remembering(loader):  # type: ignore[misc, valid-type]
        def __init__(self, stream: Any) -> None:
            super().__init__(stream)
            self.tags: dict[tuple[Any, Any], str] = {}

        def resolve(self, kind: Any, value: Any, implicit: Any) -> Any:
            # No path resolvers: a mapping's or list's tag is the default one (what the base class returns).
            if kind is yaml.MappingNode:
                return _MAP
            if kind is yaml.SequenceNode:
                return _SEQ
            key = (value, implicit)
            tag = self.tags.get(key)
            if tag is None:
                tag = self.tags[key] = super().resolve(kind, value, implicit)
            return tag

    return Remembering


#: libyaml's composer, None where PyYAML was built without it.
FAST_LOADER: type[yaml.SafeLoader] | None = (_remembering(yaml.CSafeLoader) if hasattr(yaml, "CSafeLoader")
                                             else None)

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
    #: Where each scalar's text stands in :attr:`source` (start and end index, quotes included) and whether it was
    #: written plain (unquoted). The text itself is cut out only when a message asks for it.
    scalars: dict[Path, tuple[int, int, bool]] = field(default_factory=dict)
    #: The document's text.
    source: str = ""

    def written(self, path: Path) -> str | None:
        """The scalar at ``path`` exactly as the file writes it, None for a mapping, a list or a missing path."""
        found = self.scalars.get(tuple(path))
        return self.source[found[0]:found[1]].rstrip() if found else None

    def plain(self, path: Path) -> bool:
        """Whether the scalar at ``path`` was written without quotes, the form YAML 1.1 may read as a non-string."""
        found = self.scalars.get(tuple(path))
        return bool(found and found[2])

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
    """Values converted so far."""

    def __init__(self) -> None:
        self.values = 0


def read_bounded(path: str | os.PathLike[str], what: str) -> bytes:
    """Read a file the user named, refusing anything but a regular file of at most :data:`MAX_BYTES`.

    ``/dev/zero``, a FIFO or a huge file would otherwise be read whole (or block forever) before any check ran:
    the file is opened without blocking, checked with ``fstat`` and read for at most ``MAX_BYTES + 1`` bytes.
    Raises :class:`SpecError` (located at the file's start) for a file that is not regular or is too large, and
    ``OSError`` when it cannot be opened at all.
    """
    filename = str(path)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a device, FIFO or socket"
            raise _error(filename, 1, 1, (), f"{what} is {kind}, not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_BYTES:
            chunk = os.read(fd, MAX_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > MAX_BYTES:
        raise _error(filename, 1, 1, (), f"{what} is larger than {MAX_BYTES // 1024} KiB")
    return b"".join(chunks)


def load_yaml(text: str | bytes, filename: str, *, fast: bool = False) -> tuple[Any, Positions]:
    """Parse one YAML document into plain Python values and their positions.

    Raises :class:`SpecError` with a located message for invalid YAML, duplicate keys, documents that expand past
    the value budget, nesting deeper than :data:`MAX_DEPTH`, or input that is not UTF-8 text. ``fast`` composes
    with libyaml where installed (same values and positions; syntax errors still worded and placed by PyYAML).
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

    # PyYAML skips a leading byte-order mark but counts it in its index, libyaml does not: without it both agree, and
    # the index is where a scalar's text is read from.
    text = text[1:] if text.startswith("\ufeff") else text
    # libyaml accepts a tab where PyYAML refuses it ("a:<TAB>b") and drops a byte-order mark after the start that
    # PyYAML keeps as text: such files go to PyYAML alone, so both composers accept the same files with the same values.
    if fast and FAST_LOADER is not None and "\t" not in text and "\ufeff" not in text:
        try:
            return _document(FAST_LOADER, text, filename)
        except yaml.YAMLError:
            pass  # PyYAML composes it again below, for its message and position
    return _document(yaml.SafeLoader, text, filename)


def _document(loader_class: type[yaml.SafeLoader], text: str, filename: str) -> tuple[Any, Positions]:
    """Compose ``text`` with ``loader_class`` and convert it. PyYAML's YAML errors become located
    :class:`SpecError`; libyaml's pass through as they are, for PyYAML to compose the text again."""
    exact = loader_class is yaml.SafeLoader
    loader = None
    try:
        loader = loader_class(text)
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        if not exact:
            raise
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        raise _error(filename, line, col, (), f"invalid YAML: {exc.problem or exc.context}") from None
    except yaml.YAMLError as exc:
        if not exact:
            raise
        raise _error(filename, 1, 1, (), f"invalid YAML: {exc}") from None
    except RecursionError:
        raise _error(filename, 1, 1, (), f"nesting is deeper than {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()

    positions = Positions(source=text)
    if root is None:
        return None, positions
    value = _convert(root, (), loader, positions, _Budget(), filename, 0)
    return value, positions


def _error(filename: str, line: int, col: int, path: Path, message: str) -> SpecError:
    return SpecError([SpecProblem(filename, line, col, format_path(path), message)])


_YAML = "tag:yaml.org,2002:"
#: Tags a cluster file may carry, written or resolved: ``!!binary``, ``!!set``, ``!!python/...`` and custom tags are not.
_TAGS = frozenset(_YAML + name for name in ("str", "int", "float", "bool", "null", "timestamp", "map", "seq"))
_MERGE = _YAML + "merge"


def _short(tag: str) -> str:
    """A tag as the file spells it: ``!!binary`` rather than ``tag:yaml.org,2002:binary``."""
    return "!!" + tag[len(_YAML):] if tag.startswith(_YAML) else tag


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
    if path not in positions.values:
        positions.values[path] = here
    tag = node.tag
    if tag not in _TAGS:
        raise _error(filename, *here, path, f"YAML tag '{_short(tag)}' is not supported here "
                                            "(allowed: text, numbers, booleans, null, dates, lists and mappings)")

    if node.__class__ is yaml.ScalarNode:
        if path not in positions.scalars:  # plain: style None (PyYAML) or '' (libyaml)
            positions.scalars[path] = (mark.index, node.end_mark.index, not node.style)
        if tag == _STR:  # what the constructor would return, without its dispatch for every text value
            return node.value
        try:
            return loader.construct_object(node, deep=True)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            raise _error(filename, *here, path, f"invalid value: {exc}") from None
    if node.__class__ is yaml.SequenceNode:
        return [_convert(item, (*path, n), loader, positions, budget, filename, depth + 1)
                for n, item in enumerate(node.value)]
    if node.__class__ is yaml.MappingNode:
        return _mapping(node, path, loader, positions, budget, filename, depth)
    raise _error(filename, *here, path, f"unsupported YAML node {type(node).__name__}")


def _mapping(node: yaml.MappingNode, path: Path, loader: yaml.SafeLoader, positions: Positions, budget: _Budget,
             filename: str, depth: int) -> dict[str, Any]:
    """Convert a mapping; merge keys (``<<: *base``) fill in only the keys the mapping does not give itself.

    That is YAML's merge semantics: explicit keys win over merged ones, and of several merged mappings the earlier
    wins. Explicit keys given twice are still refused.
    """
    out: dict[str, Any] = {}
    merges: list[yaml.Node] = []
    for key_node, value_node in node.value:
        key_mark = key_node.start_mark
        key_here = (key_mark.line + 1, key_mark.column + 1)
        if not isinstance(key_node, yaml.ScalarNode):
            raise _error(filename, *key_here, path, "mapping keys must be plain scalars")
        if key_node.tag == _MERGE:
            merges.append(value_node)
            continue
        key = _key(key_node, path, loader, filename, key_here)
        child = (*path, key)
        if key in out:
            first = positions.keys.get(child, (0, 0))
            raise _error(filename, *key_here, child, f"duplicate key '{key}' (first given on line {first[0]})")
        positions.keys.setdefault(child, key_here)
        out[key] = _convert(value_node, child, loader, positions, budget, filename, depth + 1)
    for merge in merges:
        sources = merge.value if isinstance(merge, yaml.SequenceNode) else [merge]
        for source in sources:
            mark = source.start_mark
            if not isinstance(source, yaml.MappingNode):
                raise _error(filename, mark.line + 1, mark.column + 1, path,
                             "invalid merge key: '<<' takes a mapping or a list of mappings")
            for key, value in _mapping(source, path, loader, positions, budget, filename, depth + 1).items():
                if key not in out:
                    out[key] = value
    return out


def _key(node: yaml.ScalarNode, path: Path, loader: yaml.SafeLoader, filename: str, here: tuple[int, int]) -> str:
    """A mapping key as text; a key YAML cannot make a value of (a 5,000-digit number, a bad date) is located."""
    if node.tag not in _TAGS:
        raise _error(filename, *here, path, f"YAML tag '{_short(node.tag)}' is not supported on a key "
                                            "(allowed: text, numbers, booleans, null and dates)")
    if node.tag == _STR:  # most keys: the text itself, as the constructor would return it
        return node.value
    try:
        key = loader.construct_object(node)
        return key if isinstance(key, str) else str(key)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        raise _error(filename, *here, path, f"invalid key: {exc}") from None
