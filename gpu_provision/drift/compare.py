"""One node's drift: the merged probe request of every stage, and the differences one probe answer shows.

These functions never touch the network: :mod:`.collect` fetches the answer (one remote command) and hands it
here, and tests hand in canned answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpu_provision.desired import Difference, FileWant, differences, request_for
from gpu_provision.diff import file_diff
from gpu_provision.drift.stages import extra_differences, stage_name
from gpu_provision.spec import Cluster, Node
from gpu_provision.state import NodeStateData, Request


def node_request(node: Node, cluster: Cluster, stages: Sequence[Any]) -> Request:
    """Everything the probe must read to compare every stage on ``node`` (one remote command), with the text of
    every file compared, so a file that differs is shown as a diff without asking the node again (the probe
    returns text only for regular UTF-8 files of at most ``MAX_CONTENT`` bytes)."""
    request = Request()
    for stage in stages:
        request = request.merge(stage.request(node, cluster))
    request.contents |= request.files
    return request


@dataclass
class Comparison:
    """The outcome of comparing one node: its differences and anything that kept a part from being compared."""

    differences: list[Difference] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: A unified diff (secrets hidden) per file path whose content differs and can be shown as text.
    diffs: dict[str, str] = field(default_factory=dict)


def section_problems(state: NodeStateData, request: Request) -> list[str]:
    """Probe sections that failed on the node (their answer is an ``error``), as messages."""
    out = []
    for name in sorted(request.to_probe()):
        answer = state.raw.get(name)
        if isinstance(answer, dict) and set(answer) == {"error"}:
            out.append(f"probe section {name} failed: {answer['error']}")
    return out


def node_differences(node: Node, cluster: Cluster, state: NodeStateData, stages: Sequence[Any],
                     refetch: Callable[[Request], NodeStateData] | None = None) -> Comparison:
    """Every difference between ``node``'s described state and ``state``, stage by stage, in pipeline order.

    A stage whose wants read something its ``request`` did not ask for gets it through ``refetch`` (one more
    remote command, which the command count shows) rather than being compared against a missing answer.
    """
    result = Comparison()
    for stage in stages:
        name = stage_name(stage)
        try:
            wants = list(stage.wants(node, cluster, state))
            needed = request_for(wants)
            if refetch is not None and not _answered(state, needed):
                state = refetch(needed)
            found = differences(wants, state, name)
            result.differences.extend(found)
            result.diffs.update(_content_diffs(wants, found, state))
            result.differences.extend(extra_differences(stage, node, cluster, state))
        except Exception as exc:  # one broken stage must not hide the others' drift
            result.problems.append(f"stage {name}: {type(exc).__name__}: {exc}")
    return result


def _content_diffs(wants: Sequence[Any], found: Sequence[Difference], state: NodeStateData) -> dict[str, str]:
    differing = {d.item for d in found if d.kind == "file"}
    out = {}
    for want in wants:
        if isinstance(want, FileWant) and want.path in differing:
            text = file_diff(want, state.file(want.path))
            if text:
                out[want.path] = text
    return out


def _answered(state: NodeStateData, request: Request) -> bool:
    """Whether the probe answer holds an entry for every item ``request`` names (and text where it needs text)."""
    raw = state.raw
    files = raw.get("files", {})
    checks = (
        (request.packages, raw.get("packages", {}).get("packages", {})),
        (request.files | request.contents, files),
        (request.units, raw.get("services", {})),
        (request.groups, raw.get("accounts", {})),
    )
    if any(not items <= set(answer) for items, answer in checks):
        return False
    # A regular file asked for without its text has a digest but no "content"; one too large for the probe
    # has neither, and asking again would not help.
    return all("content" in files[path] or "sha256" not in files[path] for path in request.contents)
