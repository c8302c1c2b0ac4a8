"""Paths a cluster file names: where files are written on nodes, and files read on the controller.

A path written on a node as root is confined: absolute, already in normal form (no ``..``, ``.``, ``//`` or trailing
``/``, so what is checked is what is written), portable file-name characters only, and inside one of the
directories documented for that setting. Without this a careless or hostile ``prometheus_scrape_file:
/etc/sudoers.d/x`` would have the deploy write a root-owned file anywhere. Files read on the controller (a CNI
manifest) must be regular files within the cluster file's size limit, read boundedly.
"""

from __future__ import annotations

import os
import posixpath
import re

from gpu_provision.errors import SpecError
from gpu_provision.spec.yamlsafe import read_bounded

#: Directories each node-path setting may write into (the file itself, or any depth below).
NODE_DIRS: dict[str, tuple[str, ...]] = {
    "prometheus_scrape_file": ("/etc/prometheus", "/etc/gpu-provision"),
}
_PORTABLE = re.compile(r"^[A-Za-z0-9._/-]+$")


def node_path_problem(setting: str, path: str) -> str | None:
    """Why ``path`` may not be written on a node for ``setting`` (a :data:`NODE_DIRS` key), None when it may."""
    dirs = NODE_DIRS[setting]
    allowed = f"allowed: an absolute path in {' or '.join(d + '/' for d in dirs)}"
    if not path.startswith("/"):
        return f"'{path}' is not an absolute path ({allowed})"
    if not _PORTABLE.match(path):
        return f"'{path}' has characters other than letters, digits, '.', '_', '-' and '/' ({allowed})"
    if posixpath.normpath(path) != path or path.startswith("//"):
        return f"'{path}' is not in normal form: write it as {posixpath.normpath(path)!r} ({allowed})"
    if not any(path.startswith(d + "/") for d in dirs):
        return f"'{path}' is outside the directories this file may be written to ({allowed})"
    if posixpath.basename(path).startswith("."):
        return f"'{path}' names a hidden file ({allowed})"
    return None


def is_url(text: str) -> bool:
    """Whether ``text`` is a URL (``scheme://...``) rather than a file path."""
    return re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


def outside_problem(path: str, base_dir: os.PathLike[str] | str, allowed: list[str]) -> str | None:
    """Why ``path`` (a controller file a setting names) may not be read, None when it lies, symbolic links resolved,
    under the cluster file's directory ``base_dir`` or one of ``allowed`` (``cluster.controller_dirs``).

    Without this ``cni_manifest: /etc/shadow`` would copy the controller's password file to a node and apply it.
    """
    real = os.path.realpath(path)
    dirs = [os.path.realpath(base_dir), *(os.path.realpath(d) for d in allowed)]
    if any(real == d or real.startswith(d.rstrip("/") + "/") for d in dirs):
        return None
    shown = f"{path} (resolved: {real})" if real != os.path.normpath(path) else path
    return (f"{shown} is outside the directories controller files may come from (allowed: a file under "
            f"{' or '.join(dirs)}; name other directories in cluster.controller_dirs)")


def controller_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of a file the cluster file names on the controller, read boundedly.

    Raises :class:`ValueError` saying why it cannot be used (missing, unreadable, not a regular file, too large).
    """
    try:
        return read_bounded(path, what)
    except SpecError as exc:
        raise ValueError(f"{exc.problems[0].message}: {path}") from None
    except OSError as exc:
        raise ValueError(f"cannot read {what} {path}: {exc.strerror}") from None
