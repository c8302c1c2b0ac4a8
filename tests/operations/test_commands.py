"""Commands that follow node state or this run's changes: reboots, rebuilds after a change, host failures."""

from __future__ import annotations

from fakehost import FakeHost, run_op

from gpu_provision.operations import commands, files
from gpu_provision.state import Request

MARKER = commands.REBOOT_MARKER


class LoggingHost(FakeHost):
    """A fake host that also records the warnings an operation logs."""

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.logged: list[str] = []

    def log_styled(self, message: str, **_: object) -> None:
        self.logged.append(message)


def _needs(reason: str | None):  # type: ignore[no-untyped-def]
    return lambda state: reason


def test_reboot_not_allowed_writes_the_marker_once_and_warns() -> None:
    host = LoggingHost({"files": {}})
    out = run_op(commands.reboot_when, host, _needs("nouveau is loaded"), Request(), False)
    assert out == ["mkdir -p /var/run/gpu-provision", ["write", "nouveau is loaded\n", MARKER, "root:root", "0644"]]
    assert host.logged == ["reboot required: nouveau is loaded (driver.reboot is not 'allowed')"]
    flagged = LoggingHost({"files": {MARKER: {"exists": True, "type": "file", "content": "nouveau is loaded\n"}}})
    assert run_op(commands.reboot_when, flagged, _needs("nouveau is loaded"), Request(), False) == []
    # Still reported on every run until the node reboots; only the file is not rewritten.
    assert flagged.logged and flagged.noops == [f"reboot already flagged in {MARKER}"]


def test_reboot_allowed_reboots_and_waits() -> None:
    out = run_op(commands.reboot_when, LoggingHost({"files": {}}), _needs("driver 580.126.09 is loaded"), Request(),
                 True)
    assert out == [["call", "remove_any_askpass_file"], ["call", "capture_uptime"],
                   "( sleep 1 && reboot ) </dev/null >/dev/null 2>&1 &", ["call", "wait_and_reconnect"],
                   ["call", "clean_sudo_info"]]


def test_no_reboot_needed() -> None:
    host = LoggingHost({"files": {}})
    assert run_op(commands.reboot_when, host, _needs(None), Request(), True) == []
    assert host.noops == ["no reboot needed"] and host.logged == []


def test_rebuild_follows_this_runs_changes_only() -> None:
    host = FakeHost({})
    args = (["/etc/modprobe.d/blacklist-nouveau.conf"], "update-initramfs -u", "unchanged")
    assert run_op(files.on_change, host, *args) == []
    files.record_changed(host, ["/etc/modprobe.d/blacklist-nouveau.conf"])
    assert run_op(files.on_change, host, *args) == ["update-initramfs -u"]


def test_fail_stops_the_host_with_its_reason() -> None:
    assert run_op(commands.fail, FakeHost({}), "Fedora 40 is not supported") == [
        "echo 'gpu-provision: Fedora 40 is not supported' >&2; exit 1"]
