"""Fixtures for the agent tests; the simulated node and helpers live in agentsim.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import simtree
from agentsim import H200_GPUS, REPO, SIM, VERSION_LINE, SimulatedNode


@pytest.fixture
def sim_node(tmp_path: Path) -> Iterator[SimulatedNode]:
    """A two-GPU H200 node (driver 580.159.04, MIG off, persistence on) simulated in ``tmp_path``."""
    env = simtree.lay_out(tmp_path, VERSION_LINE)
    (tmp_path / "proc").mkdir()
    # The wrapper carries the simulator's settings itself, so it works from any environment (pyinfra @local too).
    (tmp_path / "bin").mkdir()
    wrapper = tmp_path / "bin" / "nvidia-smi"
    exports = "".join(f"export {k}='{v}'\n" for k, v in env.items())
    wrapper.write_text(f"#!/bin/sh\n{exports}exec '{sys.executable}' '{SIM}' nvidia-smi \"$@\"\n")
    wrapper.chmod(0o755)
    node = SimulatedNode(tmp_path, env)
    node.configure(H200_GPUS)
    node.smi("-pm", "1")
    yield node


@pytest.fixture
def run_agent(tmp_path: Path) -> Callable[[dict[str, Any]], tuple[int, dict[str, Any]]]:
    """Run the agent (``python -m gpu_provision.node verify``) on an expectations dict; return (exit status, report)."""

    def run(expect: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        path = tmp_path / "expect.json"
        path.write_text(json.dumps(expect))
        done = subprocess.run([sys.executable, "-m", "gpu_provision.node", "verify", "--expect", str(path)], cwd=REPO,
                              capture_output=True, text=True, timeout=120)
        return done.returncode, json.loads(done.stdout)

    return run
