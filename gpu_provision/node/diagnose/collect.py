"""Collect the support archive's items on the node: the files, commands, journals, kernel log, device files and
image metadata :mod:`.sources` names, each bounded (:mod:`.bounded`) and with its secrets hidden (:mod:`..redact`)
before it is put in the archive."""

import glob
import grp
import gzip
import io
import json
import os
import pwd
import re
import shutil
import socket
import stat
import tarfile
import tempfile
import time

from .. import probe
from ..operand import operand
from ..redact import redact_text
from . import bounded, sources

#: Seconds the verification agent's state checks may take (nvidia-smi queries; a wedged GPU stops them here).
VERIFY_SECONDS = 120
#: Seconds and bytes ``nvidia-bug-report.sh`` may take (it reads much of the system and can hang on a bad GPU).
BUG_REPORT_SECONDS = 180
BUG_REPORT_BYTES = 8 << 20
JOURNAL_LINES = 300
KERNEL_LINES = 2000


def _text(data):
    return data.decode("utf-8", "replace")


def _json(value):
    return json.dumps(value, indent=1, sort_keys=True).encode()


def file_items(paths=sources.FILES, folders=sources.FOLDERS):
    """``(name, data, entry)`` for every file named and every file in the folders named (absent ones left out)."""
    found = [p for p in paths if os.path.lexists(p)]
    for folder in folders:
        found += sorted(p for p in glob.glob(os.path.join(folder, "*")) if os.path.isfile(p))
    for path in found:
        data, entry = bounded.read(path)
        yield "files" + path, data, entry


def command_items(commands=sources.COMMANDS):
    """``(name, data, entry)`` for every command of the table whose program exists on the node."""
    for name, argv, seconds in commands:
        if shutil.which(argv[0]):
            data, entry = bounded.run(argv, seconds)
            yield name, data, entry


def packages_item():
    """The installed packages the archive cares about (driver, CUDA, runtime, Kubernetes, kernels)."""
    if shutil.which("dpkg-query"):
        return ("versions/packages.txt",) + bounded.run(
            ["dpkg-query", "-W", "-f", "${Package}\t${Version}\t${db:Status-Abbrev}\n", *sources.PACKAGES], 60)
    if shutil.which("rpm"):
        data, entry = bounded.run(["rpm", "-qa", "--qf", "%{NAME}\t%{VERSION}-%{RELEASE}\n"], 60)
        prefixes = tuple(p.rstrip("*") for p in sources.PACKAGES)
        lines = [line for line in _text(data).splitlines() if line.startswith(prefixes)]
        return "versions/packages.txt", "\n".join(sorted(lines)).encode(), entry
    return "versions/packages.txt", b"", {"source": "packages", "error": "neither dpkg-query nor rpm found"}


def libraries_item(roots=("/usr/lib", "/usr/lib64", "/lib", "/lib64", "/usr/local/lib")):
    """The userspace NVML libraries installed (``libnvidia-ml.so.<version>``): their version is the library side
    of a driver/library version mismatch."""
    found = set()
    for root in roots:
        found.update(glob.glob(os.path.join(root, "libnvidia-ml.so.*")))
        found.update(glob.glob(os.path.join(root, "*", "libnvidia-ml.so.*")))
    return "versions/libnvidia-ml.txt", "\n".join(sorted(found)).encode(), {"source": "libnvidia-ml.so.* in " +
                                                                               ", ".join(roots)}


def kernel_item():
    """This boot's kernel log lines about NVIDIA GPUs (journal, else ``dmesg``), the last :data:`KERNEL_LINES`."""
    if shutil.which("journalctl"):
        data, entry = bounded.run(["journalctl", "-k", "-b", "--no-pager", "-o", "short-iso"], 60, limit=64 << 20)
    else:
        data, entry = bounded.run(["dmesg", "-T"], 60, limit=64 << 20)
    pattern = re.compile(sources.KERNEL_PATTERN, re.IGNORECASE)
    lines = [line for line in _text(data).splitlines() if pattern.search(line)]
    entry["lines"] = len(lines)
    return "kernel/nvidia.log", "\n".join(lines[-KERNEL_LINES:]).encode(), entry


def journal_items(units=sources.UNITS):
    """The last :data:`JOURNAL_LINES` lines of each unit's journal in this boot (none without ``journalctl``)."""
    if not shutil.which("journalctl"):
        return
    for unit in units:
        data, entry = bounded.run(["journalctl", "-u", unit, "-b", "--no-pager", "-n", str(JOURNAL_LINES),
                                   "-o", "short-iso"], 30)
        yield "journals/%s.log" % unit, data, entry


def _group(gid):
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def devices_item(pattern="/dev/nvidia*"):
    """Mode, owner and group of every NVIDIA device file: who may open them decides NVML's permissions."""
    out = {}
    for path in sorted(glob.glob(pattern) + glob.glob(pattern.rstrip("*") + "-caps/*")):
        try:
            st = os.stat(path)
        except OSError:
            continue
        out[path] = {"mode": "%04o" % stat.S_IMODE(st.st_mode), "uid": st.st_uid, "gid": st.st_gid,
                     "group": _group(st.st_gid)}
    return "system/devices.json", _json(out), {"source": pattern}


def pci_item(root=sources.PCI_DEVICES):
    """Every NVIDIA PCI function (vendor 0x10de) with its class and the kernel driver bound to it (None when none):
    a GPU bound to ``nouveau`` (or ``vfio-pci``) is one the NVIDIA driver cannot use, whatever ``/proc/modules``
    says, and a kernel built without module support has no ``/proc/modules`` at all."""
    out = {}
    for path in sorted(glob.glob(os.path.join(root, "*"))):
        values = {}
        for name in ("vendor", "device", "class"):
            try:
                with open(os.path.join(path, name), encoding="utf-8") as handle:
                    values[name] = handle.read().strip()
            except OSError:
                values[name] = None
        if values["vendor"] != sources.NVIDIA_VENDOR:
            continue
        try:
            values["driver"] = os.path.basename(os.readlink(os.path.join(path, "driver")))
        except OSError:
            values["driver"] = None
        out[os.path.basename(path)] = values
    return "system/pci.json", _json(out), {"source": root}


def users_item(users):
    """The groups of each user the cluster file lets use GPUs (None for a user the node lacks)."""
    out = {}
    for user in users:
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            out[user] = None
            continue
        groups = {_group(entry.pw_gid)} | {g.gr_name for g in grp.getgrall() if user in g.gr_mem}
        out[user] = sorted(groups)
    return "system/users.json", _json(out), {"source": "passwd, group"}


def listing_items(folders=sources.LISTINGS):
    """Names in each folder of :data:`sources.LISTINGS` (a device plugin's socket shows it registered)."""
    for folder in folders:
        try:
            names = sorted(os.listdir(folder))
        except OSError as exc:
            yield "listings" + folder + ".txt", b"", {"source": folder, "error": "%s: %s" % (type(exc).__name__,
                                                                                           exc.strerror)}
            continue
        yield "listings" + folder + ".txt", "\n".join(names).encode(), {"source": folder}


def image_env(image):
    """The environment an image declares (``CUDA_VERSION=12.4.1`` in NVIDIA's CUDA images) read through the node's
    runtime, and which runtime answered; no environment when no runtime knows the image."""
    try:
        image = operand(image)
    except ValueError as exc:
        return {"runtime": None, "env": [], "error": str(exc)}
    if shutil.which("docker"):
        data, entry = bounded.run(["docker", "image", "inspect", "--format", "{{json .Config.Env}}", image], 30)
        if entry.get("rc") == 0:
            return {"runtime": "docker", "env": json.loads(_text(data) or "null") or []}
    if shutil.which("crictl"):
        data, entry = bounded.run(["crictl", "inspecti", "-o", "json", image], 30)
        if entry.get("rc") == 0:
            spec = json.loads(_text(data)).get("info", {}).get("imageSpec", {})
            return {"runtime": "crictl", "env": spec.get("config", {}).get("Env") or []}
    return {"runtime": None, "env": []}


def images_item(images):
    """Each configured container image's declared environment (the CUDA version the doctor compares)."""
    out = {}
    for image in images:
        try:
            out[image] = image_env(image)
        except ValueError as exc:
            out[image] = {"runtime": None, "env": [], "error": str(exc)}
    return "runtime/images.json", _json(out), {"source": "image metadata"}


def probe_item():
    """The probe's own reading of the node (every section but Kubernetes, whose API may be far away)."""
    request = {"gpu": {}, "system": {}, "runtime": {}, "mig": {}, "services": {"units": list(sources.UNITS)},
               "accounts": {"groups": ["video", "render"]}}
    started = time.monotonic()
    answer = probe.collect(request)
    return "probe.json", _json(answer), {"source": "probe", "seconds": round(time.monotonic() - started, 2)}


def verify_item(expect, seconds=VERIFY_SECONDS):
    """The verification agent's report (``verify/report.json``) on the cluster file's expectations: the node's
    device files, driver, persistence and MIG layout against what the file declares, judged by the agent's own
    check table (its state checks only: no CUDA, container or pod work). It runs as a bounded child, like every
    command here, so an agent stuck on a bad GPU costs the archive this item and nothing else."""
    from ..verify.main import self_command

    workdir = tempfile.mkdtemp(prefix="gpu-provision-diagnose-verify-")
    try:
        expect_path, report_path = os.path.join(workdir, "expect.json"), os.path.join(workdir, "report.json")
        with open(expect_path, "w", encoding="utf-8") as handle:
            json.dump(expect, handle)
        argv, env = self_command()
        _, entry = bounded.run(argv + ["--expect", expect_path, "--output", report_path, "--state", "--compact"],
                               seconds, env=env)
        data, read = bounded.read(report_path)
        if "error" in read:
            entry["error"] = entry.get("error") or "the agent wrote no report"
        return "verify/report.json", data, entry
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def bug_report_item(seconds=BUG_REPORT_SECONDS, limit=BUG_REPORT_BYTES):
    """``nvidia-bug-report.sh`` output as text, bounded in time and size; None where the tool is not installed."""
    tool = shutil.which("nvidia-bug-report.sh")
    if not tool:
        return None
    workdir = tempfile.mkdtemp(prefix="gpu-provision-bug-report-")
    try:
        base = os.path.join(workdir, "nvidia-bug-report.log")
        _, entry = bounded.run([tool, "--output-file", base], seconds)
        data = b""
        # The tool adds .gz to the name it is given; read a plain file too, should a version not compress.
        for path, opener in ((base + ".gz", gzip.open), (base, open)):
            if os.path.exists(path):
                with opener(path, "rb") as handle:
                    data = handle.read(limit + 1)
                break
        if len(data) > limit:
            data, entry["truncated"] = data[:limit], True
        return "nvidia-bug-report.log", data, entry
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def items(request):
    """Every item of the archive for ``request`` (``users``, ``images``, ``verify``, ``bug_report``), in archive
    order."""
    yield probe_item()
    yield libraries_item()
    yield packages_item()
    yield kernel_item()
    yield devices_item()
    yield pci_item()
    yield users_item(request.get("users") or [])
    yield images_item(request.get("images") or [])
    yield from command_items()
    yield from file_items()
    yield from listing_items()
    yield from journal_items()
    if request.get("verify"):
        yield verify_item(request["verify"])
    if request.get("bug_report", True):
        found = bug_report_item(seconds=request.get("bug_report_seconds") or BUG_REPORT_SECONDS)
        if found:
            yield found


def _add(archive, name, data):
    info = tarfile.TarInfo(name)
    info.size, info.mtime, info.mode = len(data), int(time.time()), 0o644
    archive.addfile(info, io.BytesIO(data))


def write_archive(path, request, found=None, budget=None):
    """Write the ``tar.gz`` archive to ``path``: every item, secrets hidden, within the size bound, and
    ``manifest.json`` saying where each came from, how long it took and what was cut or left out."""
    budget = budget or bounded.Budget()
    started = time.monotonic()
    with tarfile.open(path, "w:gz") as archive:
        for name, data, entry in (items(request) if found is None else found):
            kept = budget.take(name, redact_text(_text(data)).encode(), entry)
            if kept is not None:
                _add(archive, name, kept)
        manifest = {"version": 1, "node": socket.gethostname(), "collected_at": time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "seconds": round(time.monotonic() - started, 2),
            "request": request, "items": budget.items}
        _add(archive, "manifest.json", _json(manifest))
    return manifest
