"""Every command the probe runs on a node is bounded: a hung tool (here a fake ``nvidia-smi`` or ``dpkg-query`` that
sleeps) reads as timed out, is killed with whatever it started, and the probe still answers every section.

The probe runs as it does on a node, ``python3 -c`` with the request as its argument (bundle.probe_command), in a
subprocess with a generous timeout of its own: that bound only keeps a regression from hanging the suite.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_provision import bundle
from gpu_provision.node.probe import _command
from gpu_provision.spec.settings import default

HANG = "#!/bin/sh\necho $$ > {pidfile}\nexec sleep 600\n"


def _hanging(tmp_path: Path, name: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text(HANG.format(pidfile=tmp_path / f"{name}.pid"))
    tool.chmod(0o755)
    return bin_dir


def _probe(request: dict, bin_dir: Path) -> dict:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    command = bundle.probe_command(request)
    proc = subprocess.run(["sh", "-c", command.replace("python3 ", f"{sys.executable} ", 1)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie is gone for our purposes (its parent, the probe, has exited and init reaps it).
    return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"


def test_a_hanging_nvidia_smi_reads_as_timed_out_and_is_killed(tmp_path: Path) -> None:
    bin_dir = _hanging(tmp_path, "nvidia-smi")
    answer = _probe({"gpu": {}, "mig": {}, "system": {}, "budget": 8}, bin_dir)
    # A fifth of the budget per command at most (8 / 4 = 2 s here), reported as a reading, not a hang.
    assert answer["gpu"]["smi_rc"] is None
    assert answer["gpu"]["smi_error"] == "timed out after 2 s: nvidia-smi --query-gpu=" + \
        "index,uuid,name,pci.bus_id,driver_version,memory.total,mig.mode.current,mig.mode.pending," + \
        "persistence_mode,pci.device_id --format=csv,noheader,nounits"
    assert answer["mig"]["error"].startswith("timed out after ")
    assert [line.split(":")[1].split()[0] for line in answer["timed_out"]] == ["nvidia-smi", "nvidia-smi"]
    # The other sections still answered.
    assert answer["system"]["os_id"]
    pid = int((tmp_path / "nvidia-smi.pid").read_text())
    assert _gone(pid)


def test_the_whole_probe_stays_within_its_budget(tmp_path: Path) -> None:
    """Later commands get what is left of the budget, not a fresh share each."""
    _command.start(3)
    first = _command.bound()
    assert first == pytest.approx(0.75, abs=0.05)
    _command.start(1)
    rc, reading = _command.run(["sleep", "5"], timeout=30)
    assert rc is None and reading.startswith("timed out after ")
    assert float(reading.split()[3]) <= 1.0
    assert _command.bound(30) == 0.5  # nothing left: a moment, so a command can still fail fast


def test_without_a_budget_the_node_uses_the_settings_default() -> None:
    """The node cannot import the settings; its fallback is the same number as ``cluster.ssh.probe_timeout``."""
    assert default("cluster.ssh.probe_timeout") == _command.FALLBACK_BUDGET


def test_a_fifo_at_a_watched_path_is_reported_not_opened(tmp_path: Path) -> None:
    from gpu_provision.node.probe import files

    fifo = tmp_path / "daemon.json"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"x" * (files.MAX_CONTENT + 1))
    answer = files.collect({"paths": [str(fifo)], "content": [str(big)]})
    assert answer[str(fifo)]["type"] == "fifo" and "sha256" not in answer[str(fifo)]
    assert answer[str(big)]["type"] == "file" and "content" not in answer[str(big)]
    assert len(answer[str(big)]["sha256"]) == 64
