"""The benchmark: one command, three tools, the same nodes, side by side.

For each fleet (rig nodes with systemd; a simulated fleet of loopback sshd hosts) and each size, it runs

* gpu-provision's drift engine (one batched probe per node),
* the same check with stock pyinfra operations in ``--dry`` mode (one fact per operation),
* an equivalent Ansible playbook with ``--check --diff``,

and prints wall time, remote commands per host, the controller's CPU seconds per host and (on the loopback fleet)
the hosts' sshd CPU seconds per host, and the controller's peak memory, each with its ratio to gpu-provision, then
how cost grows with the fleet and with the number of operations; ``--profile N`` adds where the controller's time
goes in one drift run over N fleet hosts. Results also go to
``bench/results/<time>.json`` and ``.txt``. Needs root (rig nodes and the loopback fleet run in namespaces).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import hotspots, simgpu, tools
from bench.fleet import MAX_HOSTS, LoopbackFleet, check_limits, raise_open_files
from bench.playbook import write_inventory, write_playbook
from bench.workload import Workload, base_versions, converge_script, write_json

RESULTS = Path(__file__).resolve().parent / "results"
#: Loopback addresses of the two bad hosts: one accepts and never speaks, nothing listens on the other.
STALLED_ADDRESS = "127.0.20.250"
REFUSING_ADDRESS = "127.0.20.251"
DEFAULT_WORKDIR = Path("/var/tmp/gpu-provision-bench")
TOOLS = ("ours", "floor", "verify", "pyinfra", "ansible")


def _sizes(text: str) -> list[int]:
    return sorted({int(part) for part in text.split(",") if part.strip()}) if text else []


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--fleet-sizes", type=_sizes, default=[10, 50, 100],
                   help=f"loopback-fleet host counts (default 10,50,100; max {MAX_HOSTS})")
    p.add_argument("--rig-sizes", type=_sizes, default=[1, 3, 6],
                   help="rig node counts (default 1,3,6; max 6; empty: no rig nodes are started)")
    p.add_argument("--files", type=int, default=8, help="config files in the workload (default 8)")
    p.add_argument("--growth-files", type=int, default=40,
                   help="config files in the larger workload run on the largest rig size (default 40; 0: skip)")
    p.add_argument("--tools", default=",".join(TOOLS),
                   help="tools to run (default: ours,floor,verify,pyinfra,ansible; floor: the fleet runner running "
                        "`true` on every host, the least one fresh SSH connection per host costs; verify runs on the "
                        "loopback fleet only)")
    p.add_argument("--others-max-hosts", type=int, default=200,
                   help="run stock pyinfra and Ansible only on fleet sizes up to this (default 200; gpu-provision "
                        "runs on every size)")
    p.add_argument("--profile", type=int, default=0, metavar="HOSTS",
                   help="also profile one gpu-provision drift run over this many fleet hosts (0: no profile)")
    p.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help="scratch directory (default: %(default)s)")
    p.add_argument("--max-seconds", type=int, default=1800,
                   help="the loopback fleet stops itself after this, even if the benchmark is still running")
    p.add_argument("--keep-rig-nodes", action="store_true",
                   help="leave the benchmark's rig nodes running (a re-run then skips booting and converging)")
    args = p.parse_args(argv)
    args.tools = [t for t in args.tools.split(",") if t]
    unknown = set(args.tools) - set(TOOLS)
    if unknown:
        p.error(f"unknown tools: {', '.join(sorted(unknown))}")
    if any(not 1 <= n <= 6 for n in args.rig_sizes) or any(not 1 <= n <= MAX_HOSTS for n in args.fleet_sizes):
        p.error(f"rig sizes must be 1..6 and fleet sizes 1..{MAX_HOSTS}")
    if args.profile and (not args.fleet_sizes or args.profile > max(args.fleet_sizes) or "ours" not in args.tools):
        p.error("--profile needs gpu-provision among the tools and at most the largest fleet size")
    return args


def write_cluster(path: Path, hosts: list[tuple[str, str]], key: Path, known_hosts: Path,
                  gpus: dict[str, Any] | None = None, connect_timeout: int = 10) -> Path:
    """A cluster file naming ``hosts`` (name, loopback address) with the given SSH key and known_hosts (and, for
    the real pipeline, the GPUs every node is described with)."""
    doc = {"version": "v1",
           "cluster": {"name": "bench", "kubernetes": {"enabled": False},
                       "ssh": {"user": "root", "key": str(key), "known_hosts": str(known_hosts),
                               "strict_host_key_checking": True, "connect_timeout": connect_timeout},
                       # Controller files come only from the cluster file's directory and those it names.
                       "controller_dirs": sorted({str(key.parent), str(known_hosts.parent)})},
           "nodes": [{"name": name, "address": address, **({"gpus": gpus} if gpus else {})} for name, address in hosts]}
    path.write_text(json.dumps(doc, indent=1))
    return path


class Bench:
    """Runs the tools and keeps their measurements."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.work = args.workdir / time.strftime("run-%Y%m%d-%H%M%S")
        self.work.mkdir(parents=True, exist_ok=True)
        self.results: list[tools.Measurement] = []
        self.pipeline: dict[str, Any] | None = None
        self.unreachable: dict[str, Any] | None = None
        self.profile: dict[str, Any] | None = None
        self.first_contact: dict[str, Any] | None = None
        self.verify_first_contact: dict[str, Any] | None = None
        self.verify_profile: dict[str, Any] | None = None

    def expect_file(self) -> Path:
        """The expectations every loopback-fleet host is verified against (its simulated GPUs)."""
        path = self.work / "fleet-expect.json"
        if not path.exists():
            path.write_text(json.dumps(simgpu.expectations(), indent=1))
        return path

    def measure(self, fleet: str, hosts: list[tuple[str, str]], workload: Workload, key: Path,
                known_hosts: Path, hosts_cpu: Callable[[], float] | None = None) -> None:
        """Run every chosen tool once against ``hosts`` with ``workload``; ``hosts_cpu``, when given, reads the
        CPU seconds the hosts' side has spent so far (read before and after each tool)."""
        ops = workload.operations
        folder = self.work / f"{fleet}-{len(hosts)}-{ops}"
        folder.mkdir(exist_ok=True)
        cluster = write_cluster(folder / "cluster.yaml", hosts, key, known_hosts)
        workload_file = write_json(folder / "workload.json", workload)
        names = [name for name, _ in hosts]
        runners: dict[str, Callable[[], tools.Measurement]] = {
            "ours": lambda: tools.ours(folder, fleet, names, ops, cluster, workload_file),
            "floor": lambda: tools.floor(folder, fleet, names, ops, cluster),
            "pyinfra": lambda: tools.stock_pyinfra(folder, fleet, names, ops, cluster, workload_file),
            "ansible": lambda: tools.ansible(folder, fleet, hosts, ops,
                                             write_inventory(folder / "hosts.ini", hosts, key, known_hosts),
                                             write_playbook(folder, workload.to_json()),
                                             forks=min(40, len(hosts))),
        }
        if fleet == "fleet":
            runners["verify"] = lambda: tools.verify(folder, fleet, names, cluster, self.expect_file())
        for tool in self.args.tools:
            if tool in ("pyinfra", "ansible") and fleet == "fleet" and len(hosts) > self.args.others_max_hosts:
                continue
            if tool not in runners:
                continue
            before = hosts_cpu() if hosts_cpu else None
            result = runners[tool]()
            if hosts_cpu and before is not None:
                result.hosts_cpu_s = hosts_cpu() - before
            self.results.append(result)
            print(f"  {fleet:<5} {len(hosts):>4} hosts {ops:>3} ops  {result.tool:<22} {result.wall_s:7.2f} s  "
                  f"{result.commands_per_host:6.1f} cmds/host  "
                  f"{1000 * result.controller_cpu_s / len(hosts):6.1f} ms controller CPU/host  "
                  f"{'in sync' if result.in_sync else result.note}", flush=True)

    def rig(self, workload: Workload, growth: Workload | None, converge: str) -> None:
        """The rig part: systemd nodes behind the rig's loopback forwarders."""
        from bench.rignodes import ensure, power_off

        sizes = self.args.rig_sizes
        nodes, key, known_hosts = ensure(max(sizes), converge)
        try:
            self._rig_runs(nodes, key, known_hosts, workload, growth)
        finally:
            if not self.args.keep_rig_nodes:
                power_off(nodes)

    def _rig_runs(self, nodes: list[Any], key: Path, known_hosts: Path, workload: Workload,
                  growth: Workload | None) -> None:
        sizes = self.args.rig_sizes
        for size in sizes:
            hosts = [(n.name, n.ssh_address) for n in nodes[:size]]
            self.measure("rig", hosts, workload, key, known_hosts)
        if growth is not None:
            self.measure("rig", [(n.name, n.ssh_address) for n in nodes[:max(sizes)]], growth, key, known_hosts)
        hosts = [(n.name, n.ssh_address) for n in nodes[:max(sizes)]]
        self.pipeline = tools.pipeline(self.work, len(hosts),
                                       write_cluster(self.work / "pipeline-cluster.yaml", hosts, key, known_hosts,
                                                     gpus={"model": "H200", "count": 8}))

    def fleet(self, base: Path, workload: Workload, converge: str) -> None:
        """The loopback fleet part: many sshd hosts sharing one Debian root, no systemd."""
        sizes = self.args.fleet_sizes
        fleet = LoopbackFleet(self.args.workdir / "fleet", base, max(sizes), self.args.max_seconds)
        if "verify" in self.args.tools:  # simulated GPUs for verify, set up with the rest of the shared root
            simgpu.lay_out(fleet.workdir / "upper")
            # No agent kept from an earlier bench run: verify's first contact sends it (the hosts share one root,
            # so the first host to get it gives it to all; tests/verify count the per-node sends).
            shutil.rmtree(fleet.workdir / "upper" / "var" / "lib" / "gpu-provision" / "agent", ignore_errors=True)
            converge += "\n".join(simgpu.converge_lines()) + "\n"
        fleet.prepare(converge)
        with fleet:
            hosts = [(h.name, h.address) for h in fleet.start()]
            if "ours" in self.args.tools:
                self.first_contact = self.warm_up(hosts, workload, fleet)
            if "verify" in self.args.tools:
                self.verify_first_contact = self.verify_warm_up(hosts, fleet)
            for size in sizes:
                self.measure("fleet", hosts[:size], workload, fleet.client_key, fleet.known_hosts, fleet.cpu_seconds)
            if self.args.profile:
                self.profile = self.profiled(hosts[:self.args.profile], workload, fleet)
                if "verify" in self.args.tools:
                    self.verify_profile = self.verify_profiled(hosts[:self.args.profile], fleet)
            if "ours" in self.args.tools:
                self.unreachable = self.with_bad_hosts(hosts[:min(sizes)], workload, fleet)

    def warm_up(self, hosts: list[tuple[str, str]], workload: Workload, fleet: LoopbackFleet) -> dict[str, Any]:
        """One untimed gpu-provision drift run over every fleet host before measuring: hosts it has not met yet
        get the full probe command and keep the probe's modules, so the measured runs show the steady state of
        repeated checks (the short command). Its own figures are kept as the first-contact cost."""
        folder = self.work / "first-contact"
        folder.mkdir(exist_ok=True)
        before = fleet.cpu_seconds()
        result = tools.ours(folder, "fleet", [n for n, _ in hosts], workload.operations,
                            write_cluster(folder / "cluster.yaml", hosts, fleet.client_key, fleet.known_hosts),
                            write_json(folder / "workload.json", workload))
        print(f"  first contact with {len(hosts)} hosts (not timed): {result.wall_s:.2f} s, "
              f"{'in sync' if result.in_sync else result.note}", flush=True)
        return {"hosts": len(hosts), "wall_s": round(result.wall_s, 2), "in_sync": result.in_sync,
                "check_cpu_s": result.check_cpu_s, "hosts_cpu_s": round(fleet.cpu_seconds() - before, 2)}

    def verify_warm_up(self, hosts: list[tuple[str, str]], fleet: LoopbackFleet) -> dict[str, Any]:
        """One untimed verify run over every fleet host before measuring: a host without this version of the agent
        gets it (three commands), so the measured runs show the steady state (one short command). Its own figures
        are kept as verify's first-contact cost."""
        folder = self.work / "verify-first-contact"
        folder.mkdir(exist_ok=True)
        before = fleet.cpu_seconds()
        result = tools.verify(folder, "fleet", [n for n, _ in hosts],
                              write_cluster(folder / "cluster.yaml", hosts, fleet.client_key, fleet.known_hosts),
                              self.expect_file())
        print(f"  verify first contact with {len(hosts)} hosts (not timed): {result.wall_s:.2f} s, "
              f"{result.commands_per_host:.1f} cmds/host, {'all pass' if result.in_sync else result.note}",
              flush=True)
        return {"hosts": len(hosts), "wall_s": round(result.wall_s, 2), "in_sync": result.in_sync,
                "commands_per_host": round(result.commands_per_host, 2), "check_cpu_s": result.check_cpu_s,
                "hosts_cpu_s": round(fleet.cpu_seconds() - before, 2), "note": result.note}

    def verify_profiled(self, hosts: list[tuple[str, str]], fleet: LoopbackFleet) -> dict[str, Any]:
        """One more verify run over ``hosts``, under cProfile, grouped as the drift profile is."""
        folder = self.work / f"verify-profile-{len(hosts)}"
        folder.mkdir(exist_ok=True)
        stats = folder / "verify.pstats"
        result = tools.verify(folder, "fleet", [n for n, _ in hosts],
                              write_cluster(folder / "cluster.yaml", hosts, fleet.client_key, fleet.known_hosts),
                              self.expect_file(), profile=stats)
        return {"hosts": len(hosts), "wall_s": round(result.wall_s, 2),
                "controller_cpu_s": round(result.controller_cpu_s, 2), "stats": str(stats),
                "groups": hotspots.summary(stats, len(hosts)) if stats.exists() else []}

    def profiled(self, hosts: list[tuple[str, str]], workload: Workload, fleet: LoopbackFleet) -> dict[str, Any]:
        """One more gpu-provision drift run over ``hosts``, under cProfile, grouped by what the time is for."""
        folder = self.work / f"profile-{len(hosts)}"
        folder.mkdir(exist_ok=True)
        stats = folder / "drift.pstats"
        result = tools.ours(folder, "fleet", [n for n, _ in hosts], workload.operations,
                            write_cluster(folder / "cluster.yaml", hosts, fleet.client_key, fleet.known_hosts),
                            write_json(folder / "workload.json", workload), profile=stats)
        return {"hosts": len(hosts), "wall_s": round(result.wall_s, 2),
                "controller_cpu_s": round(result.controller_cpu_s, 2), "stats": str(stats),
                "groups": hotspots.summary(stats, len(hosts)) if stats.exists() else []}

    def with_bad_hosts(self, hosts: list[tuple[str, str]], workload: Workload, fleet: LoopbackFleet) -> dict[str, Any]:
        """gpu-provision on fleet hosts plus one host that accepts and never answers and one that refuses,
        with a 3 s connect timeout: the good hosts are checked, the bad ones listed with their reasons."""
        with socket.socket() as stalled:
            stalled.bind((STALLED_ADDRESS, 22))
            stalled.listen(8)
            bad = [("stalled", STALLED_ADDRESS), ("refusing", REFUSING_ADDRESS)]
            folder = self.work / "unreachable"
            folder.mkdir(exist_ok=True)
            cluster = write_cluster(folder / "cluster.yaml", hosts + bad, fleet.client_key, fleet.known_hosts,
                                    connect_timeout=3)
            result = tools.ours(folder, "fleet", [n for n, _ in hosts + bad], workload.operations, cluster,
                                write_json(folder / "workload.json", workload))
        report = json.loads((folder / f"ours-fleet-{len(hosts) + 2}-{workload.operations}.out").read_text())
        return {"hosts": len(hosts), "wall_s": round(result.wall_s, 2), "summary": report["summary"],
                "not_checked": {n["name"]: n["problems"] for n in report["nodes"] if n["status"] == "not-checked"},
                "exit_status": report["exit_status"]}


def _per_host(seconds: float | None, hosts: int, width: int) -> str:
    return f"{1000 * seconds / hosts:{width}.1f}" if seconds is not None else f"{'-':>{width}}"


def table(results: list[tools.Measurement]) -> str:
    """Side-by-side table with ratios to gpu-provision, then growth with fleet size and operations."""
    head = (f"{'fleet':<6}{'hosts':>6}{'ops':>5}  {'tool':<22}{'wall s':>8}{'x ours':>8}{'cmds/host':>11}"
            f"{'x ours':>8}{'ctl CPU ms/host':>17}{'x ours':>8}{'check':>7}{'sshd CPU ms/host':>18}{'RSS MB':>8}{'x ours':>8}"
            "  in sync")
    lines = ["ctl CPU: the tool's process and its children, start-up included; check: gpu-provision's check alone, "
             "without start-up; sshd CPU: every sshd, session and probe of the fleet during the run", "",
             head, "-" * len(head)]
    base: dict[tuple[str, int, int], tools.Measurement] = {
        (r.fleet, r.hosts, r.operations): r for r in results if r.tool == "gpu-provision"}
    for r in results:
        ref = base.get((r.fleet, r.hosts, r.operations))

        def ratio(value: float, ref_value: float | None) -> str:
            return f"{value / ref_value:8.2f}" if ref_value else f"{'-':>8}"

        lines.append(
            f"{r.fleet:<6}{r.hosts:>6}{r.operations:>5}  {r.tool:<22}{r.wall_s:8.2f}"
            f"{ratio(r.wall_s, ref.wall_s if ref else None)}{r.commands_per_host:11.1f}"
            f"{ratio(r.commands_per_host, ref.commands_per_host if ref else None)}"
            f"{1000 * r.controller_cpu_s / r.hosts:17.1f}{ratio(r.controller_cpu_s, ref.controller_cpu_s if ref else None)}"
            f"{_per_host(r.check_cpu_s, r.hosts, 7)}{_per_host(r.hosts_cpu_s, r.hosts, 18)}"
            f"{r.peak_rss_mb:8.0f}"
            f"{ratio(r.peak_rss_mb, ref.peak_rss_mb if ref else None)}  "
            f"{'yes' if r.in_sync else 'NO: ' + r.note}")
    lines += ["", "Growth with fleet size (seconds per added host between the smallest and largest size):"]
    for fleet in sorted({r.fleet for r in results}):
        for tool in dict.fromkeys(r.tool for r in results):
            runs = sorted((r for r in results if r.fleet == fleet and r.tool == tool), key=lambda r: r.hosts)
            ops = runs[0].operations if runs else 0
            runs = [r for r in runs if r.operations == ops]
            if len(runs) >= 2 and runs[-1].hosts > runs[0].hosts:
                slope = (runs[-1].wall_s - runs[0].wall_s) / (runs[-1].hosts - runs[0].hosts)
                series = ", ".join(f"{r.hosts}: {r.wall_s:.2f} s" for r in runs)
                lines.append(f"  {fleet:<6}{tool:<22}{slope * 1000:8.1f} ms/host   ({series})")
    lines += ["", "Growth with operations per host (same hosts, remote commands per host):"]
    for tool in dict.fromkeys(r.tool for r in results):
        runs = [r for r in results if r.tool == tool and r.fleet == "rig"]
        largest = max((r.hosts for r in runs), default=0)
        runs = sorted((r for r in runs if r.hosts == largest), key=lambda r: r.operations)
        if len({r.operations for r in runs}) >= 2:
            series = ", ".join(f"{r.operations} ops: {r.commands_per_host:.1f} cmds, {r.wall_s:.2f} s" for r in runs)
            lines.append(f"  {tool:<22}{series}")
    return "\n".join(lines)


def pipeline_lines(p: dict[str, Any]) -> str:
    """What the real pipeline costs on the rig hosts (``gpu-provision drift`` and the deploy's ``--dry``)."""
    if "error" in p:
        return f"gpu-provision drift with the real pipeline failed: {p['error']}"
    dry = p["deploy_dry"]
    return (f"Real pipeline ({', '.join(p['stages'])}) on the {p['hosts']} rig hosts described as 8-GPU H200 nodes "
            f"(not converged, so both find drift):\n"
            f"  gpu-provision drift               {p['wall_s']:6.2f} s  {p['commands_per_host']:5.1f} cmds/host  "
            f"{p['differences_per_host']:.0f} differences/host  exit {p['exit_status']}\n"
            f"  pyinfra deploys/gpu_node.py --dry {dry['wall_s']:6.2f} s  {dry['commands_per_host']:5.1f} cmds/host  "
            f"{dry['changes']} operation changes  exit {dry['exit_status']}")


def _stop(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def compile_sources() -> None:
    """Byte-compile this checkout's packages once, as installing the wheel does: a run from a checkout with
    ``PYTHONDONTWRITEBYTECODE`` set (as this machine's environment has it) would otherwise compile every
    gpu-provision module again in every measured run, a cost no installed copy pays and stock pyinfra's installed
    modules never pay."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    for package in ("gpu_provision", "bench"):
        compileall.compile_dir(str(root / package), quiet=1, workers=0)


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; 0 when every tool found every node in sync, 1 otherwise."""
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("the benchmark needs root (rig nodes and the loopback fleet run in namespaces)")
        return 2
    # Ended by a signal, the benchmark still unwinds, so the fleet and rig nodes are stopped on the way out.
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    raise_open_files()
    if args.fleet_sizes:
        problems = check_limits(max(args.fleet_sizes), parallel=40 * (os.cpu_count() or 1))
        if problems:
            print("this machine cannot hold the fleet: " + "; ".join(problems))
            return 2
    from bench.rignodes import base_root

    compile_sources()
    bench = Bench(args)
    base = base_root()
    workload = Workload(base_versions(base), files=args.files)
    growth = workload.with_files(args.growth_files) if args.growth_files > args.files else None
    most_files = max(args.files, args.growth_files)
    if "ansible" in args.tools:
        tools.ensure_ansible()
    started = time.monotonic()
    if args.rig_sizes:
        print("rig nodes (systemd-nspawn, real sshd behind loopback forwarders):", flush=True)
        bench.rig(workload, growth, converge_script(workload, most_files))
    if args.fleet_sizes:
        print("loopback fleet (one sshd per host on 127.0.20.N and up, shared root, no systemd: no service checks):",
              flush=True)
        fleet_workload = workload.without_units()
        bench.fleet(base, fleet_workload, converge_script(fleet_workload, most_files))
    text = table(bench.results)
    if bench.first_contact:
        first = bench.first_contact
        text += (f"\n\nBefore measuring, one gpu-provision drift run over all {first['hosts']} fleet hosts, where hosts "
                 f"it had not met got the full probe command and kept its modules: {first['wall_s']:.2f} s, "
                 f"check CPU {1000 * (first['check_cpu_s'] or 0) / first['hosts']:.1f} ms/host, sshd CPU "
                 f"{1000 * first['hosts_cpu_s'] / first['hosts']:.1f} ms/host, "
                 f"{'in sync' if first['in_sync'] else 'NOT in sync'}")
    if bench.verify_first_contact:
        first = bench.verify_first_contact
        text += (f"\n\nBefore measuring verify, one run over all {first['hosts']} fleet hosts, where hosts without this "
                 f"version of the agent got it: {first['wall_s']:.2f} s, {first['commands_per_host']:.1f} "
                 f"commands/host, check CPU {1000 * (first['check_cpu_s'] or 0) / first['hosts']:.1f} ms/host, sshd "
                 f"CPU {1000 * first['hosts_cpu_s'] / first['hosts']:.1f} ms/host, "
                 f"{'every host passed' if first['in_sync'] else 'NOT all passed: ' + first['note']}")
    if bench.profile:
        prof = bench.profile
        text += (f"\n\nWhere the controller's time goes (cProfile of one gpu-provision drift run over {prof['hosts']} "
                 f"fleet hosts, {prof['wall_s']:.2f} s wall, {prof['controller_cpu_s']:.2f} s CPU under the "
                 f"profiler):\n" + "\n".join(hotspots.lines(prof["groups"])))
    if bench.verify_profile:
        prof = bench.verify_profile
        text += (f"\n\nWhere the controller's time goes in verify (cProfile of one run over {prof['hosts']} fleet "
                 f"hosts, {prof['wall_s']:.2f} s wall, {prof['controller_cpu_s']:.2f} s CPU under the profiler):\n"
                 + "\n".join(hotspots.lines(prof["groups"])))
    if bench.pipeline:
        text += "\n\n" + pipeline_lines(bench.pipeline)
    if bench.unreachable:
        u = bench.unreachable
        reasons = "; ".join(f"{name}: {' '.join(problems)}" for name, problems in u["not_checked"].items())
        text += (f"\n\n{u['hosts']} fleet hosts plus a stalled and a refusing host, connect timeout 3 s: "
                 f"{u['wall_s']:.2f} s, {u['summary']['in-sync']} in sync, {u['summary']['not-checked']} not "
                 f"checked ({reasons}), exit {u['exit_status']}")
    print()
    print(text)
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    meta: dict[str, Any] = {"argv": argv, "cpus": os.cpu_count(), "seconds": round(time.monotonic() - started, 1),
                            "workdir": str(bench.work)}
    meta["load_average"] = os.getloadavg()
    (RESULTS / f"{stamp}.json").write_text(json.dumps({"meta": meta, "pipeline": bench.pipeline,
                                                      "profile": bench.profile,
                                                      "verify_profile": bench.verify_profile,
                                                      "first_contact": bench.first_contact,
                                                      "verify_first_contact": bench.verify_first_contact,
                                                      "unreachable": bench.unreachable,
                                                      "results": [r.to_json() for r in bench.results]}, indent=1))
    (RESULTS / f"{stamp}.txt").write_text(text + "\n")
    print(f"\nresults: {RESULTS / (stamp + '.json')}; tool outputs under {bench.work}")
    return 0 if all(r.in_sync for r in bench.results) else 1
