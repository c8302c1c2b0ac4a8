"""SSH keys of the rig: the controller's login key and each node's host key, made before the node boots.

Host keys are made once per node name and kept in the rig state, so a node reset to fresh keeps its identity and
the rig's known_hosts (one ``127.0.10.N ssh-ed25519 ...`` line per node) stays valid with strict checking on.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterable
from pathlib import Path

from gpu_provision_rig.errors import RigError


def make_key(path: Path, comment: str) -> Path:
    """Create an unencrypted ed25519 key pair at ``path`` (and ``path.pub``) unless it exists; return ``path``."""
    if path.exists() and path.with_suffix(".pub").exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    path.with_suffix(".pub").unlink(missing_ok=True)
    proc = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RigError(f"ssh-keygen for {path}: {proc.stderr.strip()}")
    return path


def public_key(path: Path) -> str:
    """``type base64`` of the public half of the key at ``path`` (comment dropped)."""
    fields = path.with_suffix(".pub").read_text().split()
    return f"{fields[0]} {fields[1]}"


def known_hosts_line(address: str, host_key: Path, port: int = 22) -> str:
    """One known_hosts line for ``address`` in the form OpenSSH and paramiko both look up."""
    name = address if port == 22 else f"[{address}]:{port}"
    return f"{name} {public_key(host_key)}\n"


def write_known_hosts(path: Path, entries: Iterable[tuple[str, Path]]) -> None:
    """Write ``path`` atomically with one line per ``(address, host key)``."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text("".join(known_hosts_line(address, key) for address, key in entries))
    tmp.replace(path)
