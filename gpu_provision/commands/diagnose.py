"""``diagnose``: a support archive per node (``tar.gz``) and the doctor's findings over the fleet.

    gpu-provision diagnose [INVENTORY] [--cluster FILE] [--limit NODE]... [--out DIR] [--json] [--no-bug-report]

On each node the bundle's ``diagnose`` entry runs from a temporary folder (the installed bundle and every GPU
setting stay as they are) and writes the archive, secrets hidden; in the same command the verification agent's
state checks judge the node against the file's expectations (``verify/report.json``). The controller fetches the
archive and adds what only it knows: the cluster file's expectations, the node's drift against the file and the
last full verification report (``reports/verify/<node>.json``). The doctor then reads each archive: its known-fault
rules, and every failed check and drift difference as a finding of the declared state.

Exit status: 0 no finding, 1 findings, 2 a node not reached or not collected (or a bad cluster file).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import shlex
import tarfile
import time
from typing import Any

from gpu_provision.commands.args import add_command, add_fleet_options, emit, progress, use_cluster
from gpu_provision.startup import fleet_process

#: Seconds the collection may take on a node (``nvidia-bug-report.sh`` alone may take three minutes).
DEFAULT_TIMEOUT = 600.0
#: Where ``gpu-provision verify`` (and the verify stage's deploys) keep each node's last report.
VERIFY_REPORTS = "reports/verify"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``diagnose`` command."""
    p = add_command(
        sub, "diagnose", "collect a support bundle per node, name known faults and differences from the cluster file "
        "(exit 0 none, 1 found, 2 error)",
        "Collect a support bundle from every node (versions, nvidia-smi -q -x, the probe's state, drift against the "
        "cluster file, the verification agent's state checks against it, NVIDIA kernel log lines, unit journals, "
        "managed configs, nvidia-bug-report.sh output; secrets hidden on the node) into one tar.gz per node, then "
        "run the doctor's rules on each, name every way the node differs from what the file declares, and print "
        "the findings with their fixes. Nothing on the nodes is changed.",
        ["gpu-provision diagnose --cluster site/cluster.yaml",
         "gpu-provision diagnose --cluster site/cluster.yaml --limit gpu-01 --out /tmp/support --json"],
        findings="a known fault, or a difference from the cluster file, found on a node",
        errors="a node not reached or its bundle not collected, or a bad cluster file")
    add_fleet_options(p, f"seconds the collection may run on a node (default: {DEFAULT_TIMEOUT:.0f})")
    p.add_argument("--out", metavar="DIR", help="folder for the bundles (default: ./diagnose-<UTC timestamp>/)")
    p.add_argument("--no-bug-report", action="store_true", help="do not run nvidia-bug-report.sh on the nodes")
    p.set_defaults(handler=run)


def expectations_of(host: Any) -> Any:
    """What the cluster file expects of the host's node, for the doctor (nothing for a host outside the file)."""
    from gpu_provision.doctor import DoctorExpectations
    from gpu_provision.inventory import cluster_for, node_for

    try:
        cluster, node = cluster_for(host), node_for(host)  # the file first: its absence says more
    except Exception as exc:  # a host outside the cluster file (@local without GPU_PROVISION_NODE) is still collected
        return DoctorExpectations(left_out=left_out_reason(exc))
    image = node.verify.container_image
    return DoctorExpectations(users=node.permissions.users, images={image: node.driver.cuda_min} if image else {},
                        runtime=node.container_runtime.kind, kubernetes=cluster.kubernetes.enabled)


def left_out_reason(exc: Exception) -> str:
    """Why a host's declared state is left out, in one line: no cluster file, the node not in it, the file invalid."""
    from gpu_provision.errors import GpuProvisionError, SpecError, one_line

    if isinstance(exc, SpecError) and exc.problems:
        first = exc.problems[0]
        more = len(exc.problems) - 1
        return one_line(f"the cluster file {first.file} is invalid: {first}" + (f" (and {more} more problem"
                        f"{'s' * (more != 1)}; gpu-provision validate {first.file} lists them)" if more else ""))
    return one_line(str(exc) if isinstance(exc, GpuProvisionError) else f"{type(exc).__name__}: {exc}")


def verify_expectations(host: Any) -> dict[str, Any] | None:
    """The verification agent's expectations for the host's node, as ``gpu-provision verify`` sends them; None for
    a host the file gives no GPUs or does not name (its archive is still collected, without a verification)."""
    from gpu_provision.verify.expect import expectations_for_host

    try:
        text = expectations_for_host(host)
    except Exception:  # a host outside the cluster file (@local without GPU_PROVISION_NODE)
        return None
    return json.loads(text) if text else None


def node_request(expect: Any, bug_report: bool, verify: dict[str, Any] | None = None) -> dict[str, Any]:
    """The node entry's ``--request``: the users and images to read, whether to run nvidia-bug-report.sh, and the
    verification expectations to judge the node against (left out when there are none)."""
    request = {"users": list(expect.users), "images": sorted(expect.images), "bug_report": bug_report}
    return {**request, "verify": verify} if verify else request


def collect_host(reached: Any, out: str, bug_report: bool, timeout: float | None) -> str:
    """Run the node entry on one reached host, fetch its archive and complete it; returns the archive's path
    (``OUT/<node>.tar.gz``, see :func:`archive_name`). A collection that fails leaves no partial archive behind."""
    partial = os.path.join(out, f".{safe_name(reached.host.name)}.partial.tar.gz")
    try:
        return _collect(reached, partial, bug_report, timeout)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def _collect(reached: Any, local: str, bug_report: bool, timeout: float | None) -> str:
    """:func:`collect_host`'s work, the archive fetched to ``local`` and then given the node's name."""
    from pyinfra.context import ctx_host, ctx_state

    from gpu_provision import bundle
    from gpu_provision.errors import GpuProvisionError
    from gpu_provision.operations.commands import connector_arguments
    from gpu_provision.operations.remote import run_on_host

    host, expect = reached.host, expectations_of(reached.host)
    # The host's own sudo, sudo password, sudo user and timeout, as its deploy's commands get them.
    sudo = {key: value for key, value in connector_arguments(reached.state, host, None).items()
            if key not in ("_stdin", "_timeout")}
    with ctx_state.use(reached.state), ctx_host.use(host):
        made = run_on_host(host, "mktemp -d /tmp/gpu-provision-diagnose.XXXXXX", sudo)
        if not made.ok or not made.stdout_lines:
            raise GpuProvisionError(f"cannot make a temporary folder: {made.failure}")
        remote = made.stdout_lines[-1].strip()
        try:
            if not host.put_file(io.BytesIO(bundle.build()), f"{remote}/{bundle.BUNDLE_NAME}", **sudo):
                raise GpuProvisionError("cannot upload the node bundle")
            command = bundle.command("diagnose", "--out", f"{remote}/bundle.tar.gz", "--request",
                                     json.dumps(node_request(expect, bug_report, verify_expectations(host))),
                                     bundle=f"{remote}/{bundle.BUNDLE_NAME}")
            collected = run_on_host(host, command, sudo, timeout=timeout)
            if not collected.ok:
                raise GpuProvisionError(f"collection failed: {collected.failure}")
            if not host.get_file(f"{remote}/bundle.tar.gz", local, **sudo):
                raise GpuProvisionError(f"collection failed: cannot fetch {remote}/bundle.tar.gz: "
                                        f"{reached.log.last_failure or 'the transfer failed'}")
        finally:
            run_on_host(host, f"rm -rf {shlex.quote(remote)}", sudo)
        extras = {"expectations.json": expect.to_json(), "controller/drift.json": drift_of(reached)}
    report = os.path.join(VERIFY_REPORTS, f"{host.name}.json")
    if os.path.exists(report):
        with open(report, encoding="utf-8") as handle:
            extras["controller/verify-report.json"] = json.load(handle)
    add_to_archive(local, extras)
    named = os.path.join(os.path.dirname(local), f"{archive_name(host.name, local)}.tar.gz")
    os.replace(local, named)
    return named


def safe_name(name: str) -> str:
    """``name`` as a file name: characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "node"


def archive_name(host_name: str, archive: str) -> str:
    """The archive's file name (without ``.tar.gz``): the node's name.

    An inventory host is named after its node. A connector host (``@local``, ``@docker/...``) is not: its archive
    takes the node's name from ``GPU_PROVISION_NODE`` when set, else the host name the node reported in the
    archive's manifest, so an archive collected on a node itself reads ``gpu-01.tar.gz`` rather than ``@local.tar.gz``.
    """
    from gpu_provision.inventory import NODE_ENV

    if not host_name.startswith("@"):
        return safe_name(host_name)
    name = os.environ.get(NODE_ENV, "")
    if not name:
        with tarfile.open(archive, "r:gz") as tar:
            try:
                member = tar.extractfile("manifest.json")
            except KeyError:
                member = None
            name = str(json.load(member).get("node") or "") if member else ""
    return safe_name(name or host_name)


def drift_of(reached: Any) -> dict[str, Any]:
    """The node's drift against the cluster file, as ``gpu-provision drift --json`` gives one node."""
    from gpu_provision.drift import load_stages
    from gpu_provision.drift.collect import check_host, cluster_resolver

    try:
        return check_host(reached, load_stages(), cluster_resolver).to_json()
    except Exception as exc:  # the archive is worth keeping without its drift part; the file says why it lacks it
        return {"error": f"{type(exc).__name__}: {exc}"}


def add_to_archive(path: str, documents: dict[str, Any]) -> None:
    """Rewrite the ``tar.gz`` at ``path`` with ``documents`` (archive name -> JSON value) added."""
    with tarfile.open(path, "r:gz") as archive:
        members = [(m, archive.extractfile(m).read()) for m in archive.getmembers() if m.isfile()]  # type: ignore[union-attr]
    with tarfile.open(path, "w:gz") as archive:
        for member, data in members:
            archive.addfile(member, io.BytesIO(data))
        for name, value in documents.items():
            data = json.dumps(value, indent=1, sort_keys=True).encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
            archive.addfile(info, io.BytesIO(data))


def diagnosis_of(result: Any) -> Any:
    """A host's diagnosis from its fleet result: the doctor's findings on its archive, or why there is none."""
    from gpu_provision.doctor import DECLARED, RULES, NodeDiagnosis, examine, from_archive

    if result.unreached is not None:
        return NodeDiagnosis(node=result.name, error=result.unreached)
    if isinstance(result.value, Exception):
        return NodeDiagnosis(node=result.name, error=str(result.value))
    evidence = from_archive(result.value, node=result.name)
    return NodeDiagnosis(node=result.name, archive=result.value, findings=examine(evidence, RULES + DECLARED),
                         declared_state_left_out=evidence.expect.left_out)


def run(args: argparse.Namespace) -> int:
    """Collect every node's archive, run the doctor on each, print the summary; returns the exit status."""
    with fleet_process():
        from gpu_provision.doctor import FleetDiagnosis
        from gpu_provision.errors import GpuProvisionError
        from gpu_provision.fleet import load_inventory, run_fleet, settings_from

    use_cluster(args)
    settings = settings_from(args.config, args.parallel, args.connect_timeout, args.command_timeout, args.limit,
                             default_command_timeout=DEFAULT_TIMEOUT)
    out = args.out or f"diagnose-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    os.makedirs(out, exist_ok=True)

    def work(reached: Any) -> Any:
        try:
            return collect_host(reached, out, not args.no_bug_report, settings.command_timeout)
        except GpuProvisionError as exc:  # reported as the node's error, the other nodes go on
            return exc

    fleet = run_fleet(load_inventory(args.inventory), work, settings, progress=progress(),
                      failed=lambda value: isinstance(value, Exception))
    summary = FleetDiagnosis(nodes=[diagnosis_of(r) for r in fleet.hosts], out=out)
    with open(os.path.join(out, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(summary.to_json(), handle, indent=1)
    emit(args, summary.to_json(), summary.render)
    return summary.exit_status
