"""What importing the verification agent loads: every module is paid for on every node at every run.

The agent runs as ``python3 -I -S`` (``bundle.PROBE_PYTHON``); a fleet verify of a thousand nodes pays each of its
imports a thousand times. These modules cost more to import than the agent's state checks take to run
(``bench/README.md``: ``inspect`` alone, which ``dataclasses`` imports, about 10 ms a run), so the agent's path keeps
them out: typing only under ``TYPE_CHECKING``, plain classes instead of dataclasses, the MIG model and ``inspect``
imported where they are used.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Modules the agent must not import merely by starting (what each one pulled in before it was kept out).
KEPT_OUT = ("typing", "dataclasses", "inspect", "ast", "dis", "tokenize", "datetime", "argparse", "tempfile",
            "shutil", "gpu_provision.node.mig.model")


def _loaded(code: str) -> set[str]:
    script = f"import sys; sys.path.insert(0, {str(ROOT)!r}); {code}; import json; print(json.dumps(list(sys.modules)))"
    out = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, check=True)
    return set(json.loads(out.stdout))


def test_starting_the_agent_loads_none_of_the_costly_modules():
    loaded = _loaded("import gpu_provision.node.verify.main")
    assert "gpu_provision.node.verify.registry" in loaded  # the check table is imported, so the test sees its imports
    assert sorted(m for m in KEPT_OUT if m in loaded) == []


def test_the_mig_model_comes_in_where_a_layout_is_checked():
    code = ("from gpu_provision.node.verify.checks import mig_checks; "
            "found = mig_checks({'index': 0, 'mig_current': True, 'mig_pending': True}, "
            "{'mig': {'0': [{'profile': '7g.141gb', 'start': 0, 'size': 8}]}}, "
            "[{'gpu': 0, 'profile': '7g.141gb', 'start': 0, 'size': 8, 'instance_id': 1}], "
            "[{'gpu': 0, 'gpu_instance_id': 1}]); "
            "assert [c.status for c in found] == ['pass', 'pass', 'pass'], found")
    assert "gpu_provision.node.mig.model" in _loaded(code)
