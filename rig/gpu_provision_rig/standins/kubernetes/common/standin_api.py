"""Stand-in for the test rig: the client side of the stand-in Kubernetes API, shared by kubeadm, kubectl, kubelet.

What the stand-ins do (packages kubeadm, kubelet, kubectl, cri-tools, kubernetes-cni at pkgs.k8s.io versions):

- ``kubeadm init`` runs the real preflight checks that matter here (root, swap off, ip_forward and
  bridge-nf-call-iptables = 1, files not already present), writes /etc/kubernetes/{admin,super-admin,kubelet,
  controller-manager,scheduler}.conf, pki/ca.crt, the four static pod manifests and /var/lib/kubelet/config.yaml,
  restarts kubelet, stores the bootstrap token and prints the real output, including the join command unless
  ``--skip-token-print``. ``kubeadm token create`` prints a token of the real format (``[a-z0-9]{6}.[a-z0-9]{16}``)
  and, with ``--print-join-command``, the real join line; ``kubeadm init phase upload-certs --upload-certs`` prints
  a 64-hex certificate key. ``kubeadm join`` checks the CA hash, the token (and its TTL) and the certificate key
  against the cluster, writes kubelet.conf (and admin.conf on control planes) and waits for its Node.
- ``kubelet`` (kubelet.service) exits while /var/lib/kubelet/config.yaml is missing (systemd restarts it, as with
  the real one), registers its Node with the labels and taints kubeadm gave it and reports ``kubeletVersion``. On the
  node where ``kubeadm init`` ran it also serves the stand-in API on port 6443, storing every object in
  /var/lib/gpu-provision-standin/apiserver/objects.json.
- ``kubectl apply -f`` (JSON manifests: a ``List``, one object, or a file/URL of either), ``get`` (kinds, names,
  ``-n``/``-A``, ``-l``, ``--field-selector`` on name/namespace, ``-o json|name``), ``label node`` and ``taint node`` (with ``--overwrite``), ``version``.

What they cannot prove: no TLS or authentication (the API is plain HTTP on the rig's private bridge), no
scheduling, no pods, controllers or static pods actually running (DaemonSets never start, so the device plugin,
DCGM exporter and CNI pods are never exercised), no server-side schema validation or defaulting (the project's
tests validate manifests against the real OpenAPI schemas instead), YAML manifests are not read (the project
writes JSON; upstream CNI YAML is not parsed), a joined control plane does not run a second API replica,
``kubeadm upgrade`` is not implemented, and containerd is not contacted (the CRI preflight check is skipped).
``common/cni-flannel-standin.json`` (in the source tree, not in a package) is the flannel manifest cut down to
what the stand-ins read, for rig cluster files (``kubernetes.cni_manifest``): nodes on the rig cannot download
the upstream one.
"""

import json
import os
import re
import time
import urllib.error
import urllib.request

VERSION = "@UPSTREAM@"
STATE_DIR = "/var/lib/gpu-provision-standin/apiserver"
PORT = 6443

# kind names kubectl accepts -> (Kind, apiVersion, namespaced)
KINDS = {}
for _names, _kind, _api, _ns in (
    (("node", "nodes", "no"), "Node", "v1", False),
    (("namespace", "namespaces", "ns"), "Namespace", "v1", False),
    (("configmap", "configmaps", "cm"), "ConfigMap", "v1", True),
    (("secret", "secrets"), "Secret", "v1", True),
    (("serviceaccount", "serviceaccounts", "sa"), "ServiceAccount", "v1", True),
    (("service", "services", "svc"), "Service", "v1", True),
    (("resourcequota", "resourcequotas", "quota"), "ResourceQuota", "v1", True),
    (("limitrange", "limitranges", "limits"), "LimitRange", "v1", True),
    (("pod", "pods", "po"), "Pod", "v1", True),
    (("daemonset", "daemonsets", "ds"), "DaemonSet", "apps/v1", True),
    (("deployment", "deployments", "deploy"), "Deployment", "apps/v1", True),
    (("role", "roles"), "Role", "rbac.authorization.k8s.io/v1", True),
    (("rolebinding", "rolebindings"), "RoleBinding", "rbac.authorization.k8s.io/v1", True),
    (("clusterrole", "clusterroles"), "ClusterRole", "rbac.authorization.k8s.io/v1", False),
    (("clusterrolebinding", "clusterrolebindings"), "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", False),
    (("runtimeclass", "runtimeclasses"), "RuntimeClass", "node.k8s.io/v1", False),
    (("priorityclass", "priorityclasses", "pc"), "PriorityClass", "scheduling.k8s.io/v1", False),
):
    for _name in _names:
        KINDS[_name] = (_kind, _api, _ns)
NAMESPACED = {kind: ns for kind, _api, ns in KINDS.values()}


class ApiError(Exception):
    """An error as kubectl/kubeadm print it."""


def resolve_kind(text):
    """``daemonsets.apps`` / ``ds`` / ``DaemonSet`` -> (Kind, apiVersion, namespaced)."""
    name = text.split(".", 1)[0].lower()
    if name not in KINDS:
        raise ApiError('error: the server doesn\'t have a resource type "%s"' % text)
    return KINDS[name]


def resource_name(kind, api_version):
    """``daemonset.apps`` as kubectl prints object references."""
    group = api_version.split("/")[0] if "/" in api_version else ""
    return kind.lower() + ("." + group if group else "")


def server_of(kubeconfig):
    """``host:port`` of the cluster in a kubeconfig file (the stand-in speaks plain HTTP to it)."""
    try:
        with open(kubeconfig) as f:
            text = f.read()
    except OSError as exc:
        raise ApiError("error: error loading config file \"%s\": %s" % (kubeconfig, exc.strerror)) from None
    match = re.search(r"server:\s*https?://(\S+)", text)
    if not match:
        raise ApiError("error: no server found in %s" % kubeconfig)
    return match.group(1)


def request(server, method, path, body=None, timeout=30):
    """One call to the stand-in API; the decoded JSON answer."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request("http://%s%s" % (server, path), data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as exc:
        raise ApiError("Error from server: %s" % exc.read().decode().strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError("The connection to the server %s was refused - did you specify the right host or port? (%s)"
                       % (server, reason)) from None


def objects(server, timeout=30):
    """Every object the API holds."""
    return request(server, "GET", "/api/objects", timeout=timeout)["items"]


def put(server, obj):
    """Create or replace ``obj``; ``created``, ``configured`` or ``unchanged``."""
    return request(server, "PUT", "/api/objects", obj)["result"]


def find(items, kind, name, namespace=""):
    """The object of ``kind``/``namespace``/``name`` among ``items``, or None."""
    for item in items:
        meta = item.get("metadata", {})
        if item.get("kind") == kind and meta.get("name") == name and meta.get("namespace", "") == (namespace or ""):
            return item
    return None


def wait_for(server, seconds):
    """Wait until the API answers; False when it did not within ``seconds``."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            request(server, "GET", "/healthz", timeout=2)
            return True
        except ApiError:
            time.sleep(0.5)
    return False


def now():
    """RFC 3339 UTC time as Kubernetes writes it."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def write_file(path, text, mode=0o600):
    """Write ``text`` to ``path`` with ``mode``, creating parent directories."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd = os.open(path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(path + ".tmp", mode)
    os.replace(path + ".tmp", path)
