"""The import direction docs/architecture.md states holds: no module imports a module of a higher layer.

The layer table is read from the document itself, so the document and this test cannot drift apart. Every import
counts, including those inside functions (a late import hides a cycle, it does not remove it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gpu_provision"
DOC = ROOT / "docs" / "architecture.md"


def layers() -> dict[str, int]:
    """Module prefix -> layer, from the document's table rows ``| N | `mod`, `mod` | ... |``."""
    out: dict[str, int] = {}
    for line in DOC.read_text().splitlines():
        match = re.match(r"^\|\s*(\d+)\s*\|([^|]*)\|", line)
        if match:
            for name in re.findall(r"`([\w.]+)`", match.group(2)):
                out[name] = int(match.group(1))
    return out


def layer_of(module: str, table: dict[str, int]) -> int | None:
    """The layer of the longest prefix of ``module`` named in the table."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in table:
            return table[prefix]
    return None


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path, module: str) -> set[str]:
    """Every ``gpu_provision`` module ``path`` imports, absolute or relative, at any depth."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "gpu_provision" or name.startswith("gpu_provision.")}


def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "vendor" not in p.parts and "scaffold" not in p.parts)


def test_document_names_layers() -> None:
    table = layers()
    assert table["gpu_provision.node"] == 0
    assert table["gpu_provision.commands"] > table["gpu_provision.stages"] > table["gpu_provision.spec"]


def test_every_module_has_a_layer() -> None:
    table = layers()
    missing = [module_name(p) for p in sources()
               if module_name(p) != "gpu_provision" and layer_of(module_name(p), table) is None]
    assert missing == [], f"modules docs/architecture.md does not place in a layer: {missing}"


@pytest.mark.parametrize("path", sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down(path: Path) -> None:
    table = layers()
    module = module_name(path)
    own = layer_of(module, table)
    if own is None:
        return
    upward = []
    for target in sorted(imported(path, module)):
        theirs = layer_of(target, table)
        if theirs is not None and theirs > own:
            upward.append(f"{target} (layer {theirs})")
    assert upward == [], f"{module} (layer {own}) imports a higher layer: {', '.join(upward)}"


def test_the_checker_sees_a_violation() -> None:
    """The checker itself: a module of layer 0 importing one of layer 2 is reported."""
    table = {"gpu_provision.node": 0, "gpu_provision.spec": 2}
    assert layer_of("gpu_provision.node.mig.model", table) == 0
    assert layer_of("gpu_provision.spec.catalog", table) == 2
    assert layer_of("gpu_provision.elsewhere", table) is None
