"""The probe's modules kept on the node by content digest, so that later checks send a short command.

The full probe command (its modules zipped in the command itself) calls :func:`store` before it answers: the
modules are extracted into ``ROOT/DIGEST``, where ``ROOT`` is a directory owned by root and closed to everyone else
(mode 0700). The short command then imports them from there (Python keeps their compiled form beside them, so
later runs skip compiling too) after checking, with :func:`usable`, that ``ROOT`` is still root's alone. A copy is
written into a fresh temporary directory and renamed into place, so a reader sees all of it or none; other
digests (older versions of the probe) are removed once a new one is in place.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile


def usable(root: str) -> bool:
    """Whether ``root`` is a real directory owned by root and closed to group and others (no symlink)."""
    try:
        info = os.lstat(root)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == 0 and not info.st_mode & 0o077


def store(archive, root: str, digest: str) -> bool:
    """Keep the modules of ``archive`` (an open ``zipfile.ZipFile``) under ``root/digest``; True when a copy is
    there afterwards. Only root stores (the short command trusts nothing else), and a failure to store never
    stops the probe: it only means the next check sends the full command again."""
    if os.geteuid() != 0:
        return False
    target = os.path.join(root, digest)
    try:
        os.makedirs(root, mode=0o700, exist_ok=True)
        if not usable(root):
            return False
        if os.path.isdir(target):
            return True
        staging = tempfile.mkdtemp(prefix="." + digest + ".", dir=root)
        try:
            archive.extractall(staging)
            os.rename(staging, target)
        except OSError:
            shutil.rmtree(staging, ignore_errors=True)
            return os.path.isdir(target)  # another run put the same copy in place first
        for name in os.listdir(root):
            if name != digest and not name.startswith("."):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
    except OSError:
        return False
    return True
