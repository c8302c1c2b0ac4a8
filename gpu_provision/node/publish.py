"""The in-cluster drift pod's side: run the probe on the host, publish its answer in the pod's status.

``gpu-provision drift --in-cluster`` runs the same probe as the SSH check, from a DaemonSet pod on every node; the
pod needs no API credentials to publish its result, because the kubelet publishes it: each container's
*termination message* (the file at ``terminationMessagePath``) is copied into the pod's status, where one list
call of the pods collects every node's. The kubelet keeps at most 4096 bytes per container and 12 KiB per pod,
divided equally among its containers, so the answer travels compressed (zlib, then base85) and split over
:data:`PARTS` init containers: ``probe`` runs the probe and publishes part 0, ``part-1`` .. publish the rest from
a shared ``emptyDir``. With the pod's long-running ``hold`` container that is 4 containers of 3072 bytes:
:func:`budget` bytes in all. An answer that does not fit loses the file texts first (the differences stay
exact, only the content diffs are lost); one that still does not fit is published as an error saying so.

Standard library only, Python 3.9+: it runs on the image's ``python3`` (the verification image). The probe
itself runs on the host's own ``python3`` through ``chroot`` into the host's root mounted read-only, so it
reads the host's packages, files and units exactly as over SSH (``SYSTEMD_IGNORE_CHROOT=1`` lets ``systemctl``
answer from there).

    python3 publish.py probe        # in the init container "probe" (NODE_NAME from the downward API)
    python3 publish.py part N       # in the init container "part-N"
"""

import base64
import datetime
import json
import os
import subprocess
import sys
import zlib

#: Init containers that carry the answer, and every container of the pod (they and ``hold``).
PARTS = 3
CONTAINERS = PARTS + 1
#: The kubelet's limits on termination messages: per container, and per pod (divided equally among containers).
PER_CONTAINER = 4096
PER_POD = 12 * 1024
VERSION = "gpd1"
#: Largest decompressed answer a collector accepts (a bound against a hostile pod status).
MAX_ANSWER = 8 * 1024 * 1024

#: How the probe's loader starts: gpu_provision.bundle.PROBE_PYTHON's words and ``-c`` (a test keeps them equal;
#: this file runs alone in the pod, without the package).
PROBE_ARGV = ["python3", "-I", "-S", "-c"]
CONFIG_DIR = "/opt/gpu-provision/drift"
HOST_ROOT = "/host"
PARTS_DIR = "/work"
TERMINATION_LOG = "/dev/termination-log"
PROBE_TIMEOUT = 300


def budget(containers=CONTAINERS):
    """Bytes of termination message one container may publish in a pod of ``containers`` containers."""
    return min(PER_CONTAINER, PER_POD // containers)


def _header(index, count):
    return "%s %d/%d " % (VERSION, index, count)


def encode(result, parts=PARTS, per_part=None):
    """``result`` (a JSON-able dict) as ``parts`` messages of at most ``per_part`` bytes each, or None when it
    does not fit. Unused parts are empty messages that still carry their header."""
    per_part = per_part or budget()
    text = json.dumps(result, separators=(",", ":"), sort_keys=True).encode()
    payload = base64.b85encode(zlib.compress(text, 9)).decode("ascii")
    room = per_part - len(_header(parts, parts))
    chunks = [payload[i:i + room] for i in range(0, len(payload), room)] or [""]
    if len(chunks) > parts:
        return None
    chunks += [""] * (parts - len(chunks))
    return [_header(i, len(chunks)) + chunk for i, chunk in enumerate(chunks)]


def decode(messages):
    """The result published in ``messages`` (the parts in order); ValueError saying why it cannot be read."""
    count = None
    payload = []
    for index, message in enumerate(messages):
        head, _, rest = (message or "").partition(" ")
        numbers, _, chunk = rest.partition(" ")
        if head != VERSION or "/" not in numbers:
            raise ValueError("part %d is not a published result (%r)" % (index, (message or "")[:40]))
        position, total = numbers.split("/", 1)
        if not (position.isdigit() and total.isdigit()) or int(position) != index:
            raise ValueError("part %d is out of order" % index)
        if count is None:
            count = int(total)
        elif int(total) != count:
            raise ValueError("parts of different results")
        payload.append(chunk)
    if count is None or count != len(messages):
        raise ValueError("%d of %s parts" % (len(messages), count))
    try:
        inflater = zlib.decompressobj()
        text = inflater.decompress(base64.b85decode("".join(payload)), MAX_ANSWER)
        if inflater.unconsumed_tail:
            raise ValueError("the result is larger than %d bytes" % MAX_ANSWER)
        if not inflater.eof:  # the stream's end and checksum never came
            raise ValueError("the compressed stream ends early")
        result = json.loads(text.decode())
    except (ValueError, zlib.error) as exc:
        raise ValueError("the result cannot be read (cut short?): %s" % exc) from None
    if not isinstance(result, dict):
        raise ValueError("the result is not an object")
    return result


def fitted(result, parts=PARTS, per_part=None):
    """The messages for ``result``: as it is, else without file texts (``contents_dropped``), else an error
    result saying how large it was; always fits."""
    messages = encode(result, parts, per_part)
    if messages is not None:
        return messages
    probe = result.get("probe")
    if isinstance(probe, dict) and isinstance(probe.get("files"), dict):
        files = {path: {k: v for k, v in entry.items() if k != "content"} if isinstance(entry, dict) else entry
                 for path, entry in probe["files"].items()}
        slim = dict(result, probe=dict(probe, files=files), contents_dropped=True)
        messages = encode(slim, parts, per_part)
        if messages is not None:
            return messages
    size = len(zlib.compress(json.dumps(result, separators=(",", ":")).encode(), 9))
    error = {k: result[k] for k in ("node", "request", "finished") if k in result}
    error["error"] = ("the probe's answer (%d bytes compressed) does not fit the %d bytes the pod's termination "
                      "messages hold; check this node over SSH" % (size, parts * (per_part or budget())))
    return encode(error, parts, per_part)


def _now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_probe(node, config_dir=CONFIG_DIR, host_root=HOST_ROOT, timeout=PROBE_TIMEOUT):
    """Run the probe for ``node``'s request on the host; the result to publish (``probe`` or ``error``)."""
    result = {"node": node, "finished": None}
    try:
        with open(os.path.join(config_dir, "nodes.json")) as handle:
            digest = json.load(handle).get(node)
        if not digest:
            raise LookupError("the manifests name no request for node %s (render them again)" % node)
        result["request"] = digest
        with open(os.path.join(config_dir, "request-%s.json" % digest)) as handle:
            request = handle.read()
        with open(os.path.join(config_dir, "probe.py")) as handle:
            loader = handle.read()
        argv = PROBE_ARGV + [loader, request]
        if host_root and host_root != "/":
            argv = ["chroot", host_root] + argv
        env = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8",
               "SYSTEMD_IGNORE_CHROOT": "1"}
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=timeout,
                              check=False)
        if done.returncode != 0:
            tail = [line for line in done.stderr.decode(errors="replace").splitlines() if line.strip()][-1:]
            raise RuntimeError("probe exited %d: %s" % (done.returncode, tail[0][:300] if tail else "no message"))
        answer = json.loads(done.stdout.decode())
        if not isinstance(answer, dict):
            raise ValueError("the probe printed no object")
        result["probe"] = answer
    except subprocess.TimeoutExpired:
        result["error"] = "probe timed out after %d s" % timeout
    except (OSError, ValueError, LookupError, RuntimeError) as exc:
        result["error"] = "%s: %s" % (type(exc).__name__, exc)
    result["finished"] = _now()
    return result


def _write(path, text):
    with open(path, "w") as handle:
        handle.write(text)


def main(argv=None):
    """``probe``: run the probe and publish part 0 (the rest into the parts directory); ``part N``: publish part
    N. Always exits 0 so the pod goes on; a failure is published as the result's ``error``."""
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ
    parts_dir = env.get("GPU_PROVISION_PARTS_DIR", PARTS_DIR)
    log = env.get("GPU_PROVISION_TERMINATION_LOG", TERMINATION_LOG)
    if argv[:1] == ["probe"]:
        result = run_probe(env.get("NODE_NAME", ""), env.get("GPU_PROVISION_DRIFT_CONFIG", CONFIG_DIR),
                           env.get("GPU_PROVISION_HOST_ROOT", HOST_ROOT))
        messages = fitted(result)
        for index, message in enumerate(messages[1:], start=1):
            _write(os.path.join(parts_dir, "part-%d" % index), message)
        _write(log, messages[0])
        print("drift probe of %s: %s, %d bytes published" % (
            result["node"], "error: " + result["error"] if "error" in result else "answered",
            sum(len(m) for m in messages)))
        return 0
    if len(argv) == 2 and argv[0] == "part" and argv[1].isdigit():
        try:
            with open(os.path.join(parts_dir, "part-%s" % argv[1])) as handle:
                _write(log, handle.read())
        except OSError as exc:
            _write(log, "")
            print("part %s: %s" % (argv[1], exc))
        return 0
    print("usage: publish.py probe | part N", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
