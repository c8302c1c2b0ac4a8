"""What a probe run loads on the node: every module is paid for on every node at every drift check.

A drift check of files, packages, accounts and the system section runs no command on a dpkg node, so it must not
load the modules that commands, version caches or section loading used to pull in (``bench/README.md``: the
hosts' side of drift is most of its cost on a loopback fleet).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_provision.state import Request

ROOT = Path(__file__).resolve().parents[2]
KEPT_OUT = ("importlib", "warnings", "functools", "collections", "typing", "dataclasses", "subprocess")


def test_a_probe_of_files_packages_accounts_and_system_loads_none_of_the_costly_modules(tmp_path: Path) -> None:
    # signing too: preflight asks for it, so drift does; on a machine without Secure Boot it reads no more.
    request = {"packages": {"names": ["bash"]}, "files": {"paths": [str(tmp_path)], "content": []},
               "accounts": {"groups": ["root"]}, "system": {"sysctls": []},
               "signing": Request(sections={"signing"}).to_probe()["signing"]}
    # json is imported after the snapshot: it loads re, functools and collections itself.
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); import gpu_provision.node.probe as p; "
              f"answer = p.collect({request!r}); loaded = list(sys.modules); import json; "
              "print(json.dumps([sorted(answer), loaded]))")
    out = subprocess.run([sys.executable, "-I", "-S", "-c", script], capture_output=True, text=True, check=True)
    sections, loaded = json.loads(out.stdout)
    assert sections == ["accounts", "files", "packages", "signing", "system"]  # every section answered
    assert sorted(m for m in KEPT_OUT if m in loaded) == []
