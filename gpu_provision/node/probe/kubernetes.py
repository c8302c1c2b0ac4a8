"""Kubernetes membership of the node and, where an admin kubeconfig exists, what the API server holds.

Without arguments (the probe passes none): the node's own IPv4 addresses (kubeadm advertises one of them), whether
the features of ``overlay`` and ``br_netfilter`` are present (an overlay filesystem, the bridge netfilter sysctls),
kubeadm made it a control plane (``/etc/kubernetes/admin.conf``) or joined it (``/etc/kubernetes/kubelet.conf``),
and on control planes the cluster's nodes (labels, taints, kubelet version), every object labelled as managed by
gpu-provision (with its content-hash annotation), every DaemonSet (the CNI check) and the control plane's version
from kubeadm's ClusterConfiguration. Four ``kubectl get`` calls.
"""

import json
import os
import re

from . import _command

ADMIN_CONF = "/etc/kubernetes/admin.conf"
KUBELET_CONF = "/etc/kubernetes/kubelet.conf"
MANAGED = "app.kubernetes.io/managed-by=gpu-provision"
HASH_ANNOTATION = "gpu-provision/content-sha256"
MANAGED_KINDS = ("namespaces,serviceaccounts,configmaps,resourcequotas,limitranges,roles.rbac.authorization.k8s.io,"
                 "rolebindings.rbac.authorization.k8s.io,clusterroles.rbac.authorization.k8s.io,"
                 "clusterrolebindings.rbac.authorization.k8s.io,daemonsets.apps,runtimeclasses.node.k8s.io")
#: The DRA driver's kinds, read apart: before Kubernetes 1.34 the resource.k8s.io API is off unless enabled, and a
#: kind the server does not serve fails the whole ``kubectl get``.
DRA_KINDS = "deviceclasses.resource.k8s.io,resourceclaimtemplates.resource.k8s.io"
NOT_SERVED = "doesn't have a resource type"


def _addresses():
    text = _command.output(["ip", "-4", "-o", "addr", "show", "scope", "global"])
    out = []
    for line in text.splitlines():
        fields = line.split()
        if "inet" in fields:
            out.append(fields[fields.index("inet") + 1].split("/")[0])
    return out


def _features():
    # Built-in modules without parameters have no /sys/module entry; what they provide shows they are there.
    try:
        with open("/proc/filesystems") as f:
            filesystems = f.read().split()
    except OSError:
        filesystems = []
    return {"overlay": "overlay" in filesystems,
            "br_netfilter": os.path.exists("/proc/sys/net/bridge/bridge-nf-call-iptables")}


def _kubectl(args):
    # kubectl's own request timeout a little inside the probe's bound, so that it usually says why itself.
    seconds = max(1, int(_command.bound()) - 2)
    argv = ["kubectl", "--kubeconfig", ADMIN_CONF, "--request-timeout", "%ds" % seconds] + args + ["-o", "json"]
    rc, out = _command.run(argv, stderr="apart")
    if rc is None:
        raise RuntimeError("kubectl %s: %s" % (args[1], out))
    if rc != 0:
        raise RuntimeError("kubectl %s: %s" % (args[1], " ".join(out.strip().splitlines()[-1:])))
    return json.loads(out).get("items", [])


def _kind_key(item):
    meta = item.get("metadata", {})
    return "%s/%s/%s" % (item.get("kind", ""), meta.get("namespace", ""), meta.get("name", ""))


def _api():
    nodes = {}
    for item in _kubectl(["get", "nodes"]):
        info = item.get("status", {}).get("nodeInfo", {})
        nodes[item["metadata"]["name"]] = {
            "labels": item["metadata"].get("labels", {}),
            "taints": item.get("spec", {}).get("taints", []),
            "kubelet_version": info.get("kubeletVersion"),
        }
    objects = {}
    for item in _kubectl(["get", MANAGED_KINDS, "--all-namespaces", "-l", MANAGED]) + _dra_objects():
        annotations = item.get("metadata", {}).get("annotations") or {}
        objects[_kind_key(item)] = annotations.get(HASH_ANNOTATION)
    daemonsets = sorted("%s/%s" % (d["metadata"].get("namespace", ""), d["metadata"]["name"])
                        for d in _kubectl(["get", "daemonsets.apps", "--all-namespaces"]))
    return {"nodes": nodes, "objects": objects, "daemonsets": daemonsets, "cluster_version": _cluster_version()}


def _dra_objects():
    try:
        return _kubectl(["get", DRA_KINDS, "--all-namespaces", "-l", MANAGED])
    except RuntimeError as exc:
        if NOT_SERVED in str(exc):
            return []  # no DRA API on this cluster: none of its objects can exist
        raise


def _cluster_version():
    # kubeadm keeps the control plane's version in its ClusterConfiguration (YAML, or JSON: both match).
    for item in _kubectl(["get", "configmaps", "--namespace", "kube-system", "--field-selector",
                          "metadata.name=kubeadm-config"]):
        match = re.search(r"kubernetesVersion\"?:\s*\"?(v[0-9.]+)", item.get("data", {}).get("ClusterConfiguration", ""))
        if match:
            return match.group(1)
    return None


def _boot_time():
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith("btime "):
                return int(line.split()[1])
    raise ValueError("no btime in /proc/stat")


def _kubelet_restart_due(binary):
    """True when kubelet's main process started before ``binary`` was last replaced, False when it started after,
    None when kubelet is not running or either time cannot be read."""
    rc, text = _command.run(["systemctl", "show", "--property=MainPID,ExecMainStartTimestampMonotonic", "kubelet"],
                            stderr="drop")
    if rc != 0:
        return None
    props = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    try:
        if int(props.get("MainPID") or 0) == 0:
            return None
        # The monotonic clock counts from boot, as btime (whole seconds) dates it: a second of slack either way.
        started = _boot_time() + int(props["ExecMainStartTimestampMonotonic"]) / 1e6
        replaced = os.stat(binary).st_ctime
    except (OSError, KeyError, ValueError):
        return None
    return replaced > started + 1


def collect(request):
    """Membership, addresses, whether kubelet runs a replaced binary, and (with an admin kubeconfig) the API's
    nodes, managed objects and DaemonSets."""
    out = {
        "addresses": _addresses(),
        "module_features": _features(),
        "admin_conf": os.path.exists(ADMIN_CONF),
        "kubelet_conf": os.path.exists(KUBELET_CONF),
        "api": None,
        "api_error": None,
        "kubelet_restart_due": None,
    }
    binary = (request or {}).get("kubelet_binary")
    if binary and (out["admin_conf"] or out["kubelet_conf"]):
        out["kubelet_restart_due"] = _kubelet_restart_due(binary)
    if out["admin_conf"]:
        try:
            out["api"] = _api()
        except (RuntimeError, ValueError, KeyError) as exc:
            out["api_error"] = str(exc)
    return out
