"""The probe reads installed versions and holds from dpkg's own status database, in place: no ``dpkg-query``
process and no ``apt-mark showhold`` (whose load of apt's cache cost each checked node about 20 ms of CPU), and
the same answer as ``dpkg-query`` gives, which it still asks while dpkg's journal holds unfolded changes."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_provision.node.probe import _command, _dpkg, packages

STATUS = """\
Package: containerd
Status: hold ok installed
Priority: optional
Version: 1.6.20~ds1-1
Description: daemon to control runC
 containerd is a daemon.
 .
 Package: not-a-paragraph

Package: nvidia-driver
Status: install ok installed
Architecture: amd64
Version: 580.159.04-1

Package: kubelet
Status: hold ok not-installed

Package: sudo
Status: install ok unpacked
Version: 1.9.13p3-1

Package: nvidia-driver-libs
Status: install ok installed
Version: 580.159.04-1

Package: libc6
Status: install ok installed
Architecture: i386
Version: 2.36-9

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9
"""


@pytest.fixture
def admin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "updates").mkdir()
    (tmp_path / "status").write_text(STATUS)
    monkeypatch.setattr(_dpkg, "ADMIN_DIR", str(tmp_path))
    return tmp_path


def test_versions_and_holds_come_from_the_status_file_without_a_process(admin_dir: Path, monkeypatch) -> None:
    ran: list[list[str]] = []
    monkeypatch.setattr(_command, "run", lambda argv, *a, **k: ran.append(argv) or (0, ""))
    real = os.path.exists
    monkeypatch.setattr(packages.os.path, "exists", lambda p: p == "/usr/bin/dpkg-query" or
                        (p != "/usr/bin/rpm" and real(p)))
    out = packages.collect({"names": ["containerd", "nvidia-driver", "kubelet", "sudo", "absent", "Package:"]})
    assert ran == []
    assert out == {"manager": "apt", "packages": {
        "Package:": {"version": None, "held": False},          # a description line is no paragraph
        "absent": {"version": None, "held": False},
        "containerd": {"version": "1.6.20~ds1-1", "held": True},   # installed and held
        "kubelet": {"version": None, "held": True},                # held, not installed: no version
        "nvidia-driver": {"version": "580.159.04-1", "held": False},  # a longer name is another package
        "sudo": {"version": None, "held": False}}}                 # unpacked, not configured: no version


def test_prefixes_list_the_installed_packages_whose_names_start_with_them(admin_dir: Path, monkeypatch) -> None:
    # The driver stage asks for "nvidia-driver-pinning-" this way: it cannot name another driver's pinning package.
    real = os.path.exists
    monkeypatch.setattr(packages.os.path, "exists", lambda p: p == "/usr/bin/dpkg-query" or
                        (p != "/usr/bin/rpm" and real(p)))
    out = packages.collect({"names": ["containerd"], "prefixes": ["nvidia-driver", "kube", "none-"]})
    # kubelet is held but not installed, so its prefix lists nothing; the listed ones are answered in full too.
    assert out["prefixed"] == {"kube": [], "none-": [], "nvidia-driver": ["nvidia-driver", "nvidia-driver-libs"]}
    assert out["packages"]["nvidia-driver-libs"] == {"version": "580.159.04-1", "held": False}
    assert out["packages"]["containerd"] == {"version": "1.6.20~ds1-1", "held": True}
    assert "prefixed" not in packages.collect({"names": ["containerd"]})


def test_rpm_prefixes_are_one_query_and_answered_in_full(monkeypatch) -> None:
    ran: list[list[str]] = []

    def rpm(argv, *a, **k):  # type: ignore[no-untyped-def]
        ran.append(argv)
        if "-qa" in argv:
            return 0, "nvidia-driver-pinning-580\n"
        return 0, "nvidia-driver-pinning-580\t580-1\n"

    monkeypatch.setattr(_command, "run", rpm)
    monkeypatch.setattr(packages, "_run", lambda argv: rpm(argv)[1])
    monkeypatch.setattr(packages.os.path, "exists", lambda p: p == "/usr/bin/rpm")
    out = packages.collect({"names": [], "prefixes": ["nvidia-driver-pinning-"]})
    assert out["prefixed"] == {"nvidia-driver-pinning-": ["nvidia-driver-pinning-580"]}
    assert out["packages"]["nvidia-driver-pinning-580"] == {"version": "580-1", "held": False}
    assert ran[0][:2] == ["rpm", "-qa"] and ran[0][-1] == "nvidia-driver-pinning-*"


def test_entries_by_exact_name_and_by_prefix(admin_dir: Path) -> None:
    assert _dpkg.entries(["libc6"]) == [("libc6", "2.36-9", "ii "), ("libc6", "2.36-9", "ii ")]  # both arches
    assert _dpkg.entries(prefix="nvidia-driver") == [("nvidia-driver", "580.159.04-1", "ii "),
                                                     ("nvidia-driver-libs", "580.159.04-1", "ii ")]
    assert _dpkg.entries([]) == []


def test_a_journal_waiting_under_updates_is_read_through_dpkg_query(admin_dir: Path, monkeypatch) -> None:
    """dpkg journals each change of an unfinished run under ``updates/``: the status file alone is then stale."""
    (admin_dir / "updates" / "0000").write_text("Package: sudo\nStatus: install ok installed\nVersion: 1.9.13p3-1\n")
    ran: list[list[str]] = []
    monkeypatch.setattr(_command, "output", lambda argv, *a: ran.append(argv) or "sudo\t1.9.13p3-1\tii \n")
    assert _dpkg.entries(["sudo"]) == [("sudo", "1.9.13p3-1", "ii ")]
    assert ran == [["dpkg-query", "--admindir", str(admin_dir), "-W", "-f",
                    "${Package}\t${Version}\t${db:Status-Abbrev}\n", "sudo"]]
    (admin_dir / "updates" / "0000").unlink()
    (admin_dir / "updates" / "tmp.i").write_text("")  # dpkg's scratch file is no journal entry
    assert _dpkg.entries(["sudo"]) == [("sudo", "1.9.13p3-1", "iU ")]
    assert len(ran) == 1


def test_a_hanging_dpkg_query_is_an_error_never_an_absent_package(admin_dir: Path, tmp_path_factory,
                                                                 monkeypatch) -> None:
    (admin_dir / "updates" / "0001").write_text("")
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\nexec sleep 30\n")
    (bin_dir / "dpkg-query").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    _command.start(4)
    with pytest.raises(_command.TimedOut, match="timed out after 1 s: dpkg-query --admindir"):
        _dpkg.entries(["bash"])


@pytest.mark.skipif(not shutil.which("dpkg-query") or not os.path.exists("/var/lib/dpkg/status"),
                    reason="needs this machine's dpkg database")
def test_the_status_file_answers_as_dpkg_query_does_for_every_package_of_this_machine() -> None:
    """Every package this machine's dpkg knows: the same name, version and state letters both ways."""
    listed = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\n"], capture_output=True, text=True, check=True)
    names = sorted(set(listed.stdout.split()))
    assert len(names) > 50
    by_file = _dpkg.entries(names, admin_dir="/var/lib/dpkg")
    by_query = _dpkg._query(names, None, "/var/lib/dpkg")
    assert sorted(by_file) == sorted(by_query)
    # With a pattern, dpkg-query also lists packages only its "available" file knows ("un": neither installed
    # nor held), which no reading of the probe tells from an unknown package.
    def known(entries: list[tuple[str, str, str]]) -> list[tuple[str, str, str]]:
        return sorted(e for e in entries if e[2][1:2] == "i" or e[2][:1] == "h")

    by_prefix = _dpkg.entries(prefix="lib", admin_dir="/var/lib/dpkg")
    assert len(by_prefix) > 20 and known(by_prefix) == known(_dpkg._query([], "lib", "/var/lib/dpkg"))


def test_rpm_nodes_answer_every_name_from_one_rpm_process(monkeypatch) -> None:
    ran: list[list[str]] = []
    answer = ("nvidia-driver\t580.159.04-1.el9\n"
              "package kubelet is not installed\n"
              "containerd.io\t1.7.27-3.1.el9\n")
    monkeypatch.setattr(packages._command, "output", lambda argv: ran.append(argv) or answer)
    monkeypatch.setattr(packages.os.path, "exists", lambda p: p == "/usr/bin/rpm")
    out = packages.collect({"names": ["nvidia-driver", "kubelet", "containerd.io"]})
    assert ran == [["rpm", "-q", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n", "containerd.io", "kubelet",
                    "nvidia-driver"]]
    assert out["manager"] == "dnf" and out["packages"] == {
        "containerd.io": {"version": "1.7.27-3.1.el9", "held": False},
        "kubelet": {"version": None, "held": False},
        "nvidia-driver": {"version": "580.159.04-1.el9", "held": False}}


def test_a_node_without_dpkg_starts_no_process_for_it(tmp_path: Path, monkeypatch) -> None:
    """An rpm node's system section asks for Ubuntu's precompiled module packages too: no database, no process."""
    ran: list[list[str]] = []
    monkeypatch.setattr(_command, "run", lambda argv, *a, **k: ran.append(argv) or (0, ""))
    monkeypatch.setattr(_command, "available", lambda name: False)
    assert _dpkg.entries(prefix="linux-modules-nvidia-", admin_dir=str(tmp_path / "no-dpkg")) == []
    assert ran == []
