"""One MIG applier per node: two appliers started at once on the simulated H200s never collide, a second one waits
for the first, and one that waits too long fails naming the holder."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from migsim import MigNode
from test_mig_applier import BALANCED, A, B, doc

from gpu_provision.node.mig import lock

TWO_3G = ["3g.71gb@0:4", "3g.71gb@4:4"]
WHOLE = doc({"7g.141gb": 1}, {"7g.141gb": 1})


def start(node: MigNode, layout: dict, name: str, *extra: str) -> subprocess.Popen[str]:
    """An applier on its own layout file ``name``, started and left running."""
    path = node.root / name
    path.write_text(json.dumps(layout))
    return subprocess.Popen([*node.applier, "apply", "--layout", str(path), *extra], env=node.env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_two_appliers_at_once_never_collide(mig_node: MigNode) -> None:
    """Ten times, two appliers start at the same moment, each wanting a layout the GPUs do not have (so both have
    instances to destroy and create): both succeed, one after the other, and the GPUs end with one whole layout
    (never a mix, never a GPU without its instances). Without the lock the first trial already fails."""
    layouts = {"A": (A, BALANCED), "B": (B, TWO_3G), "W": (WHOLE, ["7g.141gb@0:8"])}
    have = "W"
    assert mig_node.apply(WHOLE).returncode == 0
    waited = 0
    for trial in range(10):
        wanted = [name for name in layouts if name != have]
        procs = [start(mig_node, layouts[name][0], f"{name}.json") for name in wanted]
        outputs = [proc.communicate(timeout=300)[0] for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], (trial, outputs)
        assert not any("Insufficient Resources" in out for out in outputs), (trial, outputs)
        assert mig_node.lgi(1) == ["7g.141gb@0:8"], (trial, outputs)
        # The one that waited ran last, so the GPUs have its layout, whole.
        [have] = [name for name, out in zip(wanted, outputs) if "waiting up to" in out] or [
            name for name in wanted if mig_node.lgi(0) == layouts[name][1]]
        assert mig_node.lgi(0) == layouts[have][1], (trial, outputs)
        waited += any("waiting up to" in out for out in outputs)
    assert waited > 0, "no trial had the two appliers overlap"


def hold(path: Path) -> subprocess.Popen[str]:
    """Another process holding the applier lock (through the lock module, as an applier does) until its stdin
    closes; it prints ``held`` once it has it."""
    code = ("import sys; from gpu_provision.node.mig import lock\n"
            f"with lock.held({str(path)!r}, 0, print):\n"
            "    print('held', flush=True); sys.stdin.read()\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "holder-marker"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "held\n"
    return proc


def test_a_second_applier_fails_naming_the_holder(mig_node: MigNode) -> None:
    holder = hold(Path(mig_node.env["GPU_PROVISION_MIG_LOCK"]))
    try:
        out = mig_node.apply(A, "--lock-timeout", "0.5")
        assert out.returncode == 1
        assert re.search(rf"failed: another MIG applier holds \S+mig-apply\.lock: pid {holder.pid} \(\S+python\S* -c "
                         r".*holder-marker\), holding it since \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ; waited 0\.5s",
                         out.stdout), out.stdout
        assert mig_node.mode(0) == "Disabled, Disabled" and mig_node.service_log() == []
        # 'plan' changes nothing, so it does not wait for the lock.
        assert mig_node.apply(A, "--lock-timeout", "0.5", command="plan").returncode == 0
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    done = mig_node.apply(A, "--lock-timeout", "0.5")
    assert done.returncode == 0 and mig_node.lgi(0) == BALANCED, done.stdout


def test_a_waiting_applier_goes_on_once_the_holder_ends(mig_node: MigNode) -> None:
    holder = hold(Path(mig_node.env["GPU_PROVISION_MIG_LOCK"]))
    waiting = start(mig_node, A, "a.json")
    assert waiting.stdout is not None
    line = waiting.stdout.readline()
    assert f"waiting up to 300s for {mig_node.env['GPU_PROVISION_MIG_LOCK']}, held by pid {holder.pid}" in line
    assert holder.stdin is not None
    holder.stdin.close()
    holder.wait(timeout=60)
    rest = waiting.communicate(timeout=300)[0]
    assert waiting.returncode == 0, rest
    assert mig_node.lgi(0) == BALANCED


def test_the_lock_outlives_no_holder(tmp_path: Path) -> None:
    """A holder killed outright leaves the file but not the lock: the next applier takes it at once."""
    path = tmp_path / "run" / "mig-apply.lock"
    holder = hold(path)
    holder.kill()
    holder.wait(timeout=60)
    assert path.exists()
    with lock.held(str(path), 0, print):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert path.read_text() == ""
