"""Differences a person can read: a unified diff of a managed file's content, with secrets hidden, and each
difference as the lines drift and ``rollout plan`` print alike.

A drift report is pasted into tickets and chat, so tokens, passwords and proxy credentials never appear in it: every
line of a diff passes through the node package's one redaction, :func:`gpu_provision.node.redact.redact` (both
sides alike, so a changed secret still shows as a changed line).
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from gpu_provision.desired import Difference, FileWant
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


def plain(value: Any) -> Any:
    """A JSON-safe form of an expected/actual value."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v) for v in (sorted(value, key=str) if isinstance(value, (set, frozenset)) else value)]
    return str(value)


def value_text(value: Any) -> str:
    """An expected or actual value as one line of text (lists bracketed, mappings as sorted JSON)."""
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(map(str, value)) + "]"
    if isinstance(value, dict):
        return json.dumps(plain(value), sort_keys=True)
    return str(value)


def difference_lines(difference: Difference, content: str | None = None, item: str | None = None) -> list[str]:
    """``difference`` as text: ``kind item: expected X, found Y``, or, for a file whose content differs and can be
    shown (``content``: its :func:`file_diff`), a head line and the unified diff under it, indented by four, instead
    of two SHA-256 values nobody can read. A finding read from a file (``difference.source``) names it.

    + item: the item as printed (drift joins GPUs that differ alike: ``GPU 0-7``); default the difference's own
    """
    item = difference.item if item is None else item
    if content:
        what = "absent, expected" if difference.actual == "absent" else "content differs (- on the node, + expected)"
        return [f"{difference.kind} {item}: {what}:", *(f"    {line}" for line in content.splitlines())]
    read = f" (read {difference.source})" if difference.source else ""
    return [f"{difference.kind} {item}: expected {value_text(difference.expected)}, "
            f"found {value_text(difference.actual)}{read}"]
