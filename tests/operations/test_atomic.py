"""Atomic writes run for real in a scratch directory: the file is the old one or the new one, never partial."""

from __future__ import annotations

import grp
import os
import pwd
import signal
import subprocess
import time
from pathlib import Path

from gpu_provision.operations import atomic

OWNER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def _run(command: atomic.AtomicWrite, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    given = command.connector_arguments["_stdin"] if stdin is None else stdin
    return subprocess.run(["sh", "-c", command.get_raw_value()], input=given, text=True, capture_output=True,
                          check=False)


def test_write_replaces_the_file_with_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "daemon.json"
    target.write_text("old\n")
    done = _run(atomic.write(str(target), '{"new": true}\n', "0640", OWNER, GROUP))
    assert done.returncode == 0, done.stderr
    assert target.read_text() == '{"new": true}\n'
    assert oct(target.stat().st_mode & 0o777) == "0o640"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["daemon.json"]


def test_binary_content_and_an_empty_file(tmp_path: Path) -> None:
    data = bytes(range(256)) * 64
    assert _run(atomic.write(str(tmp_path / "bundle.pyz"), data, "0755", OWNER, GROUP)).returncode == 0
    assert (tmp_path / "bundle.pyz").read_bytes() == data
    assert _run(atomic.write(str(tmp_path / "empty"), "", "0644", OWNER, GROUP)).returncode == 0
    assert (tmp_path / "empty").read_bytes() == b""


def test_content_cut_short_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "cuda.sources"
    target.write_text("old\n")
    command = atomic.write(str(target), "Types: deb\n" * 500, "0644", OWNER, GROUP)
    sent = command.connector_arguments["_stdin"]
    # The connection dropped mid-transfer: at a line end (valid base64, caught by the checksum) or mid-line.
    at_line_end = "".join(sent.splitlines(keepends=True)[:3])
    done = _run(command, at_line_end)
    assert done.returncode == 1
    assert "incomplete write of" in done.stderr and str(target) in done.stderr
    assert _run(command, sent[:300]).returncode != 0
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cuda.sources"]


def test_a_hang_up_mid_transfer_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "config.toml"
    target.write_text("old\n")
    command = atomic.write(str(target), "x" * 100_000, "0644", OWNER, GROUP)
    proc = subprocess.Popen(["sh", "-c", command.get_raw_value()], stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(command.connector_arguments["_stdin"][:1000].encode())
    proc.stdin.flush()
    deadline = time.monotonic() + 10
    while not [p for p in tmp_path.iterdir() if p.name.startswith(".config.toml.")]:
        assert time.monotonic() < deadline, "no temporary file appeared"
        time.sleep(0.01)
    # The connection went: the shell gets a hang-up and its input ends.
    proc.send_signal(signal.SIGHUP)
    proc.stdin.close()
    proc.wait(timeout=30)
    assert proc.returncode != 0
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.toml"]


def test_temporary_is_made_by_mktemp_in_the_target_directory() -> None:
    script = atomic.write("/etc/apt/apt.conf.d/90 proxy", "x\n").get_raw_value()
    assert "t=$(mktemp /etc/apt/apt.conf.d/.90_proxy.XXXXXXXX)" in script
    assert "/tmp" not in script
    # Owner and mode are set and the data synced before the rename makes the file visible.
    order = [script.index(step) for step in ("chown root:root", "chmod 0644", 'sync "$t"', "mv -f")]
    assert order == sorted(order)
    assert script.endswith("""mv -f "$t" '/etc/apt/apt.conf.d/90 proxy'\nt=""")


def test_no_writer_uploads_through_pyinfra() -> None:
    # pyinfra's upload writes the target in place (SFTP) or through /tmp/pyinfra-<sha1 of path> and cp (sudo).
    package = Path(atomic.__file__).resolve().parents[1]
    found = [f"{path.relative_to(package)}: {needle}" for path in sorted(package.rglob("*.py"))
             for needle in ("FileUploadCommand", "files.put(", "files.template(") if needle in path.read_text()]
    assert found == []
