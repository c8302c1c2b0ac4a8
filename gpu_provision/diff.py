"""File differences a person can read: a unified diff of a managed file's content, with secrets hidden.

A drift report is pasted into tickets and chat, so tokens, passwords and proxy credentials never appear in it: every
line of a diff passes through :func:`redact` (both sides alike, so a changed secret still shows as a changed line).
"""

from __future__ import annotations

import difflib
import re

from gpu_provision.desired import FileWant
from gpu_provision.state import FileState

HIDDEN = "***"

#: Names whose values are secrets, as they appear in config files, environment files and JSON.
_SECRET_NAME = r"[\w.-]*(?:password|passwd|token|secret|api[_-]?key|credentials?)[\w.-]*"

_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    # http://user:pass@proxy:3128 -> http://***:***@proxy:3128
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", re.IGNORECASE), rf"\g<1>{HIDDEN}:{HIDDEN}@"),
    # "token": "abc" (JSON)
    (re.compile(rf'("{_SECRET_NAME}"\s*:\s*")[^"]*(")', re.IGNORECASE), rf"\g<1>{HIDDEN}\g<2>"),
    # password=abc, TOKEN: abc, --token abc
    (re.compile(rf"(\b{_SECRET_NAME}(?:\s*[=:]\s*|\s+)[\"']?)[^\s\"',]+", re.IGNORECASE), rf"\g<1>{HIDDEN}"),
    # Authorization: Bearer abc
    (re.compile(r"(\bBearer\s+)\S+", re.IGNORECASE), rf"\g<1>{HIDDEN}"),
    # kubeadm bootstrap tokens (abcdef.0123456789abcdef) wherever they appear
    (re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"), HIDDEN),
)


def redact(line: str) -> str:
    """``line`` with every secret this module knows the shape of replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        line = pattern.sub(replacement, line)
    return line


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
