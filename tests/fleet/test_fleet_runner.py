"""The fleet runner over pyinfra's API, with the @local connector and refused loopback connections: host
selection, results by value, per-host operations, and unreachable hosts reported alike by drift and verify."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import gevent
import pytest
from pyinfra.api import Inventory
from pyinfra.context import ctx_state
from pyinfra.operations import server

from gpu_provision.drift import check_fleet
from gpu_provision.errors import GpuProvisionError
from gpu_provision.fleet import FleetSettings, Reached, load_inventory, run_fleet, settings_from
from gpu_provision.verify import collect


def down(name: str, port: int) -> tuple[str, dict[str, Any]]:
    """A host on 127.0.0.1 whose SSH port refuses connections."""
    return name, {"ssh_hostname": "127.0.0.1", "ssh_port": port, "ssh_connect_retries": 0}


def echo(text: str):
    """Per-host work: run ``echo text`` on the host and return what it printed."""
    def work(reached: Reached) -> str:
        ok, output = reached.host.run_shell_command(f"echo {text}")
        assert ok
        return "\n".join(output.stdout_lines)
    return work


def test_limit_runs_only_the_named_hosts_in_inventory_order(closed_port):
    inventory = Inventory((["@local", down("down-a", closed_port), down("down-b", closed_port)], {}))
    run = run_fleet(inventory, echo("hi"), FleetSettings(limit=("down-b", "@local"), connect_timeout=2))
    assert [h.name for h in run.hosts] == ["@local", "down-b"]
    local, refused = run.hosts
    assert (local.value, local.unreached, local.commands) == ("hi", None, 1)
    assert refused.value is None and refused.commands == 0
    assert refused.unreached.startswith("unreachable: Could not connect") and str(closed_port) in refused.unreached
    assert run.connect_timeout == 2


def test_unknown_limit_names_and_an_empty_inventory_are_errors(closed_port):
    inventory = Inventory((["@local", down("down-a", closed_port)], {}))
    with pytest.raises(GpuProvisionError, match="does not have: nope, other$"):
        run_fleet(inventory, echo("hi"), FleetSettings(limit=("other", "@local", "nope")))
    with pytest.raises(GpuProvisionError, match="the inventory has no hosts"):
        run_fleet(Inventory(([], {})), echo("hi"))


def test_two_runs_in_one_process_give_independent_results():
    first = run_fleet(Inventory((["@local"], {})), echo("one"))
    second = run_fleet(Inventory((["@local"], {})), echo("two"))
    assert [h.value for h in first.hosts] == ["one"] and [h.value for h in second.hosts] == ["two"]
    assert [h.commands for h in first.hosts] == [1] and [h.commands for h in second.hosts] == [1]


def test_apply_runs_a_hosts_operations_in_order_and_stops_at_the_first_failure():
    def deploy() -> tuple[Any, Any]:
        return server.shell(commands=["false"]), server.shell(commands=["echo never"])

    def work(reached: Reached) -> Any:
        shown, ok = reached.apply(server.shell, commands=["echo applied"])
        (failed, skipped), failed_ok = reached.apply(deploy)
        return shown.stdout, ok, failed.did_error(), skipped.is_complete(), failed_ok

    (result,) = run_fleet(Inventory((["@local"], {})), work).hosts
    assert result.value == ("applied", True, True, False, False)
    assert result.commands == 2


def test_a_deploy_keeps_the_runs_state_when_another_greenlet_leaves_its_own_use_of_it():
    """pyinfra's state context is process-wide: a short command in another greenlet that set it first and
    leaves while a deploy is still adding operations must not unset it (a rollout batch's two nodes, or a
    node's deploy beside the control plane's kubectl, failed with "type object 'State' has no attribute
    'config'")."""
    left = []

    def short(reached: Reached) -> None:
        with ctx_state.use(reached.state):
            gevent.sleep(0.05)
        left.append(ctx_state.get() is reached.state)

    def work(reached: Reached) -> Any:
        other = gevent.spawn(short, reached)
        gevent.sleep(0)  # the other greenlet sets the context first

        def deploy() -> Any:
            gevent.sleep(0.1)  # the other one leaves meanwhile
            return server.shell(commands=["echo after"])

        try:
            shown, ok = reached.apply(deploy)
        finally:
            other.join()
        return shown.stdout, ok

    found = ctx_state.get()  # whatever an earlier run in this process left, if anything
    (result,) = run_fleet(Inventory((["@local"], {})), work).hosts
    assert result.value == ("after", True)
    assert left == [True]
    assert ctx_state.get() is found  # the run gives the context back as it found it


def test_exception_in_the_work_is_raised_after_every_host_finished(closed_port):
    def work(reached: Reached) -> None:
        raise GpuProvisionError("broken expectations")

    with pytest.raises(GpuProvisionError, match="broken expectations"):
        run_fleet(Inventory((["@local", down("down", closed_port)], {})), work, FleetSettings(connect_timeout=2))


def test_unreachable_host_is_reported_alike_by_drift_and_verify(tmp_path: Path, closed_port):
    inventory = tmp_path / "inventory_down.py"
    inventory.write_text(f"hosts = [{down('down-node', closed_port)!r}]\n")
    drift = check_fleet(load_inventory(str(inventory)), [], FleetSettings(connect_timeout=2))
    (report,) = collect.run(str(inventory))
    (node,) = drift.nodes
    assert node.status == "not-checked" and report["status"] == "error"
    assert node.problems == [report["error"]]
    assert report["error"] == f"unreachable: Could not connect ([Errno None] Unable to connect to port {closed_port} on 127.0.0.1)"


def test_inventory_that_cannot_be_loaded_is_a_user_error(tmp_path: Path):
    broken = tmp_path / "inventory_broken.py"
    broken.write_text("hosts = [\n")
    with pytest.raises(GpuProvisionError, match="cannot load inventory"):
        load_inventory(str(broken))


def test_settings_come_from_the_command_line_else_the_config_file_else_the_defaults(tmp_path: Path):
    config = tmp_path / "config.py"
    config.write_text("from pyinfra import config\nconfig.PARALLEL = 3\nconfig.CONNECT_TIMEOUT = 4\n")
    assert settings_from(str(config)) == FleetSettings(parallel=3, connect_timeout=4.0)
    assert settings_from(str(config), parallel=2, connect_timeout=1.5, command_timeout=9, limit=["a", "b"]) == (
        FleetSettings(parallel=2, connect_timeout=1.5, command_timeout=9, limit=("a", "b")))
    assert settings_from(str(tmp_path / "absent.py"), default_command_timeout=None) == (
        FleetSettings(command_timeout=None))
    with pytest.raises(GpuProvisionError, match="--parallel must be 0 or more"):
        settings_from(None, parallel=-1)


def test_verify_limit_names_unknown_hosts_as_drift_does(tmp_path: Path, closed_port):
    inventory = tmp_path / "inventory_down.py"
    inventory.write_text(f"hosts = [{down('down-node', closed_port)!r}]\n")
    with pytest.raises(GpuProvisionError, match="--limit names hosts the inventory does not have: gpu-09"):
        collect.run(str(inventory), FleetSettings(limit=("gpu-09",)))


def test_verify_command_takes_the_runner_settings_and_lists_an_unreachable_node(tmp_path: Path, closed_port):
    inventory = tmp_path / "inventory_down.py"
    inventory.write_text(f"hosts = [{down('down-node', closed_port)!r}]\n")
    # A process of its own, as users run it: the command patches the standard library for gevent first thing.
    done = subprocess.run([sys.executable, "-m", "gpu_provision.cli", "verify", str(inventory), "--connect-timeout",
                           "2", "--command-timeout", "30", "--config", str(tmp_path / "absent.py"), "--limit",
                           "down-node"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "COLUMNS": "200"})  # the table's width, which a pipe does not give
    # An unreachable node is an error (2), as drift says; a failed check would be a finding (1).
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    out = done.stdout.splitlines()
    assert out[1].split()[:3] == ["down-node", "ERROR", "?/?"]
    assert "unreachable: Could not connect" in out[1]


def test_progress_hears_every_host_with_done_failed_and_total(closed_port):
    inventory = Inventory((["@local", down("down-a", closed_port)], {}))
    heard: list[tuple[int, int, int]] = []
    run_fleet(inventory, echo("hi"), FleetSettings(connect_timeout=2),
              progress=lambda *counts: heard.append(counts), failed=lambda value: value != "hi")
    assert heard[0] == (0, 0, 2)
    assert heard[1:] in ([(0, 1, 2), (1, 1, 2)], [(1, 0, 2), (1, 1, 2)])


def test_connections_leave_out_ciphers_that_need_a_separate_mac_unless_the_host_says_otherwise(closed_port):
    from gpu_provision.fleet import NON_AEAD_CIPHERS

    own = {"ciphers": ["aes256-gcm@openssh.com"]}
    plain = down("plain", closed_port)
    chosen = ("chosen", {**down("chosen", closed_port)[1], "ssh_paramiko_connect_kwargs": {"disabled_algorithms": own}})
    inventory = Inventory(([plain, chosen], {}))
    run_fleet(inventory, echo("hi"), FleetSettings(connect_timeout=2))
    kwargs = {h.name: h.data.ssh_paramiko_connect_kwargs for h in inventory}
    assert kwargs["plain"]["disabled_algorithms"] == {"ciphers": list(NON_AEAD_CIPHERS)}
    assert kwargs["chosen"]["disabled_algorithms"] == own
    assert "aes128-gcm@openssh.com" not in NON_AEAD_CIPHERS and "aes128-ctr" in NON_AEAD_CIPHERS


def test_each_host_is_disconnected_as_soon_as_its_work_is_done():
    inventory = Inventory((["@local"], {}))
    local = next(iter(inventory))
    seen: list[bool] = []
    run = run_fleet(inventory, echo("hi"), FleetSettings(connect_timeout=2),
                    progress=lambda *counts: seen.append(local.connected))
    assert run.hosts[0].value == "hi" and seen == [False, False]


def test_remembered_host_keys_answer_as_paramiko_without_scanning_the_plain_entries(tmp_path: Path, monkeypatch):
    import paramiko
    from paramiko.hostkeys import HostKeys

    from gpu_provision.fleet import RememberedHostKeys

    keys = {f"10.0.0.{i}": paramiko.Ed25519Key.from_private_key_file(str(_keygen(tmp_path, i))) for i in range(3)}
    source = HostKeys()
    for name, key in keys.items():
        source.add(name, key.get_name(), key)
    source.add(HostKeys.hash_host("10.0.0.9"), keys["10.0.0.0"].get_name(), keys["10.0.0.0"])
    for i in range(200):  # a larger file: the plain entries of other nodes
        source.add(f"10.1.0.{i}", keys["10.0.0.1"].get_name(), keys["10.0.0.1"])
    names = ("10.0.0.1", "10.0.0.9", "10.0.0.7")
    expected = {name: source.lookup(name) for name in names}
    remembered = RememberedHostKeys(source)
    scans: list[str] = []
    matches = HostKeys._hostname_matches  # type: ignore[attr-defined]
    monkeypatch.setattr(HostKeys, "_hostname_matches",
                        lambda self, name, entry: scans.append(name) or matches(self, name, entry))
    for name in names:
        for _ in range(3):
            found = remembered.lookup(name)
            assert (found is None) == (expected[name] is None)
            if found is not None:
                assert dict(found) == dict(expected[name])
    # Plain names come from the index; only the one hashed entry is compared, once per name (paramiko would
    # compare all 204 entries at every lookup: 9 times), then only the matches.
    assert len(scans) <= 3 + 9
    remembered.add("10.0.0.7", keys["10.0.0.2"].get_name(), keys["10.0.0.2"])
    assert dict(remembered.lookup("10.0.0.7")) == {"ssh-ed25519": keys["10.0.0.2"]}


def _keygen(folder: Path, index: int) -> Path:
    import subprocess

    path = folder / f"key{index}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path


def test_known_hosts_are_read_in_one_pass_with_the_lookups_paramiko_gives(tmp_path: Path, monkeypatch):
    import paramiko
    from paramiko.hostkeys import HostKeys

    from gpu_provision.fleet import load_host_keys

    keys = [paramiko.Ed25519Key.from_private_key_file(str(_keygen(tmp_path, i))) for i in range(3)]
    lines = [f"10.0.0.{i} {keys[i % 3].get_name()} {keys[i % 3].get_base64()}" for i in range(300)]
    lines += [lines[5], "# a comment", "", "garbage line", f"10.0.0.5 {keys[0].get_name()} {keys[0].get_base64()}",
              f"{HostKeys.hash_host('10.9.9.9')} {keys[1].get_name()} {keys[1].get_base64()}",
              f"10.0.0.7,10.0.1.7 {keys[0].get_name()} {keys[0].get_base64()}"]
    known = tmp_path / "known_hosts"
    known.write_text("\n".join(lines) + "\n")
    paramikos = HostKeys(str(known))
    checks: list[str] = []
    check = HostKeys.check
    monkeypatch.setattr(HostKeys, "check", lambda self, name, key: checks.append(name) or check(self, name, key))
    ours = load_host_keys([str(known), str(tmp_path / "missing")])
    assert checks == []  # no lookup while loading: one pass over the file
    for name in ("10.0.0.5", "10.0.0.7", "10.0.1.7", "10.9.9.9", "10.0.0.299", "10.0.0.300"):
        theirs, mine = paramikos.lookup(name), ours.lookup(name)
        assert (mine is None) == (theirs is None), name
        if mine is not None:
            assert dict(mine) == dict(theirs), name
    assert len(ours._entries) == 303  # type: ignore[attr-defined]  # the repeated line is dropped


def test_apply_executes_a_hosts_operations_as_pyinfra_does_reading_the_node_again_after_a_change():
    """A rollout applies a node's deploy through the fleet run, whose shared state never enters pyinfra's execution
    phase: the host is marked as executing while its operations run, so an operation that changed the node makes
    the next one read it again (a kubelet restart decided from the package the previous operation installed), and
    the mark is gone afterwards."""
    from pyinfra.api import operation

    from gpu_provision.facts.state import executing
    from gpu_provision.operations.commands import mark_changed, this_host
    from gpu_provision.operations.files import changed_paths, record_changed

    seen: list[tuple[str, bool]] = []

    @operation()
    def change():
        host = this_host()
        seen.append(("change", executing(host)))
        record_changed(host, ["/etc/changed"])
        mark_changed(host)
        yield "true"

    @operation()
    def after():
        host = this_host()
        seen.append(("after", executing(host), sorted(changed_paths(host))))
        yield "true"

    def deploy() -> None:
        change()
        after()

    def work(reached: Reached) -> Any:
        _, ok = reached.apply(deploy)
        return ok, executing(reached.host)

    (result,) = run_fleet(Inventory((["@local"], {})), work).hosts
    assert result.value == (True, False)
    assert seen == [("change", True), ("after", True, ["/etc/changed"])]
