"""The benchmark's own parts that decide its verdicts: the three renderings of one workload stay equivalent, and
the parsers that read "in sync" and command counts out of the tools' output."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from bench.playbook import write_playbook  # noqa: E402
from bench.tools import pyinfra_changes  # noqa: E402
from bench.workload import Workload, converge_script  # noqa: E402
from gpu_provision.desired import FileWant, GroupWant, PackageWant, UnitWant  # noqa: E402

VERSIONS = {"openssh-server": "1:9.2p1-2+deb12u10", "sudo": "1.9.13p3-1+deb12u4", "kmod": "30+20221128-1",
            "dbus": "1.14.10-1~deb12u1"}

PYINFRA_DRY = """\
--> Detected changes:
    Operation                                        Change       Conditional Change
    Pinned packages                                  -            -
    Config /etc/gpu-provision-bench/bench-003.conf   2 (b1, b2)   -
    Service ssh.service                              1 (b2)       -

    Detected changes may not include every change pyinfra will execute.
"""


def test_workload_renders_the_same_items_for_every_tool(tmp_path):
    workload = Workload(VERSIONS, files=5)
    wants = workload.wants()
    assert sum(isinstance(w, PackageWant) for w in wants) == 4
    assert [w.name for w in wants if isinstance(w, PackageWant) and w.held] == ["kmod", "openssh-server", "sudo"]
    assert [w.path for w in wants if isinstance(w, FileWant)] == workload.file_paths
    assert [w.name for w in wants if isinstance(w, UnitWant)] == ["ssh.service", "systemd-networkd.service"]
    assert [w.name for w in wants if isinstance(w, GroupWant)] == ["gpu-bench"]

    play = yaml.safe_load(write_playbook(tmp_path, workload.to_json()).read_text())[0]
    modules = [next(k for k in task if k.startswith("ansible.")) for task in play["tasks"]]
    assert modules.count("ansible.builtin.copy") == 5
    assert modules.count("ansible.builtin.systemd") == 2
    assert play["tasks"][0]["ansible.builtin.apt"]["name"] == [f"{n}={v}" for n, v in sorted(VERSIONS.items())]
    assert play["tasks"][1]["loop"] == ["openssh-server", "sudo", "kmod"]
    assert workload.operations == 1 + 5 + 2 + 2
    assert Workload.from_json(json.loads(json.dumps(workload.to_json()))) == workload


def test_converge_script_writes_every_file_of_the_larger_workload():
    script = converge_script(Workload(VERSIONS, files=2), max_files=4)
    assert script.count("printf %s") == 4
    assert "apt-mark hold openssh-server sudo kmod" in script


def test_pyinfra_change_column_is_summed():
    assert pyinfra_changes(PYINFRA_DRY) == 3
    assert pyinfra_changes(PYINFRA_DRY.replace("2 (b1, b2)", "-").replace("1 (b2)  ", "-       ")) == 0


def test_the_fleets_simulated_gpus_pass_verification(tmp_path):
    """The simulated node the bench lays out in the fleet's root, laid out here under a temporary path: the
    verification agent run on its expectations passes every check it makes (the CUDA checks skip: no libcuda)."""
    import subprocess

    from bench import simgpu

    node = str(tmp_path / "node")
    simgpu.lay_out(Path("/"), node)
    for line in simgpu.converge_lines(node):
        subprocess.run(["/bin/sh", "-c", line], check=True, timeout=60)
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps(simgpu.expectations(node)))
    done = subprocess.run([sys.executable, "-m", "gpu_provision.node", "verify", "--expect", str(expect)],
                          cwd=Path(__file__).resolve().parents[2], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout)
    assert report["status"] == "pass", [c for c in report["checks"] if c["status"] == "fail"]
    assert done.returncode == 0 and report["summary"]["pass"] >= 10
    assert [g["uuid"] for g in report["host"]["gpus"]] == [g["uuid"] for g in simgpu.GPUS]
