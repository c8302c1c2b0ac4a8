"""A repository whose key is a file on the controller: the key is shipped, never fetched on the node; apt gets the
binary keyring ``Signed-By`` names, dnf an armored key its ``gpgkey=file://`` imports; both root-owned, mode 0644,
written atomically, and a node that already has them gets nothing."""

from __future__ import annotations

from pathlib import Path

from fakehost import FakeHost, run_op

from gpu_provision.desired import sha256
from gpu_provision.operations import repos
from gpu_provision.spec import keyfile
from gpu_provision.spec.model import Repository

KEY = b"\x99\x00\x0d\x04" + bytes(range(13))
DEBIAN = {"os_id": "debian", "os_version": "12", "codename": "bookworm", "arch": "x86_64"}
ROCKY = {"os_id": "rocky", "os_like": "rhel centos fedora", "os_version": "9.4", "arch": "x86_64"}


def _repo(tmp_path: Path) -> Repository:
    path = tmp_path / "cuda.asc"
    path.write_text(keyfile.armor(KEY))
    return Repository(url="http://10.77.0.1:8080/cuda/{distro}/{cuda_arch}/", key_file=str(path))


def test_apt_gets_the_binary_keyring_from_the_controller(tmp_path: Path) -> None:
    host = FakeHost({"system": DEBIAN, "packages": {"manager": "apt", "packages": {}}, "files": {}})
    commands = run_op(repos.apt_repository, host, "cuda", _repo(tmp_path))
    assert not any("urlopen" in str(c) for c in commands)  # nothing is fetched on the node
    assert commands[:2] == ["mkdir -p /etc/apt/keyrings", ["write", KEY, "/etc/apt/keyrings/cuda.gpg", "root:root",
                                                          "0644"]]
    source = commands[3]
    assert source[2] == "/etc/apt/sources.list.d/cuda.sources"
    assert "key from the key file cuda.asc on the controller" in source[1]
    assert "Signed-By: /etc/apt/keyrings/cuda.gpg" in source[1]


def test_apt_node_with_the_keyring_gets_nothing(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    fresh = FakeHost({"system": DEBIAN, "packages": {"manager": "apt", "packages": {}}, "files": {}})
    source_text = run_op(repos.apt_repository, fresh, "cuda", repo)[3][1]
    files = {
        "/etc/apt/keyrings/cuda.gpg": {"exists": True, "type": "file", "mode": "0644", "owner": "root",
                                       "group": "root", "sha256": sha256(KEY)},
        "/etc/apt/sources.list.d/cuda.sources": {"exists": True, "type": "file", "mode": "0644", "owner": "root",
                                                 "group": "root", "sha256": sha256(source_text),
                                                 "content": source_text},
    }
    host = FakeHost({"system": DEBIAN, "packages": {"manager": "apt", "packages": {}}, "files": files})
    assert run_op(repos.apt_repository, host, "cuda", repo) == []
    # A keyring someone made world-writable is put back to 0644, not rewritten.
    files["/etc/apt/keyrings/cuda.gpg"]["mode"] = "0666"
    host = FakeHost({"system": DEBIAN, "packages": {"manager": "apt", "packages": {}}, "files": files})
    assert run_op(repos.apt_repository, host, "cuda", repo) == ["chmod 0644 /etc/apt/keyrings/cuda.gpg"]


def test_dnf_gets_the_armored_key_and_imports_it_from_the_file(tmp_path: Path) -> None:
    host = FakeHost({"system": ROCKY, "packages": {"manager": "dnf", "packages": {}}, "files": {}})
    commands = run_op(repos.apt_repository, host, "cuda", _repo(tmp_path))
    assert commands[:2] == ["mkdir -p /etc/pki/rpm-gpg",
                            ["write", keyfile.armor(KEY), "/etc/pki/rpm-gpg/gpu-provision-cuda.asc", "root:root",
                             "0644"]]
    assert "gpgkey=file:///etc/pki/rpm-gpg/gpu-provision-cuda.asc\n" in commands[3][1]
