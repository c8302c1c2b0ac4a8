"""Commands that follow node state or this run's changes: reboots, rebuilds after a change, host failures."""

from __future__ import annotations

from fakehost import FakeHost, run_op

from gpu_provision.hostcommand import HostCommand, outcome
from gpu_provision.operations import commands, files
from gpu_provision.operations.reboot import BOOT_MARK, reboot_and_wait
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


def test_reboot_allowed_reboots_and_waits_through_the_boot_mark() -> None:
    out = run_op(commands.reboot_when, LoggingHost({"files": {}}), _needs("driver 580.126.09 is loaded"), Request(),
                 True)
    assert out == [["call", "_reboot_now"]]


class BootingHost:
    """A host that reboots when told to: its /run is emptied, and it answers again after ``down`` connect tries."""

    def __init__(self, down: int = 2, come_back: bool = True):
        self.run_dir: dict[str, str] = {}
        self.down, self.come_back = down, come_back
        self.connected = True
        self.connector_data: dict[str, object] = {}
        self.commands: list[str] = []
        self.connects = 0

    def run(self, command: str) -> HostCommand:
        self.commands.append(command)
        if "systemctl reboot" in command:
            self.run_dir[BOOT_MARK] = command.split("echo ", 1)[1].split(" ", 1)[0]
            if self.come_back:  # the reboot empties /run
                self.run_dir.clear()
        out = self.run_dir.get(BOOT_MARK, "") if command.startswith("cat ") else ""
        return outcome(command, True, [out], [])

    def disconnect(self) -> None:
        self.connected = False

    def connect(self, show_errors: bool = True) -> None:
        self.connects += 1
        self.connected = self.connects > self.down


def test_a_reboot_is_confirmed_by_the_boot_mark_gone_not_by_uptime() -> None:
    host = BootingHost(down=2)
    assert reboot_and_wait(host, "driver 580.126.09 is loaded", host.run, sleep=lambda s: None) is None
    assert host.commands[0].startswith("mkdir -p /run/gpu-provision && echo ")
    assert "systemctl reboot" in host.commands[0]
    assert host.connects == 3 and host.commands[-2] == f"cat {BOOT_MARK} 2>/dev/null || true"
    assert "is-system-running --wait" in host.commands[-1]


def test_a_node_whose_mark_survives_is_not_back_and_the_wait_ends_with_the_reason() -> None:
    host = BootingHost(down=0, come_back=False)  # answers at once, but never rebooted: the mark is still there
    ticks = iter(range(0, 10_000, 100))
    failed = reboot_and_wait(host, "nouveau is loaded", host.run, timeout=900, sleep=lambda s: None,
                             clock=lambda: next(ticks))
    assert failed == "rebooted (nouveau is loaded) but not back within 900s"
    assert host.commands.count(f"cat {BOOT_MARK} 2>/dev/null || true") >= 8


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
