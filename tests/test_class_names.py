"""No class name is defined in two modules of the product package: one name, one concept."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "gpu_provision"
#: The test rig is leaving the package for its own distribution.
LEAVING = PACKAGE / "rig"


def test_no_class_name_is_defined_in_two_modules() -> None:
    where: dict[str, set[str]] = defaultdict(set)
    for module in sorted(PACKAGE.rglob("*.py")):
        if LEAVING in module.parents:
            continue
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if isinstance(node, ast.ClassDef):
                where[node.name].add(str(module.relative_to(PACKAGE.parent)))
    twice = {name: sorted(modules) for name, modules in where.items() if len(modules) > 1}
    assert not twice, f"class names defined in more than one module: {twice}"
