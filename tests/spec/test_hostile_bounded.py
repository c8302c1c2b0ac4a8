"""Hostile cluster files are bounded in memory and time: ``gpu-provision validate`` runs in a child process under
RLIMIT_AS 1 GiB and RLIMIT_CPU 60 s, and each file (aliases that expand a billion times, a 100 MB line, a 1.9 MB
line, nesting 300,000 levels deep, flow or block, a hostile mig-parted file the cluster file names) ends in exit
status 2 with its located message and no traceback, well inside both limits."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEMORY = 1024 ** 3
CPU_SECONDS = 60
HEAD = ("version: v1\ncluster:\n  name: t\n  kubernetes: {enabled: false}\n"
        "nodes:\n  - name: n1\n    address: 10.0.0.1\n")


def _laughs(levels: int = 10) -> str:
    """The billion laughs: each anchor a list of nine aliases of the one before, 9**10 values in all."""
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{n}: &l{n} [" + ", ".join([f"*l{n - 1}"] * 9) + "]" for n in range(1, levels)]
    return "\n".join(lines) + "\n"


def _long_line(path: Path, size: int) -> None:
    with path.open("w") as out:
        out.write(HEAD + "    labels: {a: ")
        chunk = "b" * (1024 * 1024)
        for _ in range(size // len(chunk)):
            out.write(chunk)
        out.write(chunk[:size % len(chunk)] + "}\n")


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _mig_parted_laughs(path: Path) -> None:
    (path.parent / "mig.yaml").write_text(_laughs() + "version: v1\nmig-configs: {all: *l9}\n")
    path.write_text(HEAD.replace("  name: t\n", "  name: t\n  mig_parted_file: mig.yaml\n"))


CASES: dict[str, tuple[Callable[[Path], None], str]] = {
    "billion-laughs": (_text(_laughs() + HEAD + "    labels: {x: *l9}\n"),
                       r":\d+:\d+: \$\S*: document expands to more than \d+ values"),
    "billion-laughs-in-the-mig-parted-file": (_mig_parted_laughs,
                                              r":\d+:\d+: \$\S*: document expands to more than \d+ values"),
    "100-mb-line": (lambda path: _long_line(path, 100 * 1024 * 1024), r":1:1: \$: cluster file is larger than"),
    "1.9-mb-line": (lambda path: _long_line(path, 1900 * 1024),
                    r":8:17: \$\.nodes\[0\]\.labels\.a: 'b+\.\.\.' is not in the expected form"),
    "deep-flow-nesting": (_text(HEAD + "    labels: " + "[" * 300_000 + "]" * 300_000 + "\n"),
                          r":\d+:\d+: \$\S*: nesting is deeper than \d+ levels"),
    "deep-flow-mappings": (_text(HEAD + "    labels: " + "{a: " * 200_000 + "}" * 200_000 + "\n"),
                           r":\d+:\d+: \$\S*: nesting is deeper than \d+ levels"),
    "deep-block-nesting": (_text(HEAD + "    labels:\n" + "".join(" " * (6 + n) + f"k{n}:\n" for n in range(1400))),
                           r":\d+:\d+: \$\S*: nesting is deeper than \d+ levels"),
}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))


def _run_measured(argv: list[str], env: dict[str, str],
                  folder: Path) -> tuple[subprocess.CompletedProcess[str], resource.struct_rusage]:
    """Run ``argv`` under the limits and return its result with its own resource usage (``wait4``): the process's
    children's usage (``RUSAGE_CHILDREN``) would count every child this test process ever waited for, such as a VM
    of the VM tier, not this one alone."""
    out, err = folder / "stdout", folder / "stderr"
    with open(out, "w") as stdout, open(err, "w") as stderr:
        proc = subprocess.Popen(argv, stdout=stdout, stderr=stderr, env=env, preexec_fn=_limit)
    killer = threading.Timer(CPU_SECONDS * 2, proc.kill)  # a child blocked without using CPU
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return subprocess.CompletedProcess(argv, proc.returncode, out.read_text(), err.read_text()), usage


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_hostile_file_ends_in_a_located_error_under_memory_and_cpu_limits(tmp_path: Path, case: str) -> None:
    write, expected = CASES[case]
    path = tmp_path / "cluster.yaml"
    write(path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done, usage = _run_measured([sys.executable, "-m", "gpu_provision.cli", "validate", str(path)], env, tmp_path)
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])  # not killed by a limit (negative status)
    assert "Traceback" not in done.stdout + done.stderr
    assert "MemoryError" not in done.stderr and "RecursionError" not in done.stderr
    lines = done.stderr.splitlines()
    assert lines and all(re.match(r".+:\d+:\d+: \$", line) for line in lines), done.stderr[-2000:]
    assert any(re.match(re.escape(str(path.parent)) + r"/\S+" + expected, line) for line in lines), lines
    cpu = usage.ru_utime + usage.ru_stime
    assert cpu < CPU_SECONDS, f"{case} took {cpu:.1f} s of CPU"
    assert usage.ru_maxrss * 1024 < MEMORY / 2, f"the validation reached {usage.ru_maxrss} KiB"
