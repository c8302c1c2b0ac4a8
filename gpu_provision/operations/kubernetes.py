"""Kubernetes operations: kubeadm prerequisites, ``kubeadm init``/``join``, manifests, CNI and node labels.

Each reads the node through the batched probe (``system``, ``files`` and the ``kubernetes`` section) and yields
nothing once the node is as wanted. Join tokens and certificate keys exist only at execution time: they are made on
the control plane inside a Python callback, reach the joining node on the command's stdin into a private file under
``/run`` (tmpfs) that is removed after ``kubeadm join``, and are never printed, logged or kept on the controller.
"""

from __future__ import annotations

import json
import posixpath
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from io import StringIO
from typing import Any

from pyinfra.api import FileUploadCommand, FunctionCommand, operation

from gpu_provision.facts.state import invalidate
from gpu_provision.k8s import kubeadm
from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.nodes import taint_objects
from gpu_provision.k8s.objects import Obj, content_hash, key
from gpu_provision.operations.commands import current_state, fail_command, mark_changed, this_host
from gpu_provision.operations.files import changed_paths
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.state import NodeStateData, Request

ADMIN_CONF = "/etc/kubernetes/admin.conf"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
KUBECTL = f"kubectl --kubeconfig={ADMIN_CONF}"
FSTAB = "/etc/fstab"
FSTAB_BACKUP = "/etc/fstab.gpu-provision.bak"
JOIN_DIR = "/run/gpu-provision"
JOIN_FILE = f"{JOIN_DIR}/kubeadm-join.yaml"
TOKEN_TTL = "15m"

_JOIN = re.compile(r"kubeadm join (?P<endpoint>\S+) --token (?P<token>[a-z0-9]{6}\.[a-z0-9]{16})"
                   r" --discovery-token-ca-cert-hash (?P<hash>sha256:[0-9a-f]{64})")
_CERT_KEY = re.compile(r"^[0-9a-f]{64}$")


def kubernetes_request(*files: str, contents: Sequence[str] = ()) -> Request:
    """The probe request for the ``kubernetes`` section plus ``files`` (and the text of ``contents``)."""
    return Request(files=set(files) | set(contents), contents=set(contents), sections={"system", "kubernetes"})


def fstab_swap_lines(text: str) -> list[str]:
    """Active (uncommented) swap entries of an fstab."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and not fields[0].startswith("#") and fields[2] == "swap":
            out.append(line)
    return out


# Comments out every fstab line whose third field is "swap"; keeps everything else byte for byte.
_COMMENT_SWAP = r"s/^([^#[:space:]][^[:space:]]*[[:space:]]+[^[:space:]]+[[:space:]]+swap([[:space:]].*)?)$/# \1/"


def swap_plan(state: NodeStateData) -> list[str]:
    """Commands that turn swap off now and keep it off at boot (empty when already so)."""
    commands = []
    if state.system.get("swaps"):
        commands.append("swapoff -a")
    fstab = state.file(FSTAB)
    if fstab_swap_lines(fstab.content or ""):
        commands.append(f"cp -a {FSTAB} {FSTAB_BACKUP}")
        commands.append(f"sed -i -E {shlex.quote(_COMMENT_SWAP)} {FSTAB}")
        # systemd turns fstab lines into .swap units at boot and on daemon-reload: drop the stale ones now.
        commands.append("if command -v systemctl >/dev/null; then systemctl daemon-reload; fi")
    return commands


@operation()
def swap_off():
    """Swap off and kept off: ``swapoff -a`` and every fstab swap entry commented out (fstab backed up first).

    kubelet refuses to start with swap on (``failSwapOn``).

    .. code:: python

        kubernetes.swap_off(name="Swap off")
    """
    host = this_host()
    commands = swap_plan(current_state(host, Request(files={FSTAB}, contents={FSTAB})))
    if not commands:
        host.noop("swap already off")
        return
    mark_changed(host)
    yield from commands


def module_present(state: NodeStateData, name: str) -> bool:
    """Whether kernel module ``name`` is loaded or built in.

    Loaded: listed in ``/proc/modules``. Built in: ``/sys/module/NAME`` exists, or, for built-in modules without
    parameters (which have no such entry), what the module provides is there (the probe's ``module_features``).
    """
    if name in state.system.get("modules", []) or state.file(f"/sys/module/{name}").exists:
        return True
    return bool(_kubernetes(state).get("module_features", {}).get(name))


@operation()
def modules_loaded(modules: Sequence[str]):
    """Kernel modules loaded now (boot-time loading is the ``/etc/modules-load.d`` file).

    + modules: module names, e.g. ``("overlay", "br_netfilter")``

    ``modprobe`` runs only for a module that is neither loaded nor built into the kernel (see
    :func:`module_present`): kernels without loadable-module support have the built-in ones and no modprobe to run.

    .. code:: python

        kubernetes.modules_loaded(name="Kernel modules", modules=("overlay", "br_netfilter"))
    """
    host = this_host()
    state = current_state(host, kubernetes_request(*(f"/sys/module/{m}" for m in modules)))
    missing = [m for m in modules if not module_present(state, m)]
    if not missing:
        host.noop("modules already loaded or built in: " + ", ".join(modules))
        return
    mark_changed(host)
    for module in missing:
        yield f"modprobe {shlex.quote(module)}"


@operation()
def sysctls_applied(path: str, values: Mapping[str, str]):
    """``sysctl --system`` when ``path`` changed in this run or a running value differs from ``values``.

    + path: the sysctl.d file that sets ``values`` (written before by ``files.wants``)
    + values: name -> wanted value

    .. code:: python

        kubernetes.sysctls_applied(name="Apply sysctls", path="/etc/sysctl.d/99-kubernetes.conf",
                                   values={"net.ipv4.ip_forward": "1"})
    """
    host = this_host()
    state = current_state(host, Request(sysctls=set(values)))
    running = state.system.get("sysctls", {})
    wrong = sorted(n for n, v in values.items() if running.get(n) != v)
    if path not in changed_paths(host) and not wrong:
        host.noop("sysctls already applied")
        return
    mark_changed(host)
    # sysctl --system fails when any file sets a key the node may not write (kernel.* inside containers); then
    # only this file's keys decide.
    yield f"sysctl --system >/dev/null 2>&1 || sysctl -p {shlex.quote(path)} >/dev/null"


def _kubernetes(state: NodeStateData) -> dict[str, Any]:
    return state.section("kubernetes") or {}


@operation()
def init(config_path: str, first_control_plane: str):
    """The first control plane initialised by ``kubeadm init`` (once: guarded by ``/etc/kubernetes/admin.conf``).

    + config_path: the InitConfiguration/ClusterConfiguration file on the node
    + first_control_plane: inventory name of the node that initialises the cluster; every other host does nothing
      (every host calls the same operations, so pyinfra orders this before :func:`join` on all of them)

    The bootstrap token kubeadm makes is not printed (``--skip-token-print``): nodes join with tokens made on
    demand by :func:`join`.

    .. code:: python

        kubernetes.init(name="kubeadm init", config_path="/etc/gpu-provision/kubernetes/kubeadm-init.yaml",
                        first_control_plane="cp-01")
    """
    host = this_host()
    if host.name != first_control_plane:
        host.noop(f"{first_control_plane} initialises the cluster")
        return
    state = current_state(host, Request(files={ADMIN_CONF}))
    if state.file(ADMIN_CONF).exists:
        host.noop("control plane already initialised")
        return
    mark_changed(host)
    yield (f"kubeadm init --config {shlex.quote(config_path)} --skip-token-print "
           f"> /var/log/gpu-provision-kubeadm-init.log 2>&1 || {{ tail -n 20 /var/log/gpu-provision-kubeadm-init.log >&2; exit 1; }}")


def parse_join_command(text: str) -> tuple[str, str, str]:
    """``(endpoint, token, ca_cert_hash)`` from ``kubeadm token create --print-join-command`` output."""
    match = _JOIN.search(text)
    if not match:
        raise ValueError("kubeadm printed no join command")
    return match["endpoint"], match["token"], match["hash"]


def parse_certificate_key(lines: Sequence[str]) -> str:
    """The certificate key from ``kubeadm init phase upload-certs --upload-certs`` output (its last line)."""
    for line in reversed([str(x).strip() for x in lines]):
        if _CERT_KEY.match(line):
            return line
    raise ValueError("kubeadm printed no certificate key")


def _scrub(lines: Sequence[str], *secrets: str) -> list[str]:
    out = []
    for line in lines:
        for secret in secrets:
            line = line.replace(secret, "***")
        out.append(line)
    return out


def join_script() -> str:
    """The node-side command of a join: config from stdin into a private tmpfs file, join, remove the file."""
    return (f"umask 077 && mkdir -p {JOIN_DIR} && cat > {JOIN_FILE} && "
            f"{{ kubeadm join --config {JOIN_FILE} > /var/log/gpu-provision-kubeadm-join.log 2>&1; rc=$?; "
            f"rm -f {JOIN_FILE}; [ $rc = 0 ] || tail -n 20 /var/log/gpu-provision-kubeadm-join.log >&2; exit $rc; }}")


def _lines(output: Any) -> list[str]:
    return [str(line.line if hasattr(line, "line") else line) for line in output]


def do_join(state: Any, host: Any, cluster: Cluster, node: Node, control_plane: str, address: str | None) -> bool:
    """Execution-time join (a ``FunctionCommand``): token (and certificate key) from ``control_plane``, join.

    Returns False, failing only this host, when the control plane cannot make a token or the join fails.
    """
    source = state.inventory.get_host(control_plane, None)
    if source is None:
        host.log_styled(f"join: control plane {control_plane} is not in this run's inventory", fg="red")
        return False
    ok, output = source.run_shell_command(f"kubeadm token create --ttl {TOKEN_TTL} --print-join-command",
                                          print_output=False, print_input=False)
    if not ok:
        host.log_styled(f"join: kubeadm token create failed on {control_plane}", fg="red")
        return False
    endpoint, token, ca_hash = parse_join_command("\n".join(_lines(output.stdout_lines)))
    secrets = [token]
    certificate_key = None
    if node.role == "control-plane":
        ok, output = source.run_shell_command("kubeadm init phase upload-certs --upload-certs",
                                              print_output=False, print_input=False)
        if not ok:
            host.log_styled(f"join: uploading certificates failed on {control_plane}", fg="red")
            return False
        certificate_key = parse_certificate_key(_lines(output.stdout_lines))
        secrets.append(certificate_key)
    config = kubeadm.join_configuration(cluster, node, endpoint, token, ca_hash, certificate_key, address)
    ok, output = host.run_shell_command(join_script(), _stdin=json.dumps(config, indent=2) + "\n",
                                        print_output=False, print_input=False)
    if not ok:
        for line in _scrub(_lines(output.stderr_lines), *secrets)[-20:]:
            host.log_styled(f"kubeadm join: {line}", fg="red")
        return False
    return True


@operation()
def join(cluster: Cluster, node: Node, control_plane: str):
    """The node joined to the cluster (once: guarded by ``/etc/kubernetes/kubelet.conf``).

    + cluster, node: the typed cluster file and this node
    + control_plane: inventory name of the initialised control plane that makes the token (it joins nothing)

    A worker joins with a bootstrap token (``kubeadm token create --ttl 15m``); a further control plane also with a
    certificate key (``kubeadm init phase upload-certs --upload-certs``). Both are made on ``control_plane`` when the
    operation executes and passed as described in this module's docstring.

    .. code:: python

        kubernetes.join(name="kubeadm join", cluster=cluster, node=node, control_plane="cp-01")
    """
    host = this_host()
    if host.name == control_plane:
        host.noop("the first control plane is initialised, not joined")
        return
    state = current_state(host, kubernetes_request(KUBELET_CONF))
    if state.file(KUBELET_CONF).exists:
        host.noop("node already joined")
        return
    address = None
    if node.role == "control-plane":
        address = kubeadm.advertise_address(node, (_kubernetes(state).get("addresses") or [None])[0])
    mark_changed(host)
    yield FunctionCommand(do_join, (cluster, node, control_plane, address), {})


@dataclass(frozen=True)
class Manifest:
    """A manifest file on the control plane and the objects it holds."""

    name: str
    path: str
    objects: tuple[Obj, ...]


def stale_objects(manifest: Manifest, api: Mapping[str, Any]) -> list[str]:
    """``Kind/namespace/name`` of the manifest's objects that the API lacks or holds with other content."""
    applied = api.get("objects", {})
    out = []
    for obj in manifest.objects:
        kind, namespace, name = key(obj)
        ident = f"{kind}/{namespace}/{name}"
        if applied.get(ident) != content_hash(obj):
            out.append(ident)
    return out


def _api_or_fail(host: Any, state: NodeStateData, what: str) -> tuple[dict[str, Any] | None, str | None]:
    section = _kubernetes(state)
    if section.get("api") is not None:
        return section["api"], None
    if not section.get("admin_conf"):
        if host.state.is_executing:
            return None, fail_command(f"{what}: {ADMIN_CONF} missing (kubeadm init did not run)")
        # At prepare time a control plane that is about to be initialised has no API yet.
        return {"nodes": {}, "objects": {}, "daemonsets": []}, None
    return None, fail_command(f"{what}: the API server did not answer: {section.get('api_error')}")


@operation()
def manifest_applied(manifest: Manifest):
    """The manifest's objects present in the API with the content rendered from the cluster file.

    + manifest: name, path of the file on this control plane (written before by ``files.wants``) and its objects

    ``kubectl apply -f`` runs when any object is missing or carries another content hash annotation.

    .. code:: python

        kubernetes.manifest_applied(name="Device plugin", manifest=Manifest("device-plugin", path, objs))
    """
    host = this_host()
    state = current_state(host, kubernetes_request())
    api, failure = _api_or_fail(host, state, f"manifest {manifest.name}")
    if failure:
        yield failure
        return
    assert api is not None
    stale = stale_objects(manifest, api)
    if not stale:
        host.noop(f"manifest {manifest.name} already applied")
        return
    mark_changed(host)
    yield f"{KUBECTL} apply -f {shlex.quote(manifest.path)}"


# Runs on the control plane: fetch a manifest, point its images at the registry mirror, write it for kubectl.
_FETCH_MANIFEST = (
    "import re,sys,urllib.request\n"
    "text=urllib.request.urlopen(sys.argv[1],timeout=60).read().decode()\n"
    "reg=sys.argv[3]\n"
    "def swap(m):\n"
    "    ref=m.group(3); first,sep,rest=ref.partition('/')\n"
    "    if sep and ('.' in first or ':' in first or first=='localhost'): ref=rest\n"
    "    return m.group(1)+m.group(2)+reg.rstrip('/')+'/'+ref+m.group(2)\n"
    "if reg: text=re.sub(r'(\"?image\"?\\s*:\\s*)([\"\\']?)([^\"\\'\\s,]+)\\2',swap,text)\n"
    "open(sys.argv[2],'w').write(text)\n"
)


def rewrite_images(text: str, registry: str | None) -> str:
    """Manifest text (YAML or JSON) with every ``image:`` pointed at ``registry`` (the node-side rewrite's twin)."""
    if not registry:
        return text
    pattern = re.compile(r"(\"?image\"?\s*:\s*)([\"']?)([^\"'\s,]+)\2")
    return pattern.sub(lambda m: m.group(1) + m.group(2) + with_registry(m.group(3), registry) + m.group(2), text)


@operation()
def cni_applied(source: str | None, registry: str | None, daemonset: str, path: str):
    """The CNI installed once: its manifest fetched, images pointed at the registry mirror, applied.

    + source: URL (fetched by the control plane) or local file path (read here) of the manifest
    + registry: ``mirrors.registry`` or None
    + daemonset: ``namespace/name`` of the CNI's DaemonSet; its presence means the CNI is installed
    + path: where the manifest is written on the control plane

    .. code:: python

        kubernetes.cni_applied(name="CNI", source=FLANNEL_URL, registry=None,
                               daemonset="kube-flannel/kube-flannel-ds", path="/etc/gpu-provision/kubernetes/cni.yaml")
    """
    host = this_host()
    state = current_state(host, kubernetes_request())
    api, failure = _api_or_fail(host, state, "CNI")
    if failure:
        yield failure
        return
    assert api is not None
    if daemonset in api.get("daemonsets", []):
        host.noop(f"CNI already installed ({daemonset})")
        return
    if source is None:
        yield fail_command("the CNI has no upstream manifest: set kubernetes.cni_manifest in the cluster file")
        return
    mark_changed(host)
    yield f"mkdir -p {shlex.quote(posixpath.dirname(path))}"
    if re.match(r"^[a-z]+://", source):
        yield (f"python3 -c {shlex.quote(_FETCH_MANIFEST)} {shlex.quote(source)} {shlex.quote(path)} "
               f"{shlex.quote(registry or '')}")
    else:
        with open(source, encoding="utf-8") as handle:
            text = rewrite_images(handle.read(), registry)
        yield FileUploadCommand(StringIO(text), path, remote_temp_filename=host.get_temp_filename(path))
    yield f"{KUBECTL} apply -f {shlex.quote(path)}"


def label_plan(wanted: Mapping[str, tuple[dict[str, str], tuple[str, ...]]], api: Mapping[str, Any]) -> list[str]:
    """``kubectl label``/``taint`` commands for nodes whose labels or taints differ from ``wanted``.

    ``wanted``: node name -> (labels, taints as ``key=value:Effect``). Labels and taints the file does not name are
    left alone (kubeadm, the CNI and operators set their own). A node the API does not list yet (it joins in this
    run) is waited for first.
    """
    commands = []
    nodes = api.get("nodes", {})
    for name, (labels, taints) in sorted(wanted.items()):
        current = nodes.get(name)
        have_labels = (current or {}).get("labels", {})
        have_taints = {(t.get("key"), t.get("value"), t.get("effect")) for t in (current or {}).get("taints", [])}
        missing_labels = {k: v for k, v in sorted(labels.items()) if have_labels.get(k) != v}
        missing_taints = [text for text, t in zip(taints, taint_objects(taints))
                          if (t["key"], t.get("value"), t["effect"]) not in have_taints]
        if not missing_labels and not missing_taints:
            continue
        quoted = shlex.quote(name)
        if current is None:
            commands.append(f"for i in $(seq 60); do {KUBECTL} get node {quoted} >/dev/null 2>&1 && break; sleep 2; "
                            f"done")
        if missing_labels:
            pairs = " ".join(shlex.quote(f"{k}={v}") for k, v in missing_labels.items())
            commands.append(f"{KUBECTL} label node {quoted} --overwrite {pairs}")
        for text in missing_taints:
            commands.append(f"{KUBECTL} taint node {quoted} --overwrite {shlex.quote(text)}")
    return commands


def joining(run: Any, name: str) -> bool:
    """Whether node ``name`` may still register in this run: it is one of the run's hosts and has not failed.

    Waiting for a node that failed earlier or is outside ``--limit`` would only hold up the control plane.
    """
    inventory = getattr(run, "inventory", None)
    target = inventory.get_host(name, None) if inventory is not None else None
    if target is None or target not in getattr(run, "activated_hosts", set()):
        return False
    return target not in getattr(run, "failed_hosts", set())


@operation()
def node_labels(wanted: Mapping[str, tuple[dict[str, str], tuple[str, ...]]]):
    """Every node's labels and taints as the cluster file says, set from this control plane.

    + wanted: node name -> (labels, taints as ``key=value:Effect``)

    Reads the API afresh at execution: nodes joined earlier in the same run must be seen. Nodes the API does not
    list are waited for only while they can still join in this run (see :func:`joining`).

    .. code:: python

        kubernetes.node_labels(name="Node labels", wanted={"h200-01": ({"nvidia.com/gpu.present": "true"}, ())})
    """
    host = this_host()
    if host.state.is_executing:
        invalidate(host)
    state = current_state(host, kubernetes_request())
    api, failure = _api_or_fail(host, state, "node labels")
    if failure:
        yield failure
        return
    assert api is not None
    gone = [n for n in sorted(wanted) if n not in api.get("nodes", {}) and not joining(host.state, n)]
    for name in gone:
        host.noop(f"node {name} is not registered and does not join in this run: its labels wait for a later run")
    commands = label_plan({n: v for n, v in wanted.items() if n not in gone}, api)
    if not commands:
        host.noop("node labels and taints already set")
        return
    mark_changed(host)
    yield from commands
