"""The GPU simulator's modules: imports run one way, no private names cross modules, each module stays small, and
every module is one the entry point needs and the node's bare python3 can import."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest
from simnode import SIM, SIM_MODULES

MAX_LINES = 400
#: What the simulator may import beyond the standard library and its own modules: the product's catalog reader,
#: shipped beside it as ``catalog.py`` (a checkout reads the product's own module instead).
CATALOG_READER = {"catalog", "gpu_provision"}


def sibling_names() -> set[str]:
    return {path.stem for path in SIM_MODULES}


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def imports(tree: ast.Module) -> list[tuple[str, list[str]]]:
    """Every import of ``tree`` (also those inside functions): the top-level module name and the names taken."""
    found: list[tuple[str, list[str]]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name.split(".")[0], []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module.split(".")[0], [alias.name for alias in node.names]))
    return found


def import_graph() -> dict[str, set[str]]:
    """Module -> the simulator modules it imports."""
    siblings = sibling_names()
    return {path.stem: {name for name, _ in imports(parse(path)) if name in siblings} for path in SIM_MODULES}


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a path that ends where it starts, else None."""
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        for target in sorted(graph[module]):
            found = visit(target, [*path, module])
            if found:
                return found
        done.add(module)
        return None

    for module in sorted(graph):
        found = visit(module, [])
        if found:
            return found
    return None


def test_the_cycle_finder_finds_a_circle_and_passes_a_chain() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_the_simulator_is_split_into_modules() -> None:
    assert SIM in SIM_MODULES
    assert len(SIM_MODULES) > 2


def test_no_import_circle_among_the_simulator_modules() -> None:
    graph = import_graph()
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_every_module_is_needed_by_the_entry_point() -> None:
    graph = import_graph()
    reached: set[str] = set()
    todo = [SIM.stem]
    while todo:
        module = todo.pop()
        if module not in reached:
            reached.add(module)
            todo.extend(graph[module])
    assert reached == sibling_names()


@pytest.mark.parametrize("path", SIM_MODULES, ids=lambda p: p.name)
def test_no_private_name_crosses_modules(path: Path) -> None:
    siblings = sibling_names()
    tree = parse(path)
    taken = [(module, name) for module, names in imports(tree) if module in siblings for name in names
             if name.startswith("_")]
    reached = [(node.value.id, node.attr) for node in ast.walk(tree)
               if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
               and node.value.id in siblings and node.attr.startswith("_")]
    assert taken + reached == []


@pytest.mark.parametrize("path", SIM_MODULES, ids=lambda p: p.name)
def test_each_module_stays_small(path: Path) -> None:
    assert len(path.read_text().splitlines()) <= MAX_LINES


@pytest.mark.parametrize("path", SIM_MODULES, ids=lambda p: p.name)
def test_modules_import_only_the_standard_library_siblings_and_the_catalog_reader(path: Path) -> None:
    """A rig node runs the simulator on its bare python3, with only the files shipped beside it."""
    allowed = sibling_names() | CATALOG_READER | set(sys.stdlib_module_names)
    assert {module for module, _ in imports(parse(path))} - allowed == set()
