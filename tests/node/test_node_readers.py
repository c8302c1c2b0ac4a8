"""The node package reads each nvidia-smi output one way: one module defines the MIG table and bus id readers."""

from __future__ import annotations

import ast
from pathlib import Path

from gpu_provision.node.mig import nvsmi

NODE = Path(nvsmi.__file__).resolve().parents[1]
READERS = {"parse_lgi", "parse_lci", "parse_lgip", "parse_lgipp", "sysfs_address"}


def test_mig_table_readers_are_defined_once() -> None:
    """No node module but :mod:`gpu_provision.node.mig.nvsmi` defines a reader of the MIG tables or bus ids."""
    defined: dict[str, list[str]] = {}
    for path in sorted(NODE.rglob("*.py")):
        if "vendor" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name in READERS:
                defined.setdefault(node.name, []).append(path.relative_to(NODE).as_posix())
    assert defined == {name: ["mig/nvsmi.py"] for name in READERS}


def test_bus_id_as_sysfs_spells_it() -> None:
    assert nvsmi.sysfs_address("00000000:41:00.0") == "0000:41:00.0"
    assert nvsmi.sysfs_address("0000000A:C1:00.0") == "000a:c1:00.0"
