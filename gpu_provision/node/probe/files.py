"""Existence, owner, mode, SHA-256 and (for small text files) content of named paths."""

import grp
import os
import pwd
import stat

MAX_CONTENT = 256 * 1024


def _sha256_type():
    """The SHA-256 constructor, the interpreter's own where it has one (``_sha2`` from Python 3.12, ``_sha256``
    before): :mod:`hashlib` loads OpenSSL's libcrypto first, about 2.5 ms of CPU at every check of every node, for
    the same digest. Builds without them (a FIPS-only interpreter) use hashlib's."""
    for module in ("_sha2", "_sha256"):
        try:
            return __import__(module).sha256
        except (ImportError, AttributeError):
            continue
    import hashlib

    return hashlib.sha256


#: Chosen once, when the files section is first imported.
SHA256 = _sha256_type()


_NAMES: dict = {}


def _name(table, ident):
    # Once per id and table: files share a few owners, and each lookup goes through NSS (which may ask systemd).
    key = (table, ident)
    if key not in _NAMES:
        try:
            _NAMES[key] = table(ident)[0]
        except KeyError:
            _NAMES[key] = str(ident)
    return _NAMES[key]


def _type(mode):
    # Only regular files are opened: opening a FIFO someone put at a watched path would block the probe.
    for test, name in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "link"), (stat.S_ISCHR, "char"),
                       (stat.S_ISBLK, "block"), (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return name
    return "other"


def _read(path):
    """SHA-256 of a regular file, read in chunks (memory stays bounded whatever its size), and its bytes when it
    has at most ``MAX_CONTENT`` of them (else None). Opened without following a link swapped in since ``lstat``
    and without blocking."""
    digest, data, size = SHA256(), [], 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
            size += len(chunk)
            if size <= MAX_CONTENT:
                data.append(chunk)
    return digest.hexdigest(), b"".join(data) if size <= MAX_CONTENT else None


def _utf8(data):
    """``data`` as text, None when it is not UTF-8 (the module stays without contextlib, which the probe would
    otherwise load for this alone)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def collect(request):
    """``request``: ``{"paths": [...], "content": [...]}`` (paths whose text is returned too, when the file is
    UTF-8 text of at most ``MAX_CONTENT`` bytes)."""
    request = request or {}
    want_content = set(request.get("content", []))
    out = {}
    for path in sorted(set(request.get("paths", [])) | want_content):
        try:
            st = os.lstat(path)
        except OSError:
            out[path] = {"exists": False}
            continue
        entry = {
            "exists": True,
            "type": _type(st.st_mode),
            "mode": "%04o" % stat.S_IMODE(st.st_mode),
            "owner": _name(pwd.getpwuid, st.st_uid),
            "group": _name(grp.getgrgid, st.st_gid),
        }
        if entry["type"] == "file":
            digest, head = _read(path)
            entry["sha256"] = digest
            if path in want_content and head is not None:
                # Text only: a binary file's bytes would bloat the answer and no comparison or diff reads them.
                text = _utf8(head)
                if text is not None:
                    entry["content"] = text
        elif entry["type"] == "link":
            entry["target"] = os.readlink(path)
        out[path] = entry
    return out
