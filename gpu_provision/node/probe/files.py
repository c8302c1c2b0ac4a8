"""Existence, owner, mode, SHA-256 and (for small text files) content of named paths."""

import contextlib
import grp
import hashlib
import os
import pwd
import stat

MAX_CONTENT = 256 * 1024


def _name(table, ident):
    try:
        return table(ident)[0]
    except KeyError:
        return str(ident)


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
            "type": "dir" if stat.S_ISDIR(st.st_mode) else "link" if stat.S_ISLNK(st.st_mode)
            else "char" if stat.S_ISCHR(st.st_mode) else "file",
            "mode": "%04o" % stat.S_IMODE(st.st_mode),
            "owner": _name(pwd.getpwuid, st.st_uid),
            "group": _name(grp.getgrgid, st.st_gid),
        }
        if entry["type"] == "file":
            digest = hashlib.sha256()
            with open(path, "rb") as f:
                data = f.read()
            digest.update(data)
            entry["sha256"] = digest.hexdigest()
            if path in want_content and len(data) <= MAX_CONTENT:
                # Text only: a binary file's bytes would bloat the answer and no comparison or diff reads them.
                with contextlib.suppress(UnicodeDecodeError):
                    entry["content"] = data.decode("utf-8")
        elif entry["type"] == "link":
            entry["target"] = os.readlink(path)
        out[path] = entry
    return out
