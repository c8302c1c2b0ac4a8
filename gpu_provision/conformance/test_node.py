"""The conformance tests: one per stage (its packages, files, services and groups), device files, nvidia runtime.

Each test reports every problem it finds on the node (not just the first), worded as ``gpu-provision drift`` words
differences: ``package nvidia-driver: expected held, found not held``.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpu_provision.conformance import checks
from gpu_provision.conformance.expect import Expected, stage_modules

#: Stages with state to check; preflight converges nothing (its checks are about whether a deploy may start).
STAGES = [name for name, _ in stage_modules() if name != "preflight"]


def _fail(expected: Expected, what: str, problems: list[str]) -> None:
    if problems:
        lines = "\n".join(f"  {p}" for p in problems)
        pytest.fail(f"node {expected.node.name}, {what}: {len(problems)} problem(s)\n{lines}", pytrace=False)


@pytest.mark.parametrize("stage", STAGES)
def test_stage(host: Any, expected: Expected, stage: str) -> None:
    """Every package (version, hold), file (content, owner, mode), service (enabled, active) and group the stage
    converges is on the node as the cluster file says."""
    wants = expected.by_stage[stage]
    if not wants:
        pytest.skip(f"the cluster file gives node {expected.node.name} nothing in stage {stage}")
    _fail(expected, f"stage {stage}", checks.want_problems(host, wants, expected.package_manager))


def test_device_files(host: Any, expected: Expected) -> None:
    """The GPU device files have the group and mode the file's ``permissions`` give (driver defaults otherwise)."""
    if not expected.node.has_gpus:
        pytest.skip(f"node {expected.node.name} has no GPUs in the cluster file")
    if not expected.devices:
        group = expected.node.permissions.group
        pytest.fail(f"node {expected.node.name}: no GPU device files to check (is the driver loaded?"
                    + (f" does the group {group} exist?)" if group else ")"), pytrace=False)
    _fail(expected, "device files", checks.device_problems(host, expected.devices))


def test_nvidia_runtime(host: Any, expected: Expected) -> None:
    """The container runtime(s) have the nvidia runtime registered, and as the default where the file says so."""
    if not expected.nvidia_runtimes:
        pytest.skip(f"node {expected.node.name} has no GPUs in the cluster file")
    _fail(expected, "nvidia runtime", checks.nvidia_runtime_problems(host, expected.node, expected.nvidia_runtimes))
