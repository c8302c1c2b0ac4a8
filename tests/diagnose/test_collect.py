"""Node-side collection stays bounded: a command past its time is stopped (with its children), an item past its
size is cut, the bundle past its size leaves items out and says so in the manifest; a missing file or tool is a
manifest entry, not a failure."""

from __future__ import annotations

import json
import sys
import tarfile
import time

from gpu_provision.node import __main__ as node_main
from gpu_provision.node.diagnose import bounded, collect


def test_command_past_its_time_is_stopped_with_its_children():
    started = time.monotonic()
    data, entry = bounded.run(["sh", "-c", "echo started; sleep 30 & sleep 30"], 0.5)
    assert time.monotonic() - started < 10
    assert data == b"started\n" and entry["rc"] is None and entry["error"] == "stopped after 0.5s"


def test_output_and_files_cut_to_their_bound(tmp_path):
    data, entry = bounded.run([sys.executable, "-c", "print('x' * 5000)"], 10, limit=100)
    assert len(data) == 100 and entry["truncated"] and entry["rc"] == 0
    big = tmp_path / "big.conf"
    big.write_text("y" * 300)
    data, entry = bounded.read(str(big), limit=10)
    assert data == b"y" * 10 and entry["truncated"]


def test_missing_tool_and_file_are_entries():
    assert bounded.run(["gpu-provision-no-such-tool"], 5)[1]["error"].startswith("FileNotFoundError")
    assert bounded.read("/nonexistent/daemon.json")[1]["error"].startswith("FileNotFoundError")


def test_bundle_past_its_bound_lists_what_it_left_out(tmp_path):
    path = tmp_path / "b.tar.gz"
    found = [("a.txt", b"a" * 60, {"source": "a"}), ("b.txt", b"b" * 60, {"source": "b"}),
             ("c.txt", b"c", {"source": "c"})]
    manifest = collect.write_archive(str(path), {"images": []}, found=found, budget=bounded.Budget(total=100))
    by_name = {item["name"]: item for item in manifest["items"]}
    assert by_name["a.txt"]["bytes"] == 60 and by_name["b.txt"]["truncated"] and by_name["b.txt"]["bytes"] == 40
    assert by_name["c.txt"]["left_out"] == "bundle size bound reached"
    with tarfile.open(path) as archive:
        assert archive.getnames() == ["a.txt", "b.txt", "manifest.json"]
        assert json.loads(archive.extractfile("manifest.json").read())["items"] == manifest["items"]


def test_configured_files_and_folders_are_read(tmp_path):
    (tmp_path / "modprobe.d").mkdir()
    (tmp_path / "modprobe.d" / "blacklist-nouveau.conf").write_text("blacklist nouveau\n")
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{}")
    names = [name for name, _, _ in collect.file_items([str(daemon), str(tmp_path / "absent")],
                                                       [str(tmp_path / "modprobe.d")])]
    assert names == [f"files{daemon}", f"files{tmp_path}/modprobe.d/blacklist-nouveau.conf"]


def test_user_groups_and_device_listing(tmp_path):
    name, data, _ = collect.users_item(["root", "gpu-provision-no-such-user"])
    users = json.loads(data)
    assert name == "system/users.json" and "root" in users["root"] and users["gpu-provision-no-such-user"] is None
    (tmp_path / "nvidia0").write_text("")
    devices = json.loads(collect.devices_item(str(tmp_path / "nvidia*"))[1])
    assert list(devices) == [str(tmp_path / "nvidia0")] and set(devices[str(tmp_path / "nvidia0")]) == {
        "mode", "uid", "gid", "group"}


def test_nvidia_pci_functions_with_their_bound_driver(tmp_path):
    for address, vendor, klass in (("0000:17:00.0", "0x10de", "0x030200"), ("0000:18:00.0", "0x10de", "0x030200"),
                                   ("0000:00:1f.0", "0x8086", "0x060100")):
        (tmp_path / address).mkdir()
        for name, value in (("vendor", vendor), ("device", "0x2335"), ("class", klass)):
            (tmp_path / address / name).write_text(value + "\n")
    (tmp_path / "0000:17:00.0" / "driver").symlink_to("../../../bus/pci/drivers/nouveau")
    name, data, entry = collect.pci_item(str(tmp_path))
    assert name == "system/pci.json" and entry == {"source": str(tmp_path)}
    assert json.loads(data) == {
        "0000:17:00.0": {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "driver": "nouveau"},
        "0000:18:00.0": {"vendor": "0x10de", "device": "0x2335", "class": "0x030200", "driver": None}}


def test_diagnose_is_an_entry_of_the_node_package():
    assert node_main.ENTRIES["diagnose"] == ".diagnose"


def test_bug_report_read_back_bounded(tmp_path, monkeypatch):
    tool = tmp_path / "bin" / "nvidia-bug-report.sh"
    tool.parent.mkdir()
    tool.write_text('#!/bin/sh\n# --output-file NAME writes NAME.gz, as NVIDIA\'s script does\n'
                    'printf "nvidia-bug-report.sh\\npassword=hunter2\\n%0200d\\n" 0 | gzip > "$2.gz"\n')
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}:/usr/bin:/bin")
    name, data, entry = collect.bug_report_item(seconds=30, limit=40)
    assert name == "nvidia-bug-report.log" and entry["rc"] == 0 and entry["truncated"]
    assert data.startswith(b"nvidia-bug-report.sh\npassword=hunter2") and len(data) == 40
    path = tmp_path / "b.tar.gz"
    collect.write_archive(str(path), {}, found=[(name, data, entry)])
    with tarfile.open(path) as archive:
        assert b"hunter2" not in archive.extractfile(name).read()
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert collect.bug_report_item() is None
