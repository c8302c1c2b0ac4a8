"""The applier's record of what it took down, the kernel modules that block a GPU reset, and its signal handling,
as functions (the processes that use them are in test_mig_interrupt.py)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from gpu_provision.node.mig import interrupt, kmod, record

PROC_MODULES = """\
nvidia_drm 135168 4 - Live 0xffffffffc1a8d000 (POE)
nvidia_modeset 1638400 5 nvidia_drm, Live 0xffffffffc17e4000 (POE)
nvidia_uvm 4956160 0 - Live 0xffffffffc1000000 (POE)
nvidia 104071168 120 nvidia_modeset,nvidia_uvm, Live 0xffffffffbac00000 (POE)
"""


def test_record_round_trip_is_atomic(tmp_path: Path) -> None:
    path = str(tmp_path / "state" / "mig-stopped.json")
    assert record.read(path) is None
    down = record.Stopped().merged(units=("kubelet.service", "nvidia-dcgm.service"))
    record.write(path, down.merged(units=("kubelet.service",), modules=("nvidia_drm",)))
    assert record.read(path) == record.Stopped(("kubelet.service", "nvidia-dcgm.service"), ("nvidia_drm",))
    assert os.listdir(tmp_path / "state") == ["mig-stopped.json"], "no temporary file left"
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    record.remove(path)
    record.remove(path)
    assert record.read(path) is None


def test_record_naming_other_units_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "mig-stopped.json"
    path.write_text('{"units": ["sshd.service"], "modules": ["nvidia"]}')
    with pytest.raises(record.RecordError, match="names what the applier never stops: sshd.service, nvidia"):
        record.read(str(path))
    path.write_text("{")
    with pytest.raises(record.RecordError, match="unreadable record"):
        record.read(str(path))


def test_record_path_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(record.RECORD_ENV, raising=False)
    assert record.default_path() == "/var/lib/gpu-provision/mig-stopped.json"
    monkeypatch.setenv(record.RECORD_ENV, "/tmp/x.json")
    assert record.default_path() == "/tmp/x.json"


def test_module_users_from_sys_and_proc(tmp_path: Path) -> None:
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc" / "modules").write_text(PROC_MODULES)
    for module, holder in (("nvidia", "nvidia_modeset"), ("nvidia", "nvidia_uvm"), ("nvidia_modeset", "nvidia_drm")):
        (tmp_path / "sys" / "module" / module / "holders").mkdir(parents=True, exist_ok=True)
        (tmp_path / "sys" / "module" / module / "holders" / holder).touch()
    sysfs, procfs = str(tmp_path / "sys"), str(tmp_path / "proc")
    assert kmod.holders(sysfs) == ["nvidia_modeset", "nvidia_uvm", "nvidia_drm"]
    assert kmod.blocking(sysfs, procfs) == ("nvidia_drm", "nvidia_modeset")
    assert kmod.describe(("nvidia_drm", "nvidia_modeset"), procfs) == (
        "nvidia_drm (use count 4), nvidia_modeset (use count 5: nvidia_drm)")
    assert kmod.blocking(str(tmp_path / "none"), str(tmp_path / "none")) == ()


def test_signal_is_held_back_while_shielded() -> None:
    interrupt.install()
    try:
        with pytest.raises(interrupt.Interrupted, match="SIGHUP"), interrupt.shielded():
            os.kill(os.getpid(), signal.SIGHUP)
            os.kill(os.getpid(), signal.SIGTERM)
            done = True
        assert done
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        for signum in interrupt.SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
