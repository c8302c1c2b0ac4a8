"""Files with exact content or merged JSON keys, and the per-run record of which paths changed.

Services restart and initramfs images are rebuilt only when a file they depend on changed in this run; that
record lives here (:func:`changed_paths`), filled by every operation that writes a file.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pyinfra.api import operation

from gpu_provision.desired import FileWant, request_for
from gpu_provision.diff import file_diff
from gpu_provision.facts.state import executing
from gpu_provision.operations import atomic
from gpu_provision.operations.commands import current_state, mark_changed, this_host
from gpu_provision.state import FileState, NodeStateData, Request

BACKUP_SUFFIX = ".gpu-provision.bak"

# Kept on the host object itself, like the state cache: an id() key could be reused by a later host.
_CHANGED_ATTR = "_gpu_provision_changed"


def _phase_paths(target: Any) -> set[str]:
    """The set of paths changed in ``target``'s current phase (prepare: will change; execute: changed)."""
    registry: dict[bool, set[str]] | None = getattr(target, _CHANGED_ATTR, None)
    if registry is None:
        registry = {}
        setattr(target, _CHANGED_ATTR, registry)
    return registry.setdefault(executing(target), set())


def record_changed(target: Any, paths: Iterable[str]) -> None:
    """Note that ``paths`` change on ``target`` in the current phase (prepare: will change; execute: changed)."""
    _phase_paths(target).update(paths)


def changed_paths(target: Any) -> set[str]:
    """Paths that changed (or, at prepare time, will change) on ``target`` in this run."""
    return set(_phase_paths(target))


def _content_unmet(want: FileWant, current: FileState) -> bool:
    return any(d.kind == "file" for d in want.unmet_at(current))


def plan(want: FileWant, current: FileState) -> list[Any]:
    """Commands that bring one file from ``current`` to ``want`` (empty when it is already there).

    New content is written atomically (:mod:`gpu_provision.operations.atomic`) with its owner, group and mode; a
    file whose content already matches only gets its owner or mode fixed. What differs is the want's own
    :meth:`~gpu_provision.desired.FileWant.unmet_at`, the answer drift reports.
    """
    commands: list[Any] = []
    quoted = shlex.quote(want.path)
    unmet = {d.kind for d in want.unmet_at(current)}
    if "file" in unmet:
        text = want.desired_text(current.content if current.exists else None)
        parent = posixpath.dirname(want.path) or "/"
        commands.append(f"mkdir -p {shlex.quote(parent)}")
        if current.exists and want.backup:
            commands.append(f"cp -a {quoted} {shlex.quote(want.path + BACKUP_SUFFIX)}")
        commands.append(atomic.write(want.path, text, want.mode, want.owner, want.group))
        return commands
    if unmet & {"file-owner", "file-group"}:
        commands.append(f"chown {want.owner}:{want.group} {quoted}")
    if "file-mode" in unmet:
        commands.append(f"chmod {want.mode} {quoted}")
    return commands


def content_changes(wants: Sequence[FileWant], state: NodeStateData) -> set[str]:
    """Paths among ``wants`` whose content differs on the node (mode/owner changes do not count)."""
    return {w.path for w in wants if _content_unmet(w, state.file(w.path))}


@operation()
def wants(wants: Sequence[FileWant] | Callable[[NodeStateData], Sequence[FileWant]], request: Request | None = None):
    """Files as the stage wants them: exact content or merged JSON keys, with mode, owner and group.

    + wants: the files, or a function of the node's state that returns them (evaluated again at execution, for
      content that depends on an earlier operation, such as a group's numeric id)
    + request: what that function reads from the probe (with a list, derived from the wants)

    Content is written atomically: a temporary file in the same directory, with its final mode and owner, synced,
    then renamed over the file. An existing file whose content differs is copied to ``PATH.gpu-provision.bak``
    first (``backup=True``). JSON
    merges keep every key the file already has that the want does not set. Paths whose content changes are recorded
    for :func:`changed_paths` (service restarts, initramfs rebuilds).

    .. code:: python

        files.wants(name="Docker daemon.json", wants=[
            FileWant("/etc/docker/daemon.json", merge="json", keys={"exec-opts": ["native.cgroupdriver=systemd"]}),
        ])
    """
    host = this_host()
    if callable(wants):
        state = current_state(host, request or Request())
        wanted = list(wants(state))
        state = current_state(host, request_for(list(wanted)).merge(request or Request()))
    else:
        wanted = list(wants)
        state = current_state(host, request_for(list(wanted)).merge(request or Request()))
    commands: list[Any] = []
    for want in wanted:
        commands.extend(plan(want, state.file(want.path)))
    if not commands:
        host.noop("files already as wanted: " + ", ".join(w.path for w in wanted))
        return
    changing = content_changes(wanted, state)
    config = getattr(host.state, "config", None)  # a state without one (a test's) asks for no diff
    if config is not None and config.DIFF and not executing(host):
        show_diffs(host, [w for w in wanted if w.path in changing], request or Request())
    record_changed(host, changing)
    mark_changed(host)
    yield from commands


def show_diffs(target: Any, changing: Sequence[FileWant], request: Request) -> None:
    """Log, as ``pyinfra --diff`` does for its own file operations, a unified diff (secrets hidden) of each file
    whose content will change: ``Will create``/``Will modify PATH`` and the diff from the node's text to the
    wanted text. The node's text is read in the phase's one probe when it can be (a file over the probe's size
    limit, or a binary one, shows no diff)."""
    from pyinfra import logger

    if not changing:
        return
    state = current_state(target, request.merge(Request(contents={w.path for w in changing})))
    for want in changing:
        current = state.file(want.path)
        target.log(f"{'Will modify' if current.exists else 'Will create'} {want.path}", logger.info)
        for line in (file_diff(want, current) or "(no text to compare)").splitlines():
            logger.info("  %s", line)


@operation()
def on_change(paths: Sequence[str], command: str, noop: str):
    """Run ``command`` when one of ``paths`` changed in this run (an initramfs rebuild after a modprobe file).

    + paths: files written by earlier operations of this run
    + command: what to run after such a change
    + noop: what to log otherwise

    .. code:: python

        files.on_change(name="Rebuild initramfs", paths=["/etc/modprobe.d/blacklist-nouveau.conf"],
                           command="update-initramfs -u", noop="modprobe files unchanged")
    """
    target = this_host()
    if not changed_paths(target).intersection(paths):
        target.noop(noop)
        return
    mark_changed(target)
    yield command
