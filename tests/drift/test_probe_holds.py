"""The probe reads package holds from dpkg's own status (the selection ``hold``, first letter of
``db:Status-Abbrev``), in the one ``dpkg-query`` it runs for versions: no ``apt-mark showhold``, whose load of
apt's cache cost each checked node about 20 ms of CPU."""

from __future__ import annotations

import os

from gpu_provision.node.probe import packages


def test_holds_and_versions_come_from_one_dpkg_query(monkeypatch) -> None:
    ran: list[list[str]] = []
    answer = ("containerd\t1.6.20~ds1-1\thi \n"      # installed and held
              "nvidia-driver\t580.159.04-1\tii \n"   # installed, not held
              "kubelet\t\thn \n"                      # held, not installed
              "sudo\t1.9.13p3-1\tiU \n")              # unpacked, not configured: no version
    monkeypatch.setattr(packages._command, "output", lambda argv: ran.append(argv) or answer)
    real = os.path.exists
    monkeypatch.setattr(packages.os.path, "exists", lambda p: p == "/usr/bin/dpkg-query" or
                        (p != "/usr/bin/rpm" and real(p)))
    out = packages.collect({"names": ["containerd", "nvidia-driver", "kubelet", "sudo", "absent"]})
    assert [argv[0] for argv in ran] == ["dpkg-query"]
    assert out == {"manager": "apt", "packages": {
        "absent": {"version": None, "held": False},
        "containerd": {"version": "1.6.20~ds1-1", "held": True},
        "kubelet": {"version": "", "held": True},
        "nvidia-driver": {"version": "580.159.04-1", "held": False},
        "sudo": {"version": None, "held": False}}}
