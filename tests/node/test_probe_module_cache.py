"""The probe's modules kept on the node: the full command stores them (root only, in a directory closed to others,
moved into place whole), the short command runs that copy and answers as the full one does, and says "miss" where
there is no copy or the directory is not root's alone. Runs the real commands with a temporary cache directory."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_provision import bundle
from gpu_provision.node.probe import _cache

needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="only root stores the probe's modules")


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The probe commands with their cache directory under ``tmp_path``."""
    root = tmp_path / "probe"
    monkeypatch.setattr(bundle, "PROBE_CACHE", str(root))
    bundle._probe_loader.cache_clear()
    yield root
    bundle._probe_loader.cache_clear()


def probe(cached: bool) -> dict:
    done = subprocess.run(["sh", "-c", bundle.probe_command({"system": {}}, cached=cached)], capture_output=True,
                          text=True, timeout=120, cwd="/")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_short_command_without_a_copy_says_miss(cache_root: Path):
    assert probe(cached=True) == bundle.CACHE_MISS


@needs_root
def test_full_command_stores_a_copy_that_the_short_command_runs(cache_root: Path):
    full = probe(cached=False)
    assert sorted(os.listdir(cache_root)) == [bundle.probe_digest()]
    info = cache_root.stat()
    assert info.st_uid == 0 and info.st_mode & 0o777 == 0o700
    short = probe(cached=True)
    assert short.keys() == full.keys() == {"system"}
    assert short["system"]["os_id"] == full["system"]["os_id"]


@needs_root
def test_short_command_refuses_a_directory_others_may_write(cache_root: Path):
    probe(cached=False)
    cache_root.chmod(0o777)
    assert probe(cached=True) == bundle.CACHE_MISS


def archive(files: dict[str, str]) -> zipfile.ZipFile:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return zipfile.ZipFile(io.BytesIO(buffer.getvalue()))


@needs_root
def test_store_moves_a_whole_copy_into_place_and_drops_older_versions(tmp_path: Path):
    root = str(tmp_path / "probe")
    assert _cache.store(archive({"pkg/a.py": "A = 1\n"}), root, "old")
    assert _cache.store(archive({"pkg/a.py": "A = 2\n", "pkg/b.py": ""}), root, "new")
    assert sorted(os.listdir(root)) == ["new"]
    assert sorted(os.listdir(os.path.join(root, "new", "pkg"))) == ["a.py", "b.py"]
    assert _cache.store(archive({"pkg/a.py": "A = 3\n"}), root, "new")  # already there: kept as it is
    assert Path(root, "new", "pkg", "a.py").read_text() == "A = 2\n"


@needs_root
def test_store_does_not_use_a_directory_others_may_write(tmp_path: Path):
    root = tmp_path / "probe"
    root.mkdir(mode=0o755)
    root.chmod(0o755)
    assert not _cache.usable(str(root))
    assert not _cache.store(archive({"pkg/a.py": ""}), str(root), "d")
    assert os.listdir(root) == []
    link = tmp_path / "link"
    link.symlink_to(root)
    assert not _cache.usable(str(link))


@needs_root
def test_a_kept_probe_without_commands_imports_neither_json_re_nor_subprocess(cache_root: Path, tmp_path: Path):
    """The short command as drift sends it (isolated, no site), asked for files and accounts only: the modules that
    cost a node the most CPU at every check stay unloaded (json with re and enum, subprocess, hashlib's libcrypto),
    and the answer is still the sorted JSON the controller reads."""
    target = tmp_path / "watched.conf"
    target.write_text("x = 1\n")
    request = {"files": {"paths": [str(target)], "content": [str(target)]}, "accounts": {"groups": ["root"]}}
    probe(cached=False)  # keeps the copy
    argv = bundle.probe_argv(request, cached=True)
    loader = argv.index("-c") + 1
    argv[loader] = ("import atexit, sys\natexit.register(lambda: sys.stderr.write(' '.join(m for m in "
                    "('json', 're', 'subprocess', 'hashlib', 'contextlib') if m in sys.modules)))\n") + argv[loader]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["files"][str(target)]["content"] == "x = 1\n"
    assert answer["files"][str(target)]["sha256"] == hashlib.sha256(b"x = 1\n").hexdigest()
    assert answer["accounts"]["root"]["gid"] == 0
    assert done.stdout.strip() == json.dumps(answer, sort_keys=True)
    assert done.stderr == "", f"imported: {done.stderr}"
