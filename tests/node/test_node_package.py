"""The node package and its bundles: Python 3.9 syntax and standard-library imports only (plus the modules the
bundle carries from installed distributions), one reproducible zip application whose entry points run on Python 3.9,
and a probe command that stays one argument with no upload."""

from __future__ import annotations

import ast
import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from gpu_provision import bundle
from gpu_provision.errors import GpuProvisionError
from gpu_provision.node import __main__ as entries
from gpu_provision.node import probe

NODE = Path(bundle.__file__).resolve().parent / "node"
#: What node-side code may import: the standard library and the modules the bundle carries (pynvml).
ALLOWED_IMPORTS = set(sys.stdlib_module_names) | set(bundle.BUNDLED)
PY39_CANDIDATES = ("/root/.pyenv/versions/3.9.18/bin/python", shutil.which("python3.9"))
#: Linux's limit on one command-line argument (MAX_ARG_STRLEN).
ARG_LIMIT = 128 * 1024


def python39() -> str | None:
    """A Python 3.9 interpreter on this machine, if there is one that runs."""
    for candidate in filter(None, PY39_CANDIDATES):
        try:
            done = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True,
                                  text=True, timeout=30)
        except OSError:
            continue
        if done.returncode == 0 and done.stdout.strip() == "(3, 9)":
            return candidate
    return None


def node_sources() -> list[Path]:
    return sorted(p for p in NODE.rglob("*.py") if "__pycache__" not in p.parts)


@pytest.mark.parametrize("path", node_sources(), ids=lambda p: str(p.relative_to(NODE)))
def test_parses_as_python_39_and_imports_only_the_standard_library(path: Path) -> None:
    tree = ast.parse(path.read_text(), filename=str(path), feature_version=(3, 9))
    depth = len(path.relative_to(NODE).parts)  # relative imports may climb to the node package, never above it
    foreign = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            names = [] if node.level <= depth else ["." * node.level + (node.module or "")]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            continue
        foreign += [n for n in names if n.startswith(".") or n.split(".")[0] not in ALLOWED_IMPORTS]
    assert foreign == [], f"{path.relative_to(NODE)} imports {foreign}: node-side code is standard library only"



def test_every_probe_section_is_listed() -> None:
    files = {p.stem for p in (NODE / "probe").glob("*.py") if not p.name.startswith("_")}
    assert set(probe.SECTIONS) == files


def test_reproducible() -> None:
    first = bundle.build()
    bundle.build.cache_clear()
    assert bundle.build() == first


def test_contents() -> None:
    names = zipfile.ZipFile(io.BytesIO(bundle.build())).namelist()
    assert names[0] == "__main__.py" and names[1:] == sorted(names[1:])
    package = bundle.PACKAGE
    for module in ("main", "checks", "cuda", "nvsmi", "readings", "report", "runtime", "nvml"):
        assert f"{package}/verify/{module}.py" in names
    for module in ("__main__", "catalog", "probe/__init__", "probe/mig", "mig/apply", "mig/layout", "mig/vgpu"):
        assert f"{package}/{module}.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert [n for n in names[1:] if not n.startswith(package + "/")] == ["LICENSE.nvidia-ml-py", "pynvml.py"]
    assert sorted(n[len(package) + 1:] for n in names if n.startswith(package + "/")) == [
        name for name, _ in bundle.node_files()]


def test_pynvml_comes_from_the_installed_nvidia_ml_py_with_its_licence() -> None:
    """The bundle's pynvml is the installed nvidia-ml-py's file, byte for byte; the tree keeps no copy."""
    dist = metadata.distribution("nvidia-ml-py")
    record = next(f for f in dist.files or [] if f.as_posix() == "pynvml.py")
    archive = zipfile.ZipFile(io.BytesIO(bundle.build()))
    assert archive.read("pynvml.py") == Path(str(dist.locate_file(record))).read_bytes()
    licence = archive.read("LICENSE.nvidia-ml-py").decode()
    assert licence.startswith(f"nvidia-ml-py {dist.version} (NVIDIA Corporation), licence: BSD.")
    assert "Copyright (c) 2011-" in licence and "Redistribution and use in source and binary forms" in licence
    assert "THE POSSIBILITY OF SUCH DAMAGE." in licence and "import" not in licence
    assert not [p for p in NODE.rglob("*") if "pynvml" in p.name.lower() and "__pycache__" not in p.parts]


def test_a_missing_bundled_distribution_is_one_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bundle, "BUNDLED", {"nosuchmodule": "no-such-distribution"})
    bundle.bundled_files.cache_clear()
    try:
        with pytest.raises(GpuProvisionError, match="nosuchmodule from the no-such-distribution distribution, which "
                                                    "is not installed: pip install no-such-distribution"):
            bundle.bundled_files()
    finally:
        bundle.bundled_files.cache_clear()


def test_agent_runs_from_the_zip_with_isolated_python(tmp_path: Path) -> None:
    """``python3 -I`` ignores PYTHONPATH and site-packages: the zip needs nothing but the standard library."""
    agent = bundle.write(str(tmp_path / bundle.BUNDLE_NAME))
    assert os.stat(agent).st_mode & 0o777 == 0o755
    expect = tmp_path / "expect.json"
    expect.write_text(json.dumps({"node": "bare", "gpu": {"model": "H200", "count": 1},
                                  "paths": {"nvidia_smi": str(tmp_path / "none"), "proc": str(tmp_path),
                                            "sysfs": str(tmp_path), "dev": str(tmp_path)}}))
    done = subprocess.run([sys.executable, "-I", agent, "verify", "--expect", str(expect)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=60)
    report = json.loads(done.stdout)
    assert done.returncode == 1 and report["node"] == "bare"
    checks = {c["id"]: c for c in report["checks"]}
    assert checks["node.gpu.count"]["reason"] == "nvidia-smi gave no GPU list"
    assert checks["node.cuda.vector_add"]["status"] == "skip"


def test_unknown_entry_prints_usage(tmp_path: Path) -> None:
    agent = bundle.write(str(tmp_path / bundle.BUNDLE_NAME))
    done = subprocess.run([sys.executable, "-I", agent, "nope"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == entries.USAGE
    assert entries.main(["--help"]) == 0


def test_bundle_runs_on_python_39(tmp_path: Path) -> None:
    """RHEL 9's python3 is 3.9: every entry point of the built bundle starts there."""
    interpreter = python39()
    if interpreter is None:
        pytest.skip(f"no Python 3.9 interpreter on this machine (looked for {', '.join(filter(None, PY39_CANDIDATES))}"
                    " and python3.9 on PATH)")
    agent = bundle.write(str(tmp_path / bundle.BUNDLE_NAME))

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([interpreter, "-I", *argv], capture_output=True, text=True, timeout=120, cwd=tmp_path)

    empty = run(agent, "probe", "{}")
    assert empty.returncode == 0 and json.loads(empty.stdout) == {}, empty.stderr
    for entry, prog in (("verify", "gpu-verify"), ("mig-apply", "gpu-provision-node mig-apply")):
        helped = run(agent, entry, "--help")
        assert helped.returncode == 0 and helped.stdout.startswith(f"usage: {prog}"), helped.stderr
    python, _, loader = bundle.probe_command({"system": {}}).partition(" -c ")
    assert python == bundle.PROBE_PYTHON and python.startswith("python3 ")
    # The probe's own flags on 3.9's interpreter: isolated, without site.
    probed = subprocess.run(["sh", "-c", f"{interpreter}{python[len('python3'):]} -c {loader}"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr
    assert json.loads(probed.stdout)["system"]["python"].startswith("3.9.")
    # The agent's NVML session, as it starts on a node: pynvml from the bundle (never from site-packages), on 3.9.
    script = tmp_path / "nvml39.py"
    script.write_text("import sys, json\nsys.path.insert(0, sys.argv[1])\n"
                      f"from {bundle.PACKAGE}.verify import nvml\n"
                      "session, why = nvml.Nvml.open()\n"
                      "print(json.dumps([nvml.pynvml.__file__, session is not None, why]))\n")
    opened = run(str(script), agent)
    assert opened.returncode == 0, opened.stderr
    origin, opened_session, why = json.loads(opened.stdout)
    assert origin == f"{agent}/pynvml.py"
    # Without an NVIDIA driver here, pynvml's own error for the missing library; with one, a session.
    assert opened_session or why == "NVML not available: NVML Shared Library Not Found", why


def test_probe_command_is_one_argument_without_the_agent() -> None:
    argv = shlex.split(bundle.probe_command({"mig": {"tables": True}, "system": {}}))
    assert argv[:4] == ["python3", "-I", "-S", "-c"] and json.loads(argv[5]) == {"mig": {"tables": True}, "system": {}}
    assert len(argv[4].encode()) < ARG_LIMIT // 2, f"probe command argument is {len(argv[4])} bytes"
    shipped = [name for name, _ in bundle.entry_files("probe")]
    assert "probe/mig.py" in shipped and "__init__.py" in shipped
    assert not [name for name in shipped if name.startswith("verify/")]  # the agent and its 8,000-line pynvml


def test_probe_command_answers_every_section_and_reports_a_failing_one(tmp_path: Path) -> None:
    """A section that raises answers ``{"error": ...}``; the others answer; names that are no section are left out."""
    request = {"files": {"paths": 5}, "accounts": {"users": ["root"], "groups": ["root"]}, "nothing": {}}
    done = subprocess.run(["sh", "-c", bundle.probe_command(request)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert set(answer) == {"files", "accounts"}
    assert answer["files"]["error"].startswith("TypeError: ")
    assert "error" not in answer["accounts"]
    assert done.stdout.strip() == json.dumps(answer, sort_keys=True)


def test_entry_points_in_a_checkout() -> None:
    """``python3 -m gpu_provision.node ENTRY`` runs the same entry points from the source tree."""
    root = NODE.parents[1]
    done = subprocess.run([sys.executable, "-m", "gpu_provision.node", "probe", json.dumps({"services": {}})],
                          capture_output=True, text=True, timeout=60, cwd=root)
    assert done.returncode == 0 and json.loads(done.stdout) == {"services": {}}, done.stderr
    assert set(entries.ENTRIES) == {"probe", "verify", "mig-apply", "diagnose"}


def test_probe_command_that_keeps_nothing_answers_the_same(tmp_path: Path) -> None:
    """``keep=False`` (the conformance suite's read-only probe): the same answer, and no step that writes the
    modules' copy on the node."""
    request = {"accounts": {"users": ["root"], "groups": ["root"]}}
    kept, read_only = bundle.probe_command(request), bundle.probe_command(request, keep=False)
    assert "store(" in kept and "_cache" in kept
    assert "store(" not in read_only and "_cache" not in read_only
    answers = [subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=120, cwd=tmp_path)
               for command in (kept, read_only)]
    assert [a.returncode for a in answers] == [0, 0], [a.stderr for a in answers]
    assert json.loads(answers[0].stdout) == json.loads(answers[1].stdout)
