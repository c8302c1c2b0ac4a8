"""The node-side key fetch against a real HTTP server and gpg, and the URL placeholders per OS."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_provision.operations import repos


@pytest.fixture
def armored_key(tmp_path: Path) -> Iterator[Path]:
    """A freshly generated public key, ASCII-armored, as a repository would publish it.

    Key generation starts a gpg-agent for the temporary home; it is stopped afterwards so no process outlives the test.
    """
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed")
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    env = {**os.environ, "GNUPGHOME": str(home)}
    subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "repo@example.org", "ed25519", "sign",
                    "never"], env=env, check=True, capture_output=True)
    key = tmp_path / "key.asc"
    key.write_bytes(subprocess.run(["gpg", "--armor", "--export", "repo@example.org"], env=env, check=True,
                                   capture_output=True).stdout)
    yield key
    subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False, capture_output=True)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    """Base URL of an HTTP server on loopback serving ``tmp_path``."""
    handler = lambda *a: http.server.SimpleHTTPRequestHandler(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_key_is_fetched_and_dearmored_like_gpg(armored_key: Path, served: str, tmp_path: Path) -> None:
    dest = tmp_path / "keyrings" / "cuda.gpg"
    subprocess.run([sys.executable, "-c", repos._FETCH_KEY, f"{served}/key.asc", str(dest)], check=True)
    expected = subprocess.run(["gpg", "--dearmor"], input=armored_key.read_bytes(), check=True,
                              capture_output=True).stdout
    assert dest.read_bytes() == expected
    assert oct(dest.stat().st_mode & 0o777) == "0o644"


def test_binary_key_is_kept_as_is(served: str, tmp_path: Path) -> None:
    (tmp_path / "key.gpg").write_bytes(b"\x99\x01\x0dbinary")
    dest = tmp_path / "out.gpg"
    subprocess.run([sys.executable, "-c", repos._FETCH_KEY, f"{served}/key.gpg", str(dest)], check=True)
    assert dest.read_bytes() == b"\x99\x01\x0dbinary"


def test_keyring_is_replaced_through_an_unpredictable_name_beside_it(served: str, tmp_path: Path) -> None:
    (tmp_path / "key.gpg").write_bytes(b"\x99new")
    dest = tmp_path / "out.gpg"
    dest.write_bytes(b"\x99old")
    subprocess.run([sys.executable, "-c", repos._FETCH_KEY, f"{served}/key.gpg", str(dest)], check=True)
    assert dest.read_bytes() == b"\x99new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["key.gpg", "out.gpg"]
    assert "mkstemp(dir=d" in repos._FETCH_KEY and "'.tmp'" not in repos._FETCH_KEY
    assert "os.fsync" in repos._FETCH_KEY


def test_unreachable_key_fails_without_leaving_a_keyring(served: str, tmp_path: Path) -> None:
    dest = tmp_path / "out.gpg"
    proc = subprocess.run([sys.executable, "-c", repos._FETCH_KEY, f"{served}/missing", str(dest)],
                          capture_output=True)
    assert proc.returncode != 0 and not dest.exists()


@pytest.mark.parametrize(("system", "expected"), [
    ({"os_id": "ubuntu", "os_version": "24.04", "codename": "noble", "arch": "x86_64"},
     {"distro": "ubuntu2404", "os": "ubuntu", "arch": "amd64", "cuda_arch": "x86_64", "pkgformat": "deb"}),
    ({"os_id": "ubuntu", "os_version": "22.04", "codename": "jammy", "arch": "aarch64"},
     {"distro": "ubuntu2204", "arch": "arm64", "cuda_arch": "sbsa"}),
    ({"os_id": "debian", "os_version": "12", "codename": "bookworm", "arch": "x86_64"},
     {"distro": "debian12", "os": "debian", "codename": "bookworm"}),
    ({"os_id": "rocky", "os_like": "rhel centos fedora", "os_version": "9.4", "arch": "x86_64"},
     {"distro": "rhel9", "os": "rhel", "arch": "x86_64", "pkgformat": "rpm"}),
    ({"os_id": "rhel", "os_version": "9.4", "arch": "aarch64"}, {"distro": "rhel9", "cuda_arch": "sbsa"}),
])
def test_placeholders(system: dict[str, str], expected: dict[str, str]) -> None:
    values = repos.placeholders(system, "1.31")
    assert {k: values[k] for k in expected} == expected
    assert values["k8s_minor"] == "1.31"
