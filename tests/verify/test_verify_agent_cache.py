"""The agent kept on the node by digest: sent once per version, then one short command per run; per-run files
removed unless kept; the cache directory root's alone. Through the fleet runner and pyinfra's @local connector
(this machine is the node; the cache sits in a temporary directory, never in /var/lib)."""

from __future__ import annotations

import json
import os
import subprocess
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pyinfra.api import Inventory

from gpu_provision import bundle
from gpu_provision.fleet import FleetSettings, Reached, run_fleet
from gpu_provision.verify import agent
from gpu_provision.verify.collect import verify_host
from gpu_provision.verify.expect import build_expectations
from gpu_provision.verify.report import schema_problems


def kept_copies() -> list[str]:
    """What the cache keeps of this version: the copy, and the one compiled for the node's ``python3``."""
    tag = subprocess.run(["python3", "-c", "import sys; print(sys.implementation.cache_tag)"], capture_output=True,
                         text=True, check=True).stdout.strip()
    return sorted([f"{agent.agent_digest()}.pyz", f"{agent.agent_digest()}.{tag}.pyz"])


@pytest.fixture
def node(tmp_path: Path) -> tuple[Inventory, Path]:
    """An @local host with its own expectations, and the agent cache path it uses (not yet made)."""
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(build_expectations("local-node", "H200", 1).to_dict()))
    return Inventory((["@local"], {"gpu_provision_verify_expect": str(expect)})), tmp_path / "node" / "agent"


def verify_counted(inventory: Inventory, cache: Path, keep: bool = False) -> tuple[dict[str, Any], list[int]]:
    """One verification of the host; its report and the size of each command sent (command text plus stdin)."""
    sent: list[int] = []

    def work(reached: Reached) -> dict[str, Any] | None:
        inner = reached.host.connector.run_shell_command

        def counting(command: Any, *args: Any, **kwargs: Any) -> Any:
            sent.append(len(command.get_raw_value()) + len(kwargs.get("_stdin") or ""))
            return inner(command, *args, **kwargs)

        reached.host.connector.run_shell_command = counting
        return verify_host(reached, str(cache), keep=keep)

    run = run_fleet(inventory, work, FleetSettings(command_timeout=None))
    report = run.hosts[0].value
    assert report is not None and run.hosts[0].commands == len(sent)
    return report, sent


def test_the_agent_is_sent_once_per_version_then_one_short_command(node) -> None:
    inventory, cache = node
    agent_size = len(bundle.build())
    report, sent = verify_counted(inventory, cache)
    assert schema_problems(report) == [] and report["agent_version"] != "unknown", report
    assert len(sent) == 3  # the short command (a miss), the agent on stdin, the short command again
    assert sent[1] > agent_size > 100_000 and max(sent[0], sent[2]) < 20_000
    again, sent = verify_counted(inventory, cache)
    assert len(sent) == 1 and sent[0] < 20_000 and sent[0] < agent_size / 10
    assert schema_problems(again) == [] and again["node"] == report["node"]
    assert sorted(p.name for p in cache.iterdir()) == kept_copies()
    assert cache.stat().st_mode & 0o7777 == 0o700 and cache.stat().st_uid == 0
    assert cache.parent.stat().st_mode & 0o777 == 0o755  # a parent it makes is not closed to others
    assert (cache / f"{agent.agent_digest()}.pyz").stat().st_mode & 0o777 == 0o600


def test_run_files_are_kept_only_when_asked(node) -> None:
    inventory, cache = node
    verify_counted(inventory, cache)
    report, _ = verify_counted(inventory, cache, keep=True)
    (kept,) = [p for p in cache.iterdir() if p.name.startswith("run-")]
    assert kept.stat().st_mode & 0o777 == 0o700
    assert json.loads((kept / "expect.json").read_text())["node"] == "local-node"
    assert json.loads((kept / "report.json").read_text())["node"] == report["node"]


def test_a_cache_that_is_not_roots_alone_is_not_trusted_and_is_put_right(node) -> None:
    inventory, cache = node
    verify_counted(inventory, cache)
    cache.chmod(0o755)
    _, sent = verify_counted(inventory, cache)
    assert len(sent) == 3 and cache.stat().st_mode & 0o777 == 0o700


def test_an_older_version_is_replaced(node) -> None:
    inventory, cache = node
    cache.mkdir(parents=True, mode=0o700)
    (cache / ("0" * 32 + ".pyz")).write_bytes(b"old agent")
    verify_counted(inventory, cache)
    assert sorted(p.name for p in cache.iterdir()) == kept_copies()


def test_a_run_removes_older_versions_that_another_path_left(node) -> None:
    """The pyinfra stage writes the agent as a file (no installer, so no pruning): the next run prunes."""
    inventory, cache = node
    verify_counted(inventory, cache)
    (cache / ("0" * 32 + ".pyz")).write_bytes(b"old agent")
    (cache / "notes.txt").write_text("not an agent")
    _, sent = verify_counted(inventory, cache)
    assert len(sent) == 1
    assert sorted(p.name for p in cache.iterdir()) == sorted([*kept_copies(), "notes.txt"])


def test_a_compiled_copy_that_a_killed_run_left_half_written_is_pruned(node) -> None:
    """The compiled copy is written to a temporary file in the cache (``.compiled-<random>.pyz``) before it is renamed
    into place: one a run killed meanwhile left, half written, is removed by the next run, as other versions are.
    The loader runs isolated and without site (no sitecustomize can end it on cue), so the leftover is laid here
    as the loader names it."""
    inventory, cache = node
    verify_counted(inventory, cache)
    for name in kept_copies():
        if name.count(".") == 2:
            (cache / name).unlink()
    leftover = cache / ".compiled-0123456789abcdef.pyz"
    leftover.write_bytes(b"PK\x03\x04 half written")
    loader = agent.run_command("{}", cache_dir=str(cache))
    assert "/.compiled-" in loader and ".pyz" in loader  # the name the loader gives its temporary file
    verify_counted(inventory, cache)
    assert not leftover.exists()
    assert sorted(p.name for p in cache.iterdir()) == kept_copies()


def test_the_compiled_copy_holds_each_module_and_its_bytecode(node) -> None:
    """Imports from a zip of sources compile every module on every run; the copy compiled once for the node's
    interpreter has each source beside an unchecked hash-based ``.pyc`` (PEP 552) of it."""
    inventory, cache = node
    verify_counted(inventory, cache)
    compiled = cache / next(n for n in kept_copies() if n.count(".") == 2)
    assert compiled.stat().st_mode & 0o777 == 0o600
    with zipfile.ZipFile(compiled) as z:
        names = set(z.namelist())
        sources = {n for n in names if n.endswith(".py")}
        assert sources and {n + "c" for n in sources} <= names
        header = z.read(sorted(sources)[0] + "c")[:16]
    assert int.from_bytes(header[4:8], "little") == 1  # hash-based, source not checked


def test_a_compiled_copy_that_is_not_usable_is_passed_over(node) -> None:
    """Bytecode another interpreter wrote (another magic number) is ignored by the import system, which reads the
    sources beside it: the run still reports."""
    inventory, cache = node
    verify_counted(inventory, cache)
    compiled = cache / next(n for n in kept_copies() if n.count(".") == 2)
    with zipfile.ZipFile(compiled) as z:
        entries = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(compiled, "w") as z:
        for info, data in entries:
            z.writestr(info, b"\0\0\0\0" + data[4:] if info.filename.endswith(".pyc") else data)
    report, sent = verify_counted(inventory, cache)
    assert len(sent) == 1 and schema_problems(report) == [] and report["node"] == "local-node"


def test_a_cache_path_that_is_a_link_is_refused(node, tmp_path: Path) -> None:
    inventory, cache = node
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    cache.parent.mkdir()
    os.symlink(elsewhere, cache)
    report, sent = verify_counted(inventory, cache)
    assert report["status"] == "error" and "is not a directory" in report["error"]
    assert len(sent) == 2 and list(elsewhere.iterdir()) == []


def test_the_short_command_names_no_world_writable_directory() -> None:
    command = agent.run_command('{"node": "x"}')
    script, _ = agent.install_command()
    for text in (command, script):
        assert "/tmp" not in text and "/var/tmp" not in text and "/dev/shm" not in text
    assert agent.AGENT_CACHE in command and agent.AGENT_CACHE in script


def fake_agent(cache: Path, main: str) -> None:
    """Keep, as this version's copy, an agent whose ``main`` is ``main`` (Python source)."""
    cache.mkdir(parents=True, mode=0o700)
    with zipfile.ZipFile(cache / f"{agent.agent_digest()}.pyz", "w") as pyz:
        pyz.writestr(f"{bundle.PACKAGE}/__init__.py", "")
        pyz.writestr(f"{bundle.PACKAGE}/__main__.py", main)


@pytest.mark.parametrize(("main", "status", "tail"), [
    ("def main(argv):\n    raise RuntimeError('no GPUs today')\n", 3, "RuntimeError: no GPUs today"),
    ("import sys\ndef main(argv):\n    print('half a report', file=sys.stderr)\n    return 4\n", 4, "half a report"),
])
def test_an_agent_that_ends_without_a_report_is_reported_with_the_command_and_its_status(
        node, main: str, status: int, tail: str) -> None:
    inventory, cache = node
    fake_agent(cache, main)
    report, sent = verify_counted(inventory, cache)
    assert len(sent) == 1 and report["status"] == "error" and schema_problems(report) == []
    assert report["error"].startswith("agent run failed: python3 -I -S -c 'import base64,io,os,sys")
    assert f"... exited {status}: " in report["error"] and report["error"].endswith(tail)
