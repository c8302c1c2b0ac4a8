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
  /var/lib/gpu-provision-standin/apiserver/objects.json. Pods bound to its node (``spec.nodeName``) it runs as
  processes: a ``sleep`` (for ``standin.gpu-provision.io/runs-for-seconds`` seconds, else until deleted) under
  ``gpu-sim hold`` when the pod asks for an ``nvidia.com/`` resource, so ``nvidia-smi`` lists it as a GPU process;
  it reports ``Running`` (Ready), then ``Succeeded``/``Failed`` with the exit code, and a pod marked for deletion
  is stopped (SIGTERM) and removed. Node status goes through the status subresource, so labels, taints and
  cordons set meanwhile stay.
- The API server also runs what a cluster's controllers and scheduler do for the objects the project's
  ``verify --workload`` makes: a Deployment gets a ReplicaSet named ``<deployment>-<pod-template-hash>`` (10
  characters of Kubernetes' safe alphabet from the template's digest; an older template's ReplicaSet is scaled to
  0 at once, not rolled), a ReplicaSet keeps ``replicas`` active pods ``<replicaset>-<5 characters>`` with owner
  references, and both report replica counts in status; a ReplicaSet whose Deployment is gone is removed and a pod
  whose ReplicaSet is gone is deleted gracefully (garbage collection, for what those controllers made only:
  hand-made pods naming owners that do not exist stay). Pods without
  ``spec.nodeName`` are scheduled: the filters NodeUnschedulable, TaintToleration (NoSchedule and NoExecute),
  NodeAffinity (``nodeSelector`` and required node affinity terms) and NodeResourcesFit (extended ``nvidia.com/``
  resources against allocatable, less what the node's active pods ask for), in that order, the first failing one
  naming a node's reason; the first feasible node by name is bound (no scoring), else the pod's ``PodScheduled``
  condition is False/Unschedulable with the scheduler's message (``0/3 nodes are available: 1 Insufficient
  nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector. preemption: ...``).
- A kubelet runs a pod's first container's ``command`` + ``args`` for real when the program is on the node
  (``python3``), with the container's ``env`` (values, and ``fieldRef`` to ``metadata.name``,
  ``metadata.namespace`` and ``spec.nodeName``); other pods stay a ``sleep``. Its output goes to
  ``/var/log/pods/<namespace>_<pod>_<uid>/<container>/0.log`` as written (no CRI line prefix), served on the
  kubelet's port 10250 at ``/containerLogs/<namespace>/<pod>/<container>`` and through the API's
  ``pods/NAME/log`` (``kubectl logs``); the node reports that address as its ``InternalIP``. No image is pulled,
  no volume is mounted (``/dev/shm`` is the node's), and no device reaches the process: ``NVIDIA_VISIBLE_DEVICES``
  is not set.
- Dynamic Resource Allocation (``standin_dra.py``, beside this file): the DRA driver's kubelet plugin publishing
  the node's ResourceSlice while its DaemonSet selects the node, the resourceclaim controller, the scheduler's
  DynamicResources filter after NodeResourcesFit, allocation at binding, and a kubelet that starts a claim's pod
  once its claims are reserved for it.
- The API's Eviction subresource (``POST /api/v1/namespaces/NS/pods/NAME/eviction``, policy/v1) decides as the
  real one: pods not running or already terminating go; otherwise the one PodDisruptionBudget selecting the pod
  (``minAvailable`` or ``maxUnavailable``, counts or percentages rounded up; more than one budget is a 500) must
  leave at least one disruption allowed over its healthy pods, else 429 TooManyRequests "Cannot evict pod as it
  would violate the pod's disruption budget."; an evicted running pod is marked (``deletionTimestamp``) until its
  kubelet stops it. Merge patches (RFC 7386) change one object under the server's lock.
- ``kubectl apply -f`` (JSON manifests: a ``List``, one object, or a file/URL of either), ``get`` (kinds, names,
  ``-n``/``-A``, ``-l``, ``--field-selector`` on name/namespace and, for pods, ``spec.nodeName`` and
  ``status.phase``, ``-o json|name``), ``label`` and ``annotate`` (nodes and pods), ``taint node`` (with
  ``--overwrite``), ``patch --type merge``, ``cordon``/``uncordon``, ``drain`` (kubectl's refusals and flags, 5 s
  retries while a budget refuses, ``--timeout``), ``delete``, ``create --raw`` on the eviction subresource,
  ``version``.

What they cannot prove: no TLS or authentication (the API is plain HTTP on the rig's private bridge), no
scoring or preemption in scheduling, no containers (a pod is one process), no controllers beyond the Deployment,
ReplicaSet and resourceclaim ones above (an evicted pod of a Job or DaemonSet is not recreated elsewhere, a
budget's status is not written: it is computed at each eviction) or static pods actually running (DaemonSets never
start, so the device plugin, DRA plugin, DCGM exporter and CNI pods are never exercised: the kubelet plays the
plugins' parts in the API), no server-side schema validation or defaulting (the project's tests validate manifests
against the real OpenAPI schemas instead), YAML manifests are not read (the project writes JSON; upstream CNI YAML
is not parsed), a joined control plane does not run a second API replica,
``kubeadm upgrade apply``/``node`` rewrite the static pod manifests and the kubeadm-config ConfigMap under
kubeadm's version policy and with its messages, but pull no image and restart no component (nothing runs from the
manifests), and containerd is not contacted (the CRI preflight check is skipped).
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
    (("replicaset", "replicasets", "rs"), "ReplicaSet", "apps/v1", True),
    (("role", "roles"), "Role", "rbac.authorization.k8s.io/v1", True),
    (("rolebinding", "rolebindings"), "RoleBinding", "rbac.authorization.k8s.io/v1", True),
    (("clusterrole", "clusterroles"), "ClusterRole", "rbac.authorization.k8s.io/v1", False),
    (("clusterrolebinding", "clusterrolebindings"), "ClusterRoleBinding", "rbac.authorization.k8s.io/v1", False),
    (("runtimeclass", "runtimeclasses"), "RuntimeClass", "node.k8s.io/v1", False),
    (("priorityclass", "priorityclasses", "pc"), "PriorityClass", "scheduling.k8s.io/v1", False),
    (("poddisruptionbudget", "poddisruptionbudgets", "pdb"), "PodDisruptionBudget", "policy/v1", True),
    (("job", "jobs"), "Job", "batch/v1", True),
    # DRA's objects: slices published and claims made and allocated as standin_dra.py says; no quota.
    (("deviceclass", "deviceclasses"), "DeviceClass", "resource.k8s.io/v1", False),
    (("resourceslice", "resourceslices"), "ResourceSlice", "resource.k8s.io/v1", False),
    (("resourceclaim", "resourceclaims"), "ResourceClaim", "resource.k8s.io/v1", True),
    (("resourceclaimtemplate", "resourceclaimtemplates"), "ResourceClaimTemplate", "resource.k8s.io/v1", True),
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
        text = exc.read().decode().strip()
        try:
            status = json.loads(text)
        except ValueError:
            status = text
        if isinstance(status, dict) and status.get("kind") == "Status":
            raise ApiError("Error from server (%s): %s" % (status.get("reason"), status.get("message"))) from None
        raise ApiError("Error from server: %s" % (status if isinstance(status, str) else text)) from None
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


def patch(server, kind, name, namespace, body):
    """Apply a JSON merge patch (RFC 7386) to an object on the server, as ``kubectl patch --type merge``."""
    return request(server, "PATCH", "/api/objects",
                   {"kind": kind, "namespace": namespace or "", "name": name, "patch": body})["object"]


def put_status(server, obj):
    """Replace the object's status only (the ``status`` subresource): what else it carries is ignored."""
    return request(server, "PUT", "/api/objects/status", obj)


def delete(server, kind, name, namespace="", grace=None):
    """Delete an object; a running pod is only marked (``deletionTimestamp``) until its kubelet stops it."""
    return request(server, "DELETE", "/api/objects",
                   {"kind": kind, "namespace": namespace or "", "name": name, "grace": grace})


def pod_log(server, namespace, name, container=""):
    """The container's output, as ``GET /api/v1/namespaces/NS/pods/NAME/log`` answers it (the API server asks the
    pod's kubelet)."""
    path = "/api/v1/namespaces/%s/pods/%s/log" % (namespace, name)
    return request(server, "GET", path + ("?container=" + container if container else ""))["log"]


def evict(server, namespace, name):
    """POST a policy/v1 Eviction for a pod: the server's Status (ApiError with 429 TooManyRequests when a
    PodDisruptionBudget forbids it)."""
    return request(server, "POST", "/api/v1/namespaces/%s/pods/%s/eviction" % (namespace, name),
                   {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}})


def status_object(code, reason, message, details=None):
    """A ``Status`` object as the API server answers errors (and successful evictions)."""
    out = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success" if code < 400 else "Failure",
           "message": message, "reason": reason, "code": code}
    if details:
        out["details"] = details
    return out


def merge_patch(target, patch_doc):
    """RFC 7386 JSON merge patch: mappings merge recursively, null removes a key, anything else replaces."""
    if not isinstance(patch_doc, dict):
        return patch_doc
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch_doc.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def selector_matches(selector, labels):
    """Whether a LabelSelector (``matchLabels`` and ``matchExpressions``: In, NotIn, Exists, DoesNotExist)
    selects ``labels``; an empty selector selects everything, as in policy/v1."""
    labels = labels or {}
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in (selector or {}).get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _scaled(value, total, name):
    """An IntOrString of a PodDisruptionBudget against ``total`` pods: a count, or a percentage rounded up."""
    text = str(value)
    if text.endswith("%"):
        return -(-total * int(text[:-1]) // 100)
    return int(text)


def pod_ready(pod):
    """Running, Ready and not being deleted: a healthy pod as the disruption controller counts it."""
    status = pod.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return status.get("phase") == "Running" and ready and not pod["metadata"].get("deletionTimestamp")


def eviction(items, namespace, name):
    """Decide an eviction as the API server's eviction subresource does: (HTTP code, Status).

    A pod already being deleted, or not running (Pending, Succeeded, Failed), is evicted whatever the budgets
    say. Otherwise the one PodDisruptionBudget of the namespace that selects the pod (more than one is an error,
    500) must allow a disruption: its healthy pods (running, ready, not being deleted) less the healthy pods it
    needs (``minAvailable``, or the expected pods less ``maxUnavailable``; percentages of the expected pods
    rounded up) must be at least 1, else 429 TooManyRequests. An unhealthy pod may go while the budget has the
    healthy pods it needs (``unhealthyPodEvictionPolicy: IfHealthyBudget``, the default).
    """
    pod = find(items, "Pod", name, namespace)
    if pod is None:
        return 404, status_object(404, "NotFound", 'pods "%s" not found' % name,
                                  {"name": name, "kind": "pods"})
    meta = pod["metadata"]
    phase = (pod.get("status") or {}).get("phase")
    ok = status_object(201, "", "", None)
    if meta.get("deletionTimestamp") or phase in (None, "Pending", "Succeeded", "Failed"):
        return 201, ok
    budgets = [b for b in items if b.get("kind") == "PodDisruptionBudget"
               and b["metadata"].get("namespace") == namespace
               and selector_matches((b.get("spec") or {}).get("selector"), meta.get("labels"))]
    if len(budgets) > 1:
        return 500, status_object(500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
                                                         "eviction subresource does not support.")
    if budgets:
        budget = budgets[0]
        spec = budget.get("spec") or {}
        selected = [p for p in items if p.get("kind") == "Pod" and p["metadata"].get("namespace") == namespace
                    and selector_matches(spec.get("selector"), p["metadata"].get("labels"))
                    and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        expected = len(selected)
        healthy = sum(1 for p in selected if pod_ready(p))
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected, "minAvailable")
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected, "maxUnavailable"))
        else:
            desired = 0
        allowed = healthy - desired if pod_ready(pod) else (1 if healthy >= desired else 0)
        if allowed < 1:
            name_ = budget["metadata"]["name"]
            return 429, status_object(
                429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget %s needs %d healthy "
                                                                       "pods and has %d currently"
                             % (name_, desired, healthy)}]})
    return 201, ok


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


#: Kubernetes' safe alphabet for generated names (k8s.io/apimachinery ``util/rand``: no vowels, no 0, 1, 3).
SAFE = "bcdfghjklmnpqrstvwxz2456789"


def safe_text(seed, length):
    """``length`` characters of the safe alphabet from ``seed`` (bytes): a generated name's suffix."""
    import hashlib

    digest = hashlib.sha256(seed).digest()
    return "".join(SAFE[b % len(SAFE)] for b in digest[:length])


def new_object(obj):
    """``obj`` with the uid and creation time the API server gives a new object."""
    obj["metadata"].setdefault("uid", os.urandom(16).hex())
    obj["metadata"].setdefault("creationTimestamp", now())
    return obj


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
