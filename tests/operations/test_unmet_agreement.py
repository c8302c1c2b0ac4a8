"""Drift and the operations ask one question per want, ``unmet(state)``: for every case below, drift reports a
difference exactly when the want's planner yields commands (and none when it would log a noop)."""

from __future__ import annotations

import pytest

from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant, differences, sha256
from gpu_provision.operations import accounts, files, packages, services
from gpu_provision.state import NodeStateData


def _pkg(manager: str, version: str | None, held: bool = False) -> NodeStateData:
    entry = {} if version is None else {"nvidia-driver": {"version": version, "held": held}}
    return NodeStateData({"packages": {"manager": manager, "packages": entry}})


PACKAGES = [
    (PackageWant("nvidia-driver", "580.95.05", held=True), _pkg(manager, version, held), unmet)
    for manager in ("apt", "dnf")
    for version, held, unmet in [
        (None, False, True),
        ("580.95.05-1", True, False),
        ("580.95.05-1", False, True),
        ("3:580.95.05-1.el9", True, False),
        ("580.126.09-1", True, True),
        ("580.159.04-0ubuntu1", True, True),
    ]
] + [
    (PackageWant("nvidia-driver", "580.*"), _pkg("apt", "580.126.09-1"), False),
    (PackageWant("nvidia-driver", "580.*"), _pkg("dnf", "570.195.03-1"), True),
    (PackageWant("nvidia-driver"), _pkg("apt", "1:580.95.05-0ubuntu1"), False),
    (PackageWant("nvidia-driver", present=False), _pkg("apt", "580.95.05-1"), True),
    (PackageWant("nvidia-driver", present=False), _pkg("dnf", None), False),
    (PackageWant("nvidia-driver", held=True), _pkg("dnf", "580.95.05-1", held=True), False),
]


@pytest.mark.parametrize(("want", "state", "unmet"), PACKAGES)
def test_packages(want: PackageWant, state: NodeStateData, unmet: bool) -> None:
    assert bool(differences([want], state)) is unmet
    assert bool(packages.plan([want], state, repositories_changed=False)) is unmet


def _unit(loaded: bool, enabled: str, active: str) -> NodeStateData:
    return NodeStateData({"services": {"docker": {"loaded": loaded, "enabled": enabled, "active": active}}})


UNITS = [
    (UnitWant("docker"), NodeStateData({}), True),
    (UnitWant("docker"), _unit(False, "", "inactive"), True),
    (UnitWant("docker"), _unit(True, "enabled", "active"), False),
    (UnitWant("docker"), _unit(True, "disabled", "active"), True),
    (UnitWant("docker"), _unit(True, "enabled", "failed"), True),
    (UnitWant("docker", running=None), _unit(True, "enabled", "inactive"), False),
    (UnitWant("docker", enabled=None, running=None), NodeStateData({}), False),
    (UnitWant("docker", enabled=False, running=False), _unit(True, "enabled", "inactive"), True),
    (UnitWant("docker", enabled=False, running=False), _unit(True, "disabled", "active"), True),
    (UnitWant("docker", enabled=False, running=False), _unit(True, "disabled", "inactive"), False),
    (UnitWant("docker", enabled=False, running=False), NodeStateData({}), False),
]


@pytest.mark.parametrize(("want", "state", "unmet"), UNITS)
def test_units(want: UnitWant, state: NodeStateData, unmet: bool) -> None:
    assert bool(differences([want], state)) is unmet
    assert bool(services.plan([want], state, changed=set())) is unmet


TEXT = "options nvidia NVreg_DeviceFileMode=0660\n"


def _file(exists: bool = True, text: str = TEXT, mode: str = "0644", owner: str = "root", kind: str = "file",
          content: str | None = None) -> NodeStateData:
    entry = {"exists": exists, "type": kind, "mode": mode, "owner": owner, "group": "root", "sha256": sha256(text),
             "content": content} if exists else {"exists": False}
    return NodeStateData({"files": {"/etc/x": entry}})


EXACT = FileWant("/etc/x", TEXT)
MERGE = FileWant("/etc/x", merge="json", keys={"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}})
FILES = [
    (EXACT, _file(exists=False), True),
    (EXACT, _file(), False),
    (EXACT, _file(text="other\n"), True),
    (EXACT, _file(mode="0600"), True),
    (EXACT, _file(owner="ubuntu"), True),
    (EXACT, _file(kind="directory"), True),
    (FileWant("/etc/x", TEXT, mode="0600"), _file(mode="0600"), False),
    (MERGE, _file(content='{"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}, "x": 1}'), False),
    (MERGE, _file(content='{\n  "runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}\n}\n'), False),
    (MERGE, _file(content='{"runtimes": {}}'), True),
    (MERGE, _file(content="not json"), True),
    (MERGE, _file(exists=False), True),
]


@pytest.mark.parametrize(("want", "state", "unmet"), FILES)
def test_files(want: FileWant, state: NodeStateData, unmet: bool) -> None:
    assert bool(differences([want], state)) is unmet
    assert bool(files.plan(want, state.file(want.path))) is unmet
    assert bool(files.content_changes([want], state)) is any(d.kind == "file" for d in differences([want], state))


def _group(members: list[str] | None) -> NodeStateData:
    return NodeStateData({"accounts": {} if members is None else {"gpu": {"gid": 990, "members": members}}})


GROUPS = [
    (GroupWant("gpu", ("alice",)), _group(None), True),
    (GroupWant("gpu"), _group(None), True),
    (GroupWant("gpu", ("alice",)), _group([]), True),
    (GroupWant("gpu", ("alice",)), _group(["alice", "bob"]), False),
    (GroupWant("gpu"), _group(["bob"]), False),
]


@pytest.mark.parametrize(("want", "state", "unmet"), GROUPS)
def test_groups(want: GroupWant, state: NodeStateData, unmet: bool) -> None:
    assert bool(differences([want], state)) is unmet
    assert bool(accounts.plan([want], state)) is unmet
