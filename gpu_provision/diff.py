"""File differences a person can read: a unified diff of a managed file's content, with secrets hidden.

A drift report is pasted into tickets and chat, so tokens, passwords and proxy credentials never appear in it: every
line of a diff passes through the node package's one redaction, :func:`gpu_provision.node.redact.redact` (both
sides alike, so a changed secret still shows as a changed line).
"""

from __future__ import annotations

import difflib

from gpu_provision.desired import FileWant
from gpu_provision.node.redact import redact
from gpu_provision.state import FileState


def file_diff(want: FileWant, current: FileState) -> str | None:
    """A unified diff from the node's file (nothing, for a missing file) to the content the cluster file gives it
    (secrets hidden), or None when there is nothing to show as text: not a regular file, binary, too large for the
    probe to return, or the same."""
    if current.exists and (current.type != "file" or current.content is None):
        return None
    text = current.content if current.exists else None
    expected = want.desired_text(text)
    if isinstance(expected, bytes):
        return None
    lines = difflib.unified_diff((text or "").splitlines(), expected.splitlines(), lineterm="",
                                 fromfile=f"{want.path} (on the node)" if current.exists else "/dev/null",
                                 tofile=f"{want.path} (cluster file)")
    text = "\n".join(redact(line) for line in lines)
    return text or None
