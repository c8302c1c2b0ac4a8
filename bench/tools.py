"""Running each tool as its own process, measuring wall time, peak memory and remote commands per host."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
ANSIBLE_VENV = REPO / "bench" / ".venv-ansible"
ANSIBLE_VERSION = "ansible-core>=2.16,<2.20"


@dataclass
class Measurement:
    """One tool's run on one fleet."""

    tool: str
    fleet: str
    hosts: int
    operations: int
    wall_s: float
    peak_rss_mb: float
    commands: dict[str, int] = field(default_factory=dict)
    in_sync: bool | None = None
    note: str = ""
    #: CPU seconds of the tool's process and the children it waited for (the controller's share).
    controller_cpu_s: float = 0.0
    #: CPU seconds the hosts' side spent during the run (every sshd, session and probe); None where not measured.
    hosts_cpu_s: float | None = None
    #: gpu-provision only: CPU seconds of the check itself, without the process's start-up and imports.
    check_cpu_s: float | None = None

    @property
    def commands_per_host(self) -> float:
        """Mean remote commands per host."""
        return sum(self.commands.values()) / max(self.hosts, 1)

    def to_json(self) -> dict[str, Any]:
        """Plain form for the results file."""
        out = dict(self.__dict__)
        out["commands_per_host"] = round(self.commands_per_host, 2)
        out["controller_cpu_s"] = round(self.controller_cpu_s, 3)
        return out


@dataclass
class Run:
    """A finished process."""

    rc: int
    stdout: str
    stderr: str
    wall_s: float
    peak_rss_mb: float
    cpu_s: float


def run_measured(argv: list[str], workdir: Path, tag: str, env: dict[str, str] | None = None,
                 timeout: float = 900) -> Run:
    """Run ``argv`` with output to files; wall time and the largest RSS of it or any child it waited for."""
    out, err = workdir / f"{tag}.out", workdir / f"{tag}.err"
    full_env = {**os.environ, **(env or {}), "PYTHONPATH": str(REPO)}
    with open(out, "wb") as o, open(err, "wb") as e:
        start = time.monotonic()
        proc = subprocess.Popen(argv, stdout=o, stderr=e, cwd=REPO, env=full_env)
        deadline = start + timeout
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        wall = time.monotonic() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(proc.returncode, out.read_text(errors="replace"), err.read_text(errors="replace"), wall,
               usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime)


def ours(workdir: Path, fleet: str, names: list[str], operations: int, cluster: Path, workload: Path,
         profile: Path | None = None) -> Measurement:
    """gpu-provision's drift engine with the workload stage, over the repository's inventory.py (under cProfile,
    its statistics written to ``profile``, when given)."""
    tag = f"ours-{fleet}-{len(names)}-{operations}" + ("-profiled" if profile else "")
    run = run_measured([sys.executable, "-m", "bench.ours", "inventory.py", str(workload),
                        *(["--profile", str(profile)] if profile else [])], workdir,
                       tag, env={"GPU_PROVISION_CLUSTER": str(cluster)})
    try:
        report = json.loads(run.stdout)
    except ValueError:
        return Measurement("gpu-provision", fleet, len(names), operations, run.wall_s, run.peak_rss_mb,
                           note=f"failed (rc {run.rc}): {run.stderr.strip().splitlines()[-1:]}",
                           controller_cpu_s=run.cpu_s)
    commands = {n["name"]: n["commands"] for n in report["nodes"]}
    drift = [f"{n['name']}: {n['status']} {n['differences'][:1] or n['problems'][:1]}"
             for n in report["nodes"] if n["status"] != "in-sync"]
    return Measurement("gpu-provision", fleet, len(names), operations, run.wall_s, run.peak_rss_mb, commands,
                       in_sync=run.rc == 0, note="; ".join(drift)[:300], controller_cpu_s=run.cpu_s,
                       check_cpu_s=report.get("bench", {}).get("check_cpu_s"))


def floor(workdir: Path, fleet: str, names: list[str], operations: int, cluster: Path) -> Measurement:
    """The fleet runner behind ``gpu-provision drift`` running ``true`` on every host (``bench/floor.py``): the least
    a check over one fresh SSH connection per host can cost. Listed under the workload's operations so its ratios
    read against the drift of the same hosts; "in sync" means every host ran it."""
    run = run_measured([sys.executable, "-m", "bench.floor", "inventory.py"], workdir,
                       f"floor-{fleet}-{len(names)}", env={"GPU_PROVISION_CLUSTER": str(cluster)})
    try:
        report = json.loads(run.stdout)
    except ValueError:
        return Measurement(FLOOR, fleet, len(names), operations, run.wall_s, run.peak_rss_mb,
                           note=f"failed (rc {run.rc}): {run.stderr.strip().splitlines()[-1:]}",
                           controller_cpu_s=run.cpu_s)
    failed = [n["name"] for n in report["nodes"] if not n["ok"]]
    return Measurement(FLOOR, fleet, len(names), operations, run.wall_s, run.peak_rss_mb,
                       {n["name"]: n["commands"] for n in report["nodes"]}, in_sync=run.rc == 0,
                       note=f"failed on {', '.join(failed)}"[:300] if failed else "", controller_cpu_s=run.cpu_s)


#: How the floor is named in the tables.
FLOOR = "ssh floor (true)"


def verify(workdir: Path, fleet: str, names: list[str], cluster: Path, expect: Path,
           profile: Path | None = None, tag: str = "") -> Measurement:
    """``gpu-provision verify``'s SSH path over the repository's inventory.py, every host against ``expect``;
    "in sync" here means every host's report is a pass (under cProfile, statistics to ``profile``, when given)."""
    tag = tag or f"verify-{fleet}-{len(names)}" + ("-profiled" if profile else "")
    run = run_measured([sys.executable, "-m", "bench.verify", "inventory.py", str(expect),
                        *(["--profile", str(profile)] if profile else [])], workdir, tag,
                       env={"GPU_PROVISION_CLUSTER": str(cluster)})
    try:
        report = json.loads(run.stdout)
    except ValueError:
        return Measurement("gpu-provision verify", fleet, len(names), 0, run.wall_s, run.peak_rss_mb,
                           note=f"failed (rc {run.rc}): {run.stderr.strip().splitlines()[-1:]}",
                           controller_cpu_s=run.cpu_s)
    commands = {n["name"]: n["commands"] for n in report["nodes"]}
    bad = [f"{n['name']}: {n['status']} {n['first_problem']}" for n in report["nodes"] if n["status"] != "pass"]
    return Measurement("gpu-provision verify", fleet, len(names), 0, run.wall_s, run.peak_rss_mb, commands,
                       in_sync=run.rc == 0, note="; ".join(bad)[:300], controller_cpu_s=run.cpu_s,
                       check_cpu_s=report.get("bench", {}).get("check_cpu_s"))


def pipeline(workdir: Path, hosts: int, cluster: Path) -> dict[str, Any]:
    """``gpu-provision drift`` itself with every stage of the pipeline, and ``pyinfra inventory.py
    deploys/gpu_node.py --dry``, on nodes described as GPU nodes but not converged (so both find drift): their cost
    per host with the real stages' many wants."""
    run = run_measured([sys.executable, "-m", "gpu_provision.cli", "drift", "inventory.py", "--cluster", str(cluster),
                        "--json"], workdir, f"pipeline-{hosts}")
    try:
        report = json.loads(run.stdout)
    except ValueError:
        return {"error": run.stderr.strip()[-300:], "wall_s": run.wall_s}
    nodes = report["nodes"]
    counts_file = workdir / f"pipeline-{hosts}-dry.counts.json"
    dry = run_measured([sys.executable, "-m", "bench.stock_pyinfra", str(counts_file), "--", "inventory.py",
                        "deploys/gpu_node.py", "--dry"], workdir, f"pipeline-{hosts}-dry",
                       env={"GPU_PROVISION_CLUSTER": str(cluster)})
    dry_counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
    return {"hosts": hosts, "stages": report["stages"], "wall_s": round(run.wall_s, 2), "exit_status": run.rc,
            "peak_rss_mb": round(run.peak_rss_mb), "commands_per_host": sum(n["commands"] for n in nodes) / len(nodes),
            "differences_per_host": sum(len(n["differences"]) for n in nodes) / len(nodes),
            "deploy_dry": {"wall_s": round(dry.wall_s, 2), "exit_status": dry.rc,
                           "commands_per_host": sum(dry_counts.values()) / hosts,
                           "changes": pyinfra_changes(dry.stdout + dry.stderr)}}


def stock_pyinfra(workdir: Path, fleet: str, names: list[str], operations: int, cluster: Path,
                  workload: Path) -> Measurement:
    """pyinfra's own operations and facts (``--dry``) on the same inventory."""
    tag = f"pyinfra-{fleet}-{len(names)}-{operations}"
    counts_file = workdir / f"{tag}.counts.json"
    run = run_measured([sys.executable, "-m", "bench.stock_pyinfra", str(counts_file), "--", "inventory.py",
                        "bench/stock_deploy.py", "--dry"], workdir, tag,
                       env={"GPU_PROVISION_CLUSTER": str(cluster), "GPU_PROVISION_BENCH_WORKLOAD": str(workload)})
    counts = json.loads(counts_file.read_text()) if counts_file.exists() else {}
    text = run.stdout + run.stderr
    changes = pyinfra_changes(text)
    in_sync = run.rc == 0 and changes == 0
    note = "" if in_sync else f"rc {run.rc}, {changes} operations would change"
    return Measurement("stock pyinfra", fleet, len(names), operations, run.wall_s, run.peak_rss_mb, counts,
                       in_sync=in_sync, note=note, controller_cpu_s=run.cpu_s)


def pyinfra_changes(text: str) -> int:
    """Sum of the "Change" column of pyinfra's "Detected changes" table (``-`` is none, ``N (hosts)`` is N)."""
    total = 0
    in_table = False
    for line in text.splitlines():
        if line.startswith("--> Detected changes"):
            in_table = True
            continue
        if in_table:
            if not line.strip():
                break
            columns = re.split(r"\s{2,}", line.strip())
            if len(columns) >= 3 and columns[0] != "Operation":
                found = re.match(r"(\d+)", columns[-2])
                total += int(found.group(1)) if found else 0
    return total


def ensure_ansible() -> Path:
    """ansible-playbook from a separate virtual environment under bench/ (created and installed on first use)."""
    binary = ANSIBLE_VENV / "bin" / "ansible-playbook"
    if not binary.exists():
        subprocess.run([sys.executable, "-m", "venv", str(ANSIBLE_VENV)], check=True)
        subprocess.run([str(ANSIBLE_VENV / "bin" / "pip"), "install", "-q", ANSIBLE_VERSION], check=True)
    return binary


def ansible(workdir: Path, fleet: str, hosts: list[tuple[str, str]], operations: int, inventory: Path,
            playbook: Path, forks: int) -> Measurement:
    """The equivalent playbook with ``--check --diff`` (pipelining and SSH connection reuse on)."""
    tag = f"ansible-{fleet}-{len(hosts)}-{operations}"
    env = {"ANSIBLE_PIPELINING": "True", "ANSIBLE_HOST_KEY_CHECKING": "True", "ANSIBLE_RETRY_FILES_ENABLED": "False",
           "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=120s",
           "ANSIBLE_LOCAL_TEMP": str(workdir / "ansible-tmp"), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_CONTROL_PATH_DIR": str(workdir / "cp")}
    run = run_measured([str(ensure_ansible()), "-i", str(inventory), str(playbook), "--check", "--diff", "-vvv",
                        "-f", str(forks)], workdir, tag, env=env)
    by_address = {address: name for name, address in hosts}
    counts: dict[str, int] = dict.fromkeys(by_address.values(), 0)
    for match in re.finditer(r"^<([0-9.]+)> SSH: EXEC ", run.stdout, re.M):
        name = by_address.get(match.group(1))
        if name:
            counts[name] += 1
    recap = re.findall(r"^(\S+)\s+: ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", run.stdout, re.M)
    bad = [f"{h} changed={c} unreachable={u} failed={f}" for h, _, c, u, f in recap if (c, u, f) != ("0", "0", "0")]
    in_sync = run.rc == 0 and len(recap) == len(hosts) and not bad
    note = "" if in_sync else (f"rc {run.rc}; " + "; ".join(bad[:3]))[:300]
    return Measurement("ansible --check", fleet, len(hosts), operations, run.wall_s, run.peak_rss_mb, counts,
                       in_sync=in_sync, note=note, controller_cpu_s=run.cpu_s)
