"""Secrets hidden from text that leaves a node: drift diffs, support archives (standard library only).

A diff or a bundle is pasted into tickets and chat, so join tokens, certificate keys, kubeconfig credentials,
passwords and proxy credentials never appear in it. This is the one redaction: the node hides secrets before a
bundle leaves it, and the controller's drift diffs use the same patterns.
"""

import re

HIDDEN = "***"

#: Names whose values are secrets, as they appear in config files, environment files, kubeconfigs and JSON.
_SECRET_NAME = (r"[\w.-]*(?:password|passwd|token|secret|api[_-]?key|credentials?|key-data|certificate[_-]?key"
                r"|private[_-]?key)[\w.-]*")

_PATTERNS = (
    # http://user:pass@proxy:3128 -> http://***:***@proxy:3128
    (re.compile(r"(\b[a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@", re.IGNORECASE), r"\g<1>" + HIDDEN + ":" + HIDDEN + "@"),
    # "token": "abc" (JSON)
    (re.compile(r'("' + _SECRET_NAME + r'"\s*:\s*")[^"]*(")', re.IGNORECASE), r"\g<1>" + HIDDEN + r"\g<2>"),
    # password=abc, TOKEN: abc, --token abc, client-key-data: abc
    (re.compile(r"(\b" + _SECRET_NAME + r"(?:\s*[=:]\s*|\s+)[\"']?)[^\s\"',]+", re.IGNORECASE), r"\g<1>" + HIDDEN),
    # Authorization: Bearer abc
    (re.compile(r"(\bBearer\s+)\S+", re.IGNORECASE), r"\g<1>" + HIDDEN),
    # kubeadm bootstrap tokens (abcdef.0123456789abcdef) wherever they appear
    (re.compile(r"\b[a-z0-9]{6}\.[a-z0-9]{16}\b"), HIDDEN),
)

#: A PEM private key, whatever its kind; its body spans lines, so it is hidden before the line patterns run.
_PEM_KEY = re.compile(r"(-----BEGIN [A-Z ]*PRIVATE KEY-----).*?(-----END [A-Z ]*PRIVATE KEY-----)", re.DOTALL)


def redact(line):
    """``line`` with every secret this module knows the shape of replaced by ``***``."""
    for pattern, replacement in _PATTERNS:
        line = pattern.sub(replacement, line)
    return line


def redact_text(text):
    """``text`` (many lines) with PEM private keys and every line's secrets replaced by ``***``."""
    text = _PEM_KEY.sub(r"\g<1>\n" + HIDDEN + r"\n\g<2>", text)
    return "\n".join(redact(line) for line in text.split("\n"))
