"""The MIG applier's durable record of what it took down: the GPU-holding units it stopped and the kernel modules it
unloaded for a GPU reset.

The applier writes the record *before* stopping or unloading anything and removes it only after everything in it
is back, so an apply that dies in between (``kill -9``, a power cut, a signal during the restarts) leaves the record
behind; the next run and the boot unit read it, finish the layout and bring back every unit and module it names,
whether or not the unit is active now. Writes go to a temporary file in the same directory, are synced and renamed
over the record (then the directory is synced), so the record is always either the old or the new one.
Node-side code: Python 3.9+, standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Iterable, NamedTuple, Optional, Tuple

from .holders import MODE_HOLDERS

#: Where the record lives on a node: the project's state directory.
RECORD_FILE = "/var/lib/gpu-provision/mig-stopped.json"
#: Environment variable that names another record file (tests, or a node with its state elsewhere).
RECORD_ENV = "GPU_PROVISION_MIG_RECORD"
#: Kernel modules the applier may unload; a record naming anything else is not trusted.
MODULES = ("nvidia_drm", "nvidia_modeset")


class RecordError(Exception):
    """The record exists but cannot be read or trusted; the message names the file."""


class Stopped(NamedTuple):
    """What an apply took down: units in stopping order, modules in unloading order."""

    units: Tuple[str, ...] = ()
    modules: Tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.units or self.modules)

    def merged(self, units: Iterable[str] = (), modules: Iterable[str] = ()) -> Stopped:
        """This record with ``units`` and ``modules`` added (kept once, first occurrence first)."""
        return Stopped(_unique(self.units + tuple(units)), _unique(self.modules + tuple(modules)))

    def __str__(self) -> str:
        parts = list(self.units) + [f"kernel module {m}" for m in self.modules]
        return ", ".join(parts) if parts else "nothing"


def _unique(items: Tuple[str, ...]) -> Tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def default_path() -> str:
    """The record file: ``$GPU_PROVISION_MIG_RECORD`` when set, else :data:`RECORD_FILE`."""
    return os.environ.get(RECORD_ENV) or RECORD_FILE


def read(path: str) -> Optional[Stopped]:
    """The record at ``path``, or None when there is none.

    Only the holder units of :mod:`.holders` and the modules of :data:`MODULES` are accepted: the applier starts what
    the record names as root, so a record naming anything else is refused rather than obeyed.
    """
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise RecordError(f"{path}: unreadable record of stopped units ({exc})") from exc
    units = data.get("units") if isinstance(data, dict) else None
    modules = data.get("modules", []) if isinstance(data, dict) else None
    if not isinstance(units, list) or not isinstance(modules, list):
        raise RecordError(f"{path}: not a record of stopped units")
    unknown = [u for u in units if u not in MODE_HOLDERS] + [m for m in modules if m not in MODULES]
    if unknown:
        raise RecordError(f"{path}: names what the applier never stops: {', '.join(map(str, unknown))}")
    return Stopped(_unique(tuple(units)), _unique(tuple(modules)))


def write(path: str, stopped: Stopped) -> None:
    """Replace the record at ``path`` with ``stopped``, durably (temporary file, fsync, rename, directory fsync)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.tmp.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump({"units": list(stopped.units), "modules": list(stopped.modules)}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _sync_dir(directory)


def remove(path: str) -> None:
    """Remove the record (everything in it is back), durably."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
        _sync_dir(os.path.dirname(path) or ".")


def _sync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

