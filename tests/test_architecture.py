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


def test_no_stage_imports_from_the_rollout() -> None:
    """Stages are the deploy's steps; the rollout runs the deploy. What both need (the kernel guard) sits lower."""
    stages = PACKAGE / "stages"
    found = {module_name(p): sorted(t for t in imported(p, module_name(p))
                                    if t == "gpu_provision.rollout" or t.startswith("gpu_provision.rollout."))
             for p in sorted(stages.rglob("*.py"))}
    assert [p for p in stages.rglob("*.py")], "no stage found"
    assert {module: targets for module, targets in found.items() if targets} == {}


def shell_command_calls(source: str, module: str) -> list[str]:
    """Where ``source`` calls ``run_shell_command`` (``module:function`` per call; a name bound to it counts)."""
    tree = ast.parse(source)
    # ``run = connector.run_shell_command`` (or a tuple of such) makes ``run(...)`` a call of it.
    aliases = {"run_shell_command"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            target, value = node.targets[0], node.value
            pairs = zip(target.elts, value.elts) if isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                else ((target, value),)
            aliases.update(t.id for t, v in pairs if isinstance(t, ast.Name) and isinstance(v, ast.Attribute)
                           and v.attr == "run_shell_command")
    calls: list[str] = []

    def visit(node: ast.AST, function: str) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        if isinstance(node, ast.Call):
            func = node.func
            if (isinstance(func, ast.Attribute) and func.attr == "run_shell_command") or \
                    (isinstance(func, ast.Name) and func.id in aliases):
                calls.append(f"{module}:{function}")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(tree, "<module>")
    return calls


def test_one_host_command_helper() -> None:
    """Commands outside an operation's yield run through one helper (exit status, output tail, sudo, stdin, timeout),
    so the one call of a connector's ``run_shell_command`` outside pyinfra is that helper's; the command log that
    wraps each host's connector (counting commands, keeping the last failure) calls the connector it wraps."""
    calls = [call for path in sources() for call in shell_command_calls(path.read_text(), module_name(path))]
    assert sorted(calls) == ["gpu_provision.fleet:run_shell_command", "gpu_provision.operations.remote:run_on_host"]


def test_the_call_finder_sees_calls_and_bound_names() -> None:
    """The finder itself: a direct call, a call through a name bound to the method, and no mere reference."""
    sample = ("def a(host):\n    return host.run_shell_command('x')\n\n"
              "def b(host):\n    run, put = host.run_shell_command, host.put_file\n    return run('y')\n\n"
              "def c(host):\n    return host.run_shell_command\n")
    assert shell_command_calls(sample, "sample") == ["sample:a", "sample:b"]
