"""The agent starts its CUDA children again through ``self_command``: that must work however the agent was loaded.

Found on a real H200: the agent kept on nodes by digest is imported from its zip by a ``python3 -c`` loader
(``gpu_provision.verify.agent``), where ``sys.argv[0]`` is ``-c``; relaunching ``python3 -c verify ...`` made every
CUDA check fail with ``NameError: name 'verify' is not defined``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_provision import bundle

# -S: no site-packages, as on a node (this venv has the package installed, which would win over the zip).
_PRINT_RELAUNCH = ("import json,sys; sys.path.insert(0, sys.argv[1]); "
                   f"from {bundle.PACKAGE}.verify.main import self_command; "
                   "print(json.dumps(self_command()[0]))")


@pytest.fixture(scope="module")
def pyz(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("agent") / "0123abcd.pyz"
    path.write_bytes(bundle.build())
    return path


def test_relaunch_from_a_zip_imported_by_a_c_loader_runs_the_agent(pyz: Path) -> None:
    prefix = json.loads(subprocess.run([sys.executable, "-S", "-c", _PRINT_RELAUNCH, str(pyz)], check=True,
                                       capture_output=True, text=True).stdout)
    assert prefix[1] == str(pyz)
    done = subprocess.run([*prefix, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "gpu-verify" in done.stdout and "--expect" in done.stdout


def test_relaunch_of_a_zipapp_run_directly_runs_the_agent(pyz: Path) -> None:
    probe = (f"from {bundle.PACKAGE}.verify.main import self_command; import json; "
             "print(json.dumps(self_command()[0]))")
    # Run the archive as a program, as the pyinfra verify stage did before the agent was kept by digest.
    script = pyz.parent / "show.py"
    script.write_text(probe)
    prefix = json.loads(subprocess.run([sys.executable, "-S", "-c", f"import sys,runpy; sys.argv=[{str(pyz)!r}]; "
                                        f"sys.path.insert(0, {str(pyz)!r}); exec(open({str(script)!r}).read())"],
                                       check=True, capture_output=True, text=True).stdout)
    assert prefix[1] == str(pyz)
    done = subprocess.run([*prefix, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
