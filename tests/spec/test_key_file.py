"""A mirror's signing key as a file on the controller (``key_file``): read and checked when the cluster file loads,
refused with a located message when it is not a usable key; ``file://`` key URLs stay refused and point to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_provision.cli import main
from gpu_provision.spec import keyfile, load_cluster

#: An OpenPGP public-key packet (old format, tag 6, two-byte length) with a made-up body: the reader checks the
#: packet tag, not the key material, which apt and rpm check on the node.
KEY = b"\x99\x00\x0d\x04" + bytes(range(13))

CLUSTER = """version: v1
cluster:
  name: t
  kubernetes: {{enabled: false}}
  mirrors:
    cuda:
      url: http://mirror.internal/cuda/
{key}
nodes:
  - {{name: n1, address: 10.0.0.1}}
"""


def _write(tmp_path: Path, key_lines: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(CLUSTER.format(key=key_lines))
    return path


def _errors(path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    assert main(["validate", str(path)]) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return err.strip().splitlines()


@pytest.mark.parametrize("form", ["binary", "armored"])
def test_a_key_file_relative_to_the_cluster_file_replaces_the_key_url(tmp_path: Path, form: str) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "cuda.key").write_bytes(KEY if form == "binary" else keyfile.armor(KEY).encode())
    cluster = load_cluster(_write(tmp_path, "      key_file: keys/cuda.key"))
    repo = cluster.mirrors.cuda
    assert repo.key_file == str(tmp_path / "keys" / "cuda.key")
    assert repo.key_url is None  # the upstream key URL does not stay behind
    assert keyfile.read_key(repo.key_file) == KEY
    # Mirrors left alone keep their upstream key URL.
    assert cluster.mirrors.docker.key_url and cluster.mirrors.docker.key_file is None


def test_armor_round_trips_with_its_checksum() -> None:
    text = keyfile.armor(KEY)
    assert text.startswith(keyfile.ARMOR_BEGIN + "\n\n") and text.rstrip().endswith(keyfile.ARMOR_END)
    checksum = text.splitlines()[-2]
    assert checksum.startswith("=") and len(checksum) == 5
    assert keyfile._crc24(b"") == 0xB704CE  # RFC 4880's CRC24_INIT: the checksum of nothing


def test_file_key_urls_are_refused_pointing_to_key_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (line,) = _errors(_write(tmp_path, "      key_url: file:///etc/shadow"), capsys)
    assert line.startswith(f"{tmp_path}/cluster.yaml:8:16: $.cluster.mirrors.cuda.key_url: ")
    assert "a key in a local file goes in key_file" in line


@pytest.mark.parametrize(("lines", "where", "message"), [
    ("      key_file: missing.key", "8:17: $.cluster.mirrors.cuda.key_file", "cannot read key file"),
    ("      key_file: not-a-key.txt", "8:17: $.cluster.mirrors.cuda.key_file", "holds no OpenPGP public key"),
    ("      key_file: /dev/zero", "8:17: $.cluster.mirrors.cuda.key_file", "not a regular file"),
    ("      key_file: keys", "8:17: $.cluster.mirrors.cuda.key_file", "is a directory"),
    ("      key_file: http://mirror.internal/key", "8:17: $.cluster.mirrors.cuda.key_file",
     "a file path on the controller"),
    ("      key_url: http://mirror.internal/key\n      key_file: cuda.key", "9:7: $.cluster.mirrors.cuda.key_file",
     "give key_url or key_file, not both"),
    ("", "6:5: $.cluster.mirrors.cuda", "missing required key 'key_url' (or key_file"),
])
def test_unusable_key_files_are_located_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], lines: str,
                                               where: str, message: str) -> None:
    (tmp_path / "not-a-key.txt").write_text("hello\n")
    (tmp_path / "cuda.key").write_bytes(KEY)
    (tmp_path / "keys").mkdir()
    errors = _errors(_write(tmp_path, lines), capsys)
    assert any(e.startswith(f"{tmp_path}/cluster.yaml:{where}: ") and message in e for e in errors), errors


def test_a_fifo_as_key_file_is_refused_without_blocking(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    os.mkfifo(tmp_path / "fifo")
    (line,) = _errors(_write(tmp_path, "      key_file: fifo"), capsys)
    assert "key file is a device, FIFO or socket, not a regular file" in line
