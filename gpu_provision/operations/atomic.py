"""Atomic file writes on nodes: a same-directory temporary file, final owner and mode, synced, then renamed.

A reader (a service restarting, apt, modprobe, the boot unit) sees the old file or the new one, never a partial
one, and an interrupted run leaves the old file in place. The content travels on the command's standard input,
base64-encoded, and is checked against its SHA-256 before the rename: a connection that drops mid-transfer ends
the input early, the check fails and the temporary file is removed (also when the shell is signalled: a hang-up,
or a broken pipe as it reports the failure to the closed connection). The temporary name comes from ``mktemp`` in
the target's own directory (no name in a world-writable directory, never predictable); it starts with a dot and
ends in random letters, so no tool that reads ``*.conf``, ``*.sources``, ``*.repo``, ``*.service`` or dot-less
names picks up one left by a ``kill -9``.

pyinfra's own upload cannot do this: over SFTP it writes the target in place, and with sudo it uploads to a
predictable ``/tmp/pyinfra-<sha1 of the path>`` and ``cp``\\ s it over the target.
"""

from __future__ import annotations

import base64
import hashlib
import posixpath
import shlex

from pyinfra.api import StringCommand

_SCRIPT = """\
set -e
t=
trap '[ -z "$t" ] || rm -f "$t"' EXIT
trap 'exit 1' HUP INT TERM PIPE
t=$(mktemp {dir}/.{name}.XXXXXXXX)
base64 -d > "$t"
if [ "$(sha256sum < "$t")" != "{digest}  -" ]; then echo {incomplete} >&2; exit 1; fi
chown {owner}:{group} "$t"
chmod {mode} "$t"
sync "$t"
mv -f "$t" {path}
t="""


class AtomicWrite(StringCommand):
    """The command that writes ``data`` to ``dest`` atomically (content on its standard input).

    ``text`` is the content as the caller gave it (a ``str`` or ``bytes``); it, ``dest``, ``mode``, ``owner`` and
    ``group`` are kept for logs and tests.
    """

    def __init__(self, dest: str, data: str | bytes, mode: str, owner: str, group: str):
        raw = data.encode() if isinstance(data, str) else data
        name = posixpath.basename(dest)
        script = _SCRIPT.format(
            dir=shlex.quote(posixpath.dirname(dest) or "/"), name=_safe(name), digest=hashlib.sha256(raw).hexdigest(),
            incomplete=shlex.quote(f"gpu-provision: incomplete write of {dest}: left unchanged"),
            owner=shlex.quote(owner), group=shlex.quote(group), mode=shlex.quote(mode), path=shlex.quote(dest))
        super().__init__(script, _stdin=base64.encodebytes(raw).decode())
        self.dest, self.text, self.mode, self.owner, self.group = dest, data, mode, owner, group


def _safe(name: str) -> str:
    """``name`` with every character a shell or ``mktemp`` template could read specially replaced by ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def write(dest: str, data: str | bytes, mode: str = "0644", owner: str = "root", group: str = "root") -> AtomicWrite:
    """The command that replaces ``dest`` with ``data`` (owner, group and mode set before it becomes visible).

    The directory must exist. The command fails, leaving ``dest`` as it was, when the content that
    arrived differs from ``data``.
    """
    return AtomicWrite(dest, data, mode, owner, group)
