"""Readable file differences: a unified diff of a differing file's content, secrets hidden, in text and JSON."""

from __future__ import annotations

import jsonschema
import pytest
from drift_samples import DAEMON_JSON
from test_compare import CLUSTER, NODE

from gpu_provision.desired import FileWant, sha256
from gpu_provision.diff import file_diff, redact
from gpu_provision.drift import FleetReport, NodeReport, node_differences, node_request
from gpu_provision.drift.schema import REPORT_SCHEMA
from gpu_provision.state import FileState, NodeStateData


@pytest.mark.parametrize(("line", "hidden"), [
    ("Environment=HTTPS_PROXY=http://svc:hunter2@proxy.internal:3128", "http://***:***@proxy.internal:3128"),
    ("password=hunter2", "password=***"),
    ('  "registry_token": "abc.def",', '  "registry_token": "***",'),
    ("kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef", "--token ***"),
    ("Authorization: Bearer eyJhbGciOi", "Authorization: Bearer ***"),
])
def test_secrets_are_hidden(line, hidden):
    assert hidden in redact(line)
    assert "hunter2" not in redact(line) and "eyJhbG" not in redact(line) and "0123456789abcdef" not in redact(line)


def test_plain_lines_are_left_alone():
    line = 'options nvidia NVreg_DeviceFileMode=0660 "default-runtime": "nvidia"'
    assert redact(line) == line


def test_file_diff_goes_from_the_node_to_the_cluster_file():
    want = FileWant("/etc/x.conf", content="a\nproxy=http://u:p@h:1\nc\n")
    current = FileState(exists=True, type="file", content="a\nb\nc\n", sha256=sha256("a\nb\nc\n"))
    assert file_diff(want, current) == ("--- /etc/x.conf (on the node)\n+++ /etc/x.conf (cluster file)\n"
                                       "@@ -1,3 +1,3 @@\n a\n-b\n+proxy=http://***:***@h:1\n c")
    assert file_diff(want, FileState(exists=True, type="file", sha256="0" * 64)) is None
    assert file_diff(want, FileState(exists=False)).startswith("--- /dev/null\n+++ /etc/x.conf (cluster file)\n"
                                                              "@@ -0,0 +1,3 @@\n+a\n")
    assert file_diff(FileWant("/bin/x", content=b"\x00"), current) is None


def test_drift_asks_for_the_text_of_every_file_it_compares(stages):
    request = node_request(NODE, CLUSTER, stages)
    assert request.contents == request.files


def test_a_differing_file_shows_as_a_diff_in_text_and_json(stages, in_sync):
    edited = DAEMON_JSON.replace("nvidia", "runc")
    in_sync["files"]["/etc/docker/daemon.json"].update(sha256=sha256(edited), content=edited)
    comparison = node_differences(NODE, CLUSTER, NodeStateData(in_sync), stages)
    assert list(comparison.diffs) == ["/etc/docker/daemon.json"]
    node = NodeReport(name="gpu-01", address="10.0.0.1", differences=comparison.differences, diffs=comparison.diffs)
    report = FleetReport(nodes=[node], stages=["runtime"])
    text = report.render().splitlines()
    assert text[1] == "  runtime: file /etc/docker/daemon.json: content differs (- on the node, + expected):"
    assert '      -  "default-runtime": "runc"' in text and '      +  "default-runtime": "nvidia"' in text
    doc = report.to_json()
    jsonschema.validate(doc, REPORT_SCHEMA)
    (difference,) = doc["nodes"][0]["differences"]
    assert difference["expected"].startswith("sha256 ") and '+  "default-runtime": "nvidia"' in difference["diff"]


def test_pyinfra_diff_shows_the_same_content_diff_for_managed_files(caplog):
    """``pyinfra ... --dry --diff``: the file operation logs what it will write, as a diff, secrets hidden."""
    import logging
    from types import SimpleNamespace

    from fakehost import FakeHost, run_op

    from gpu_provision.operations import files

    class DiffHost(FakeHost):
        def __init__(self, raw):  # type: ignore[no-untyped-def]
            super().__init__(raw)
            self.state = SimpleNamespace(is_executing=False, config=SimpleNamespace(DIFF=True))

        def log(self, message: str, log_func) -> None:  # type: ignore[no-untyped-def]
            log_func(message)

    old = "[Service]\nEnvironment=HTTPS_PROXY=http://svc:old@proxy:3128\n"
    new = "[Service]\nEnvironment=HTTPS_PROXY=http://svc:hunter2@proxy:3128\n"
    raw = {"files": {"/etc/a.conf": {"exists": True, "type": "file", "mode": "0644", "owner": "root",
                                     "group": "root", "sha256": sha256(old), "content": old}}}
    with caplog.at_level(logging.INFO, logger="pyinfra"):
        run_op(files.wants, DiffHost(raw), [FileWant("/etc/a.conf", content=new), FileWant("/etc/b.conf", content="x\n")])
    text = caplog.text
    assert "Will modify /etc/a.conf" in text and "Will create /etc/b.conf" in text
    assert "+Environment=HTTPS_PROXY=http://***:***@proxy:3128" in text and "+x" in text
    assert "hunter2" not in text and "old@" not in text


def test_gpus_that_differ_alike_share_one_line():
    from gpu_provision.desired import Difference

    same = [Difference("mig-layout", f"GPU {i}", "1g.18gb x7", "MIG disabled", "mig") for i in range(8)]
    other = Difference("mig-layout", "GPU 9", "1g.18gb x7", "MIG disabled", "mig")
    package = Difference("package", "containerd", "1.7", "1.6", "runtime")
    node = NodeReport(name="gpu-01", address="", differences=[package, *same, other])
    lines = FleetReport(nodes=[node], stages=["mig"]).render().splitlines()
    assert lines[1:4] == ["  runtime: package containerd: expected 1.7, found 1.6",
                          "  mig: mig-layout GPU 0-7: expected 1g.18gb x7, found MIG disabled",
                          "  mig: mig-layout GPU 9: expected 1g.18gb x7, found MIG disabled"]
    assert len(node.to_json()["differences"]) == 10


def test_the_probe_returns_text_of_small_text_files_only(tmp_path):
    from gpu_provision.node.probe import files as probe_files

    text, binary, large = tmp_path / "a.conf", tmp_path / "bundle.pyz", tmp_path / "big.conf"
    text.write_text("password=x\n")
    binary.write_bytes(b"PK\x03\x04\xff\xfe")
    large.write_text("x" * (probe_files.MAX_CONTENT + 1))
    paths = [str(text), str(binary), str(large)]
    answer = probe_files.collect({"paths": paths, "content": paths})
    assert answer[str(text)]["content"] == "password=x\n"
    assert "content" not in answer[str(binary)] and "content" not in answer[str(large)]
    assert all(answer[p]["sha256"] for p in paths)
