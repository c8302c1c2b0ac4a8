"""``gpu-provision verify @local`` verifies the machine it runs on without the fleet runner: the whole command, run
in a fresh interpreter, imports neither paramiko, gevent, pyinfra nor jsonschema (module presence, not time), and
still prints the node's report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("paramiko", "gevent", "jsonschema", "pyinfra", "pyinfra_cli", "gpu_provision.fleet")
CLUSTER = """\
version: v1
cluster:
  name: one
  kubernetes: {enabled: false}
nodes:
  - name: h200-node
    address: 127.0.0.1
    gpus: {model: H200, count: 1}
    driver: {install_method: preinstalled, version: 580.159.04}
"""
PROGRAM = """\
import json, sys
from gpu_provision.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:  # --help leaves as argparse does
    status = exc.code
print(json.dumps({"status": status, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _run(tmp_path: Path, *args: str) -> tuple[dict, str]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    cache = tmp_path / "agent"
    cache.mkdir(mode=0o700)
    env = dict(os.environ, GPU_PROVISION_CLUSTER=str(tmp_path / "cluster.yaml"), GPU_PROVISION_NODE="h200-node",
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", PROGRAM, *args, "--remote-dir", str(cache)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=300)
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


def _loaded(modules: list[str], name: str) -> bool:
    return any(m == name or m.startswith(name + ".") for m in modules)


def test_verify_local_imports_no_ssh_machinery_nor_jsonschema(tmp_path: Path) -> None:
    outcome, stdout = _run(tmp_path, "verify", "@local", "--json")
    assert [name for name in HEAVY if _loaded(outcome["modules"], name)] == []
    reports = json.loads(stdout)
    assert [r["node"] for r in reports] == ["h200-node"]
    assert outcome["status"] in (1, 2)  # no GPU here: a failed check, or an agent cache that is not root's


def test_help_validate_and_mig_plan_import_no_ssh_machinery(tmp_path: Path) -> None:
    for args in (["validate"], ["mig-plan", "--gpu", "H200", "3g.71gb x2"], ["--help"]):
        (tmp_path / "cluster.yaml").write_text(CLUSTER)
        env = dict(os.environ, GPU_PROVISION_CLUSTER=str(tmp_path / "cluster.yaml"), PYTHONPATH=str(REPO))
        done = subprocess.run([sys.executable, "-c", PROGRAM, *args], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=120)
        outcome = json.loads(done.stderr.strip().splitlines()[-1])
        assert [name for name in HEAVY if _loaded(outcome["modules"], name)] == [], args


def test_verify_local_words_a_failed_agent_as_every_failed_command(tmp_path: Path) -> None:
    """An agent kept in the cache that ends with status 4 and no report: the report's error names the command,
    ``exited 4`` and the agent's last line, as the fleet's failures read, and the run still loads no pyinfra."""
    import zipfile

    from gpu_provision import bundle
    from gpu_provision.verify import agent

    cache = tmp_path / "agent"
    cache.mkdir(mode=0o700)
    with zipfile.ZipFile(cache / f"{agent.agent_digest()}.pyz", "w") as pyz:
        pyz.writestr(f"{bundle.PACKAGE}/__init__.py", "")
        pyz.writestr(f"{bundle.PACKAGE}/__main__.py",
                     "import sys\ndef main(argv):\n    print('half a report', file=sys.stderr)\n    return 4\n")
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    env = dict(os.environ, GPU_PROVISION_CLUSTER=str(tmp_path / "cluster.yaml"), GPU_PROVISION_NODE="h200-node",
               PYTHONPATH=str(REPO))
    done = subprocess.run([sys.executable, "-c", PROGRAM, "verify", "@local", "--json", "--remote-dir", str(cache)],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    outcome = json.loads(done.stderr.strip().splitlines()[-1])
    assert [name for name in HEAVY if _loaded(outcome["modules"], name)] == []
    [report] = json.loads(done.stdout)
    assert report["status"] == "error", report
    error = report["error"]
    assert error.startswith("agent run failed: python3 "), error
    assert " exited 4: " in error and error.endswith("half a report"), error
