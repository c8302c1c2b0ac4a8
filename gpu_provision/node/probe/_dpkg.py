"""dpkg's status database read in place: installed version and state of named packages.

``dpkg-query -W`` answers from the same file, but as a process of its own: about 3 ms of CPU on every node at every
check, on top of the probe's import of :mod:`subprocess`. The file holds the whole database except while a dpkg run is
unfinished or was interrupted: dpkg then journals each change under ``updates/`` until it folds them in, so when that
directory holds an entry the answer comes from ``dpkg-query``, which reads the journal too.

Entries are ``(name, version, abbrev)``, ``abbrev`` being ``${db:Status-Abbrev}`` (want, status and error letters,
such as ``"ii "`` or ``"hi "``), the same whichever way they were read.
"""

import os

from . import _command

ADMIN_DIR = "/var/lib/dpkg"

#: dpkg's words for the selection and the package status, with the letters ``${db:Status-Abbrev}`` gives them.
WANT = {"unknown": "u", "install": "i", "hold": "h", "deinstall": "r", "purge": "p"}
STATUS = {"not-installed": "n", "config-files": "c", "half-installed": "H", "unpacked": "U",
          "half-configured": "F", "triggers-awaited": "W", "triggers-pending": "t", "installed": "i"}
ERROR = {"ok": " ", "reinstreq": "R"}

_QUERY_FORMAT = "${Package}\t${Version}\t${db:Status-Abbrev}\n"


def entries(names=(), prefix=None, admin_dir=None, prefixes=()):
    """The entries of the packages in ``names`` and of every package whose name starts with ``prefix`` (or one of
    ``prefixes``), from one read of the database; a name dpkg does not know has no entry, and a package both named
    and matched may appear twice. ``admin_dir``: dpkg's database (default :data:`ADMIN_DIR`). A ``dpkg-query`` that
    times out raises :class:`._command.TimedOut`."""
    names = sorted(set(names))
    prefixes = sorted(set(prefixes) | ({prefix} if prefix else set()))
    admin_dir = admin_dir or ADMIN_DIR
    if not names and not prefixes:
        return []
    text = _status_text(admin_dir)
    if text is None:  # a journal to read too, or no dpkg database at all (an rpm node: no process for that)
        return _query(names, prefixes, admin_dir) if _command.available("dpkg-query") else []
    found = []
    # A paragraph starts with its Package line; an exact name is that whole line, a prefix its start.
    for needle in ["\nPackage: " + p for p in prefixes] + ["\nPackage: %s\n" % name for name in names]:
        at = text.find(needle)
        while at >= 0:
            end = text.find("\n\n", at + 1)
            entry = _paragraph(text[at + 1:] if end < 0 else text[at + 1:end])
            if entry:
                found.append(entry)
            at = -1 if end < 0 else text.find(needle, end)
    return found


def _status_text(admin_dir):
    """The status file with a leading newline (every paragraph then starts with ``"\\nPackage: "``), or None when
    it cannot be read alone: journalled changes wait under ``updates/``, or the file is not there."""
    try:
        if any(name.isdigit() for name in os.listdir(os.path.join(admin_dir, "updates"))):
            return None
        with open(os.path.join(admin_dir, "status"), encoding="utf-8", errors="replace") as f:
            return "\n" + f.read()
    except OSError:
        return None


def _paragraph(text):
    """``(name, version, abbrev)`` of one status paragraph (continuation lines skipped), None without a name."""
    fields = {}
    for line in text.split("\n"):
        key, sep, value = line.partition(": ")
        if sep and key in ("Package", "Version", "Status"):
            fields[key] = value.strip()
    name = fields.get("Package")
    if not name:
        return None
    words = fields.get("Status", "").split()
    want, error, status = (words + ["", "", ""])[:3]
    abbrev = WANT.get(want, "u") + STATUS.get(status, "n") + ERROR.get(error, "?")
    return name, fields.get("Version", ""), abbrev


def _query(names, prefixes, admin_dir):
    # ``prefixes``: a sequence, or one prefix or None as the evidence scripts under tests/fixtures/device pass them.
    prefixes = [prefixes] if isinstance(prefixes, str) else list(prefixes or ())
    argv = ["dpkg-query", "--admindir", admin_dir, "-W", "-f", _QUERY_FORMAT] + [p + "*" for p in prefixes] + names
    found = []
    for line in _command.output(argv).splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            found.append((parts[0], parts[1], parts[2]))
    return found
