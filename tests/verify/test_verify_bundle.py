"""The agent zip application: reproducible, complete, runnable by a plain python3, pynvml shipped unchanged."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pynvml

from gpu_provision.verify.bundle import AGENT_PACKAGE, build_agent, write_agent

ROOT = Path(__file__).resolve().parents[2]


def test_reproducible() -> None:
    first = build_agent()
    build_agent.cache_clear()
    assert build_agent() == first


def test_contents() -> None:
    names = zipfile.ZipFile(io.BytesIO(build_agent())).namelist()
    assert names[0] == "__main__.py"
    for module in ("main", "checks", "cuda", "nvsmi", "readings", "report", "runtime", "nvml", "vendor/pynvml"):
        assert f"{AGENT_PACKAGE}/{module}.py" in names
    assert f"{AGENT_PACKAGE}/vendor/LICENSE.pynvml" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]


def test_vendored_pynvml_is_the_wheels_file() -> None:
    shipped = zipfile.ZipFile(io.BytesIO(build_agent())).read(f"{AGENT_PACKAGE}/vendor/pynvml.py")
    assert shipped == Path(pynvml.__file__).read_bytes()
    assert shipped.startswith(b"#####\n# Copyright (c) 2011-2025, NVIDIA Corporation.")


def test_runs_from_the_zip_with_isolated_python(tmp_path: Path) -> None:
    """``python3 -I`` ignores PYTHONPATH and site-packages: the zip needs nothing but the standard library."""
    agent = write_agent(str(tmp_path / "gpu-verify.pyz"))
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"node": "bare", "gpu": {"model": "H200", "count": 1},
                                  "paths": {"nvidia_smi": str(tmp_path / "none"), "proc": str(tmp_path),
                                            "sysfs": str(tmp_path), "dev": str(tmp_path)}}))
    done = subprocess.run([sys.executable, "-I", agent, "--expect", str(expect)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=60)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["node"] == "bare"
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["node.gpu.count"]["reason"] == "nvidia-smi gave no GPU list"
    assert checks["node.cuda.vector_add"]["status"] == "skip"
