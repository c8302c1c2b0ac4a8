"""Data-driven operation tests: each ``cases/<operation>/*.yaml`` gives node state in and the commands out."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakehost import FakeHost, run_op

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, sha256
from gpu_provision.operations import accounts, files, packages, repos, services
from gpu_provision.spec.model import Repository

CASES = sorted((Path(__file__).parent / "cases").glob("*/*.yaml"))

OPERATIONS = {
    "packages.wants": packages.wants,
    "files.wants": files.wants,
    "services.wants": services.wants,
    "accounts.wants": accounts.wants,
    "repos.apt_repository": repos.apt_repository,
    "repos.proxy": repos.proxy,
}


def _tuples(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: tuple(v) if k in keys else v for k, v in data.items()}


def _arguments(op: str, raw: dict[str, Any]) -> dict[str, Any]:
    args = dict(raw)
    if op == "packages.wants":
        args["wants"] = [PackageWant(**w) for w in raw["wants"]]
    elif op == "files.wants":
        args["wants"] = [FileWant(**w) for w in raw["wants"]]
    elif op == "services.wants":
        args["wants"] = [UnitWant(**_tuples(w, "restart_on")) for w in raw["wants"]]
    elif op == "accounts.wants":
        args["wants"] = [GroupWant(**_tuples(w, "members")) for w in raw["wants"]]
    elif op == "repos.apt_repository":
        args["repo"] = Repository(**_tuples(raw["repo"], "components"))
        args["pins"] = [repos.Pin(tuple(p["packages"]), p["version"], p.get("priority", 1001))
                        for p in raw.get("pins", [])]
    return args


def _state(raw: dict[str, Any]) -> dict[str, Any]:
    """The probe answer of a case; a file given as ``text`` gets the SHA-256 and content the probe would report."""
    out = dict(raw)
    out["files"] = {}
    for path, entry in raw.get("files", {}).items():
        entry = {"exists": True, "type": "file", "mode": "0644", "owner": "root", "group": "root", **entry}
        if "text" in entry:
            text = entry.pop("text")
            entry.update(sha256=sha256(text), content=text)
        out["files"][path] = entry
    return out


@pytest.mark.parametrize("path", CASES, ids=[f"{p.parent.name}/{p.stem}" for p in CASES])
def test_case(path: Path) -> None:
    case = yaml.safe_load(path.read_text())
    host = FakeHost(_state(case["state"]), executing=case.get("executing", False))
    files.record_changed(host, case.get("changed_before", []))
    commands = run_op(OPERATIONS[case["op"]], host, **_arguments(case["op"], case["args"]))
    # The key-fetching program is tested on its own (test_repos.py); cases name it FETCH_KEY.
    commands = [c.replace(shlex.quote(repos._FETCH_KEY), "FETCH_KEY") if isinstance(c, str) else c
                for c in commands]
    assert commands == case["commands"]
    if not case["commands"]:
        assert host.noops and case["noop"] in host.noops[-1]
    if "changed_after" in case:
        assert files.changed_paths(host) == set(case["changed_after"])
    # Every operation reads the node through one probe, however many items it compares.
    assert host.probes == 1
