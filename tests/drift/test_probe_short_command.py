"""The probe's short command: a node met once gets the full command (which keeps the probe's modules there), a later
run, in the same process or a new one, sends the short command; a node that lost its copy gets the full one again;
a failed probe is not noted. Still one command per check while the node holds its copy."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace
from typing import Any

from gpu_provision import bundle
from gpu_provision.facts.state import NodeState, invalidate, node_state, record_dir
from gpu_provision.state import Request

ANSWER = {"system": {"os_id": "debian"}}


class ProbedHost:
    """A host with SSH data whose probe answers from ``answers`` (short form, full form) and logs each command."""

    def __init__(self, name: str = "node-1", address: str = "127.0.0.9", short: Any = ANSWER, full: Any = ANSWER):
        self.name = name
        self.data = {"ssh_hostname": address, "ssh_user": "root", "ssh_port": 22}
        self.state = SimpleNamespace(is_executing=False)
        self.answers = {True: short, False: full}
        self.commands: list[str] = []

    def get_fact(self, fact: Any, *args: Any, **kwargs: Any) -> Any:
        command = fact().command(*args)
        self.commands.append(command)
        return self.answers[bool(args[1:] and args[1])]


def check(host: ProbedHost) -> Any:
    invalidate(host)
    return node_state(host, Request()).raw


def is_short(command: str) -> bool:
    return bundle.probe_digest() in command and "b64decode" not in command and len(command) < 1024


def test_second_run_sends_the_short_command_and_gets_the_same_answer():
    host = ProbedHost()
    assert check(host) == ANSWER
    assert len(host.commands) == 1 and "b64decode" in host.commands[0]
    assert check(host) == ANSWER
    assert len(host.commands) == 2 and is_short(host.commands[1])
    assert len(host.commands[1]) * 10 < len(host.commands[0])


def test_a_new_controller_process_finds_the_note_and_sends_the_short_command():
    check(ProbedHost())
    again = ProbedHost()
    check(again)
    assert len(again.commands) == 1 and is_short(again.commands[0])
    assert (record_dir() / "root@127.0.0.9:22").exists()


def test_node_that_lost_its_copy_gets_the_full_command_in_the_same_check():
    check(ProbedHost())
    host = ProbedHost(short=bundle.CACHE_MISS)
    assert check(host) == ANSWER
    assert [is_short(c) for c in host.commands] == [True, False]
    assert (record_dir() / "root@127.0.0.9:22").exists()


def test_failed_probe_is_not_noted_and_hosts_without_an_address_always_get_the_full_command():
    failed = ProbedHost(full=None)
    check(failed)
    check(failed)
    assert not any(is_short(c) for c in failed.commands)
    local = ProbedHost(name="@local")
    local.data = {}
    check(local)
    check(local)
    assert not any(is_short(c) for c in local.commands)


def test_short_command_carries_the_request_and_no_modules():
    argv = shlex.split(NodeState().command(Request().to_json(), True))
    assert argv[:4] == ["python3", "-I", "-S", "-c"] and len(argv) == 6
    assert json.loads(argv[5]) == Request().to_probe()
    assert bundle.PROBE_CACHE + "'" in argv[4] and bundle.probe_digest() in argv[4]
