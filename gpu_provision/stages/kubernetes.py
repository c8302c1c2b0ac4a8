"""Stage: kubeadm prerequisites, packages, the cluster itself, and what runs in it for GPUs.

On every node: swap off, ``overlay`` and ``br_netfilter`` loaded at boot and now, the bridge and forwarding
sysctls, the pkgs.k8s.io repository of the cluster's minor version and kubelet/kubeadm/kubectl pinned to the file's
version (cri-tools and kubernetes-cni from the same repository), all held. containerd with ``SystemdCgroup = true``
is the runtime stage's (``gpu_provision.stages.runtime``); kubelet is configured to match it.

The first control plane runs ``kubeadm init`` from a generated config; further control planes and workers join
with tokens made on demand. The first control plane then applies the CNI once, the device plugin, team and
monitoring manifests, every node's labels and taints, and writes the Prometheus scrape file.

Differences beyond the generic wants: active swap or fstab swap entries, missing modules, sysctl values, kubeadm
membership, and (on the first control plane, which sees the API) each node's kubelet version, labels and taints,
the CNI, and manifests whose objects are missing or differ from the file.
"""

from __future__ import annotations

import json

from pyinfra import host
from pyinfra.api import deploy

from gpu_provision.desired import Difference, FileWant, PackageWant, UnitWant, Want, request_for
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.k8s import applied, cni, kubeadm, monitoring
from gpu_provision.k8s import nodes as k8s_nodes
from gpu_provision.k8s.objects import as_list, key, to_text
from gpu_provision.operations import commands, files, packages, repos, services
from gpu_provision.operations.kubernetes import labels, membership, prerequisites, upgrade
from gpu_provision.operations.kubernetes import manifests as manifest_ops
from gpu_provision.operations.kubernetes.probe import ADMIN_CONF, KUBELET_CONF, kubernetes_request
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.stages.preflight import kubernetes_findings
from gpu_provision.state import NodeStateData, Request

NAME = "kubernetes"
REPO_ID = "kubernetes"
MODULES = ("overlay", "br_netfilter")
MODULES_FILE = "/etc/modules-load.d/k8s.conf"
SYSCTL_FILE = "/etc/sysctl.d/99-kubernetes.conf"
SYSCTLS = {
    "net.bridge.bridge-nf-call-iptables": "1",
    "net.bridge.bridge-nf-call-ip6tables": "1",
    "net.ipv4.ip_forward": "1",
}
CONFIG_DIR = "/etc/gpu-provision/kubernetes"
INIT_CONFIG = f"{CONFIG_DIR}/kubeadm-init.yaml"
CNI_MANIFEST = f"{CONFIG_DIR}/cni.yaml"
#: Pinned to the cluster file's version.
VERSIONED = ("kubelet", "kubeadm", "kubectl")
#: Versioned on their own upstream; the repository of the cluster's minor version carries matching releases.
COMPANIONS = ("cri-tools", "kubernetes-cni")


def manages(cluster: Cluster) -> bool:
    """Whether the cluster file asks for Kubernetes at all."""
    return cluster.kubernetes.enabled


def first_control_plane(cluster: Cluster) -> Node | None:
    """The node ``kubeadm init`` runs on (the first control plane in file order)."""
    return cluster.control_planes[0] if cluster.control_planes else None


def is_first(node: Node, cluster: Cluster) -> bool:
    """Whether ``node`` is the first control plane."""
    first = first_control_plane(cluster)
    return first is not None and first.name == node.name


def address(node: Node, state: NodeStateData) -> str | None:
    """The address ``node`` advertises (see :func:`gpu_provision.k8s.kubeadm.advertise_address`)."""
    probed = (state.section("kubernetes").get("addresses") or [None])[0]
    return kubeadm.advertise_address(node, probed)


def init_config_text(cluster: Cluster, node: Node, state: NodeStateData) -> str:
    """The kubeadm init config file: the documents as JSON (which is YAML), separated as YAML documents."""
    docs = kubeadm.init_configuration(cluster, node, address(node, state))
    return "---\n".join(json.dumps(d, indent=2, sort_keys=True) + "\n" for d in docs)


def manifest_path(name: str) -> str:
    """Where manifest ``name`` is written on the first control plane."""
    return f"{CONFIG_DIR}/{name}.json"


def manifests(cluster: Cluster) -> list[manifest_ops.Manifest]:
    """Every manifest applied from the first control plane, with its file path."""
    return [manifest_ops.Manifest(name, manifest_path(name), tuple(objs))
            for name, objs in applied.manifests(cluster).items()]


def package_wants(cluster: Cluster) -> list[PackageWant]:
    """kubelet, kubeadm, kubectl at the file's version, cri-tools and kubernetes-cni; all held."""
    version = cluster.kubernetes.version
    return [PackageWant(n, version, held=True) for n in VERSIONED] + [PackageWant(n, held=True) for n in COMPANIONS]


def prerequisite_files() -> list[FileWant]:
    """The module list loaded at boot and the sysctl file."""
    return [
        FileWant(MODULES_FILE, content="".join(f"{m}\n" for m in MODULES)),
        FileWant(SYSCTL_FILE, content="".join(f"{k} = {v}\n" for k, v in SYSCTLS.items())),
    ]


def control_plane_files(node: Node, cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """The first control plane's kubeadm config, manifests and Prometheus scrape file."""
    if not is_first(node, cluster):
        return []
    out = [FileWant(INIT_CONFIG, content=init_config_text(cluster, node, state), mode="0600", backup=False)]
    out += [FileWant(m.path, content=to_text(as_list(list(m.objects))), mode="0600", backup=False)
            for m in manifests(cluster)]
    scrape = cluster.kubernetes.monitoring.prometheus_scrape_file
    if scrape:
        out.append(FileWant(scrape, content=monitoring.scrape_config(cluster)))
    return out


def repository_files(cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """The pkgs.k8s.io repository files of the cluster's minor version."""
    return repos.repository_files(REPO_ID, cluster.mirrors.kubernetes, state, k8s_minor=cluster.kubernetes.minor)


def selinux_commands(state: NodeStateData) -> list[str]:
    """On dnf nodes whose SELinux is enforcing: permissive now and from the next boot on, as "Installing kubeadm"
    asks (packages.json ``kubernetes.selinux``, with its source); nothing once the file says otherwise."""
    entry = package_data()["kubernetes"]["selinux"]
    text = state.file(entry["file"]).content or ""
    if state.package_manager != "dnf" or entry["enforcing"] not in text.splitlines():
        return []
    return [entry["command"]]


def joined(node: Node, cluster: Cluster, state: NodeStateData) -> bool:
    """Whether kubeadm has made the node part of the cluster."""
    section = state.section("kubernetes")
    return bool(section.get("admin_conf") if is_first(node, cluster) else section.get("kubelet_conf"))


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Repository, packages, prerequisite files, kubelet, and on the first control plane its config files."""
    if not manages(cluster):
        return []
    found: list[Want] = [*repository_files(cluster, state), *package_wants(cluster), *prerequisite_files()]
    # kubelet restarts until kubeadm gives it a config, so it is only expected to run on a member.
    found.append(UnitWant("kubelet", enabled=True, running=True if joined(node, cluster, state) else None))
    found += control_plane_files(node, cluster, state)
    return found


def request(node: Node, cluster: Cluster) -> Request:
    """What the probe reads for this stage: the generic wants' items plus swap, modules, sysctls and the API."""
    if not manages(cluster):
        return Request()
    empty = NodeStateData({})
    req = request_for([*package_wants(cluster), *prerequisite_files(), UnitWant("kubelet")])
    req = req.merge(repos.repository_request(REPO_ID))
    selinux = package_data()["kubernetes"]["selinux"]["file"]
    req = req.merge(Request(files={prerequisites.FSTAB, ADMIN_CONF, KUBELET_CONF, selinux,
                                   *(f"/sys/module/{m}" for m in MODULES)},
                            contents={prerequisites.FSTAB, selinux}, sysctls=set(SYSCTLS),
                            sections={"system", "kubernetes"}))
    if is_first(node, cluster):
        cp_files: list[Want] = list(control_plane_files(node, cluster, empty))
        req = req.merge(request_for(cp_files))
    return req


def _api_differences(cluster: Cluster, api: dict) -> list[Difference]:
    out: list[Difference] = []
    nodes = api.get("nodes", {})
    want_version = f"v{cluster.kubernetes.version}"
    if api.get("cluster_version") != want_version:
        out.append(Difference("k8s-version", "control plane", want_version, api.get("cluster_version") or "unknown",
                              NAME))
    for node in cluster.nodes:
        current = nodes.get(node.name)
        if current is None:
            out.append(Difference("k8s-node", node.name, "registered", "absent", NAME))
            continue
        if current.get("kubelet_version") != want_version:
            out.append(Difference("kubelet-version", node.name, want_version, current.get("kubelet_version"), NAME))
        have = current.get("labels", {})
        for k, v in sorted(k8s_nodes.labels(node).items()):
            if have.get(k) != v:
                out.append(Difference("k8s-label", f"{node.name} {k}", v, have.get(k, "absent"), NAME))
        have_taints = {(t.get("key"), t.get("value"), t["effect"]) for t in current.get("taints", [])}
        for text, t in zip(node.taints, k8s_nodes.taint_objects(node.taints)):
            if (t["key"], t.get("value"), t["effect"]) not in have_taints:
                out.append(Difference("k8s-taint", f"{node.name} {text}", "present", "absent", NAME))
    if f"{cni.cni(cluster).namespace}/{cni.cni(cluster).daemonset}" not in api.get("daemonsets", []):
        out.append(Difference("cni", cluster.kubernetes.cni,
                              f"DaemonSet {cni.cni(cluster).namespace}/{cni.cni(cluster).daemonset}", "absent", NAME))
    rendered = set()
    for manifest in manifests(cluster):
        rendered |= {"/".join(key(o)) for o in manifest.objects}
        for ident in manifest_ops.stale_objects(manifest, api):
            present = ident in api.get("objects", {})
            out.append(Difference("k8s-object", ident, "as in the cluster file", "other content" if present
                                  else "absent", NAME))
    # Objects this project made that the file no longer describes (a team removed) are reported, not deleted:
    # deleting a namespace deletes the team's workloads, which only its owner may decide. The other GPU allocation
    # mode's objects are the exception: the deploy deletes them (see applied.other_allocator).
    replaced = {"/".join(key(o)) for o in applied.other_allocator(cluster)}
    for ident in sorted(set(api.get("objects", {})) - rendered):
        why = "absent (the other gpu_allocation mode's)" if ident in replaced else "absent (not in the cluster file)"
        out.append(Difference("k8s-object", ident, why, "present", NAME))
    return out


def extra_differences(node: Node, cluster: Cluster, state: NodeStateData) -> list[Difference]:
    """Swap, modules, sysctls, membership, a kubelet running a replaced binary; on the first control plane the API's
    nodes, CNI and objects."""
    if not manages(cluster):
        return []
    out: list[Difference] = []
    if state.system.get("swaps"):
        out.append(Difference("swap", "active", "off", ", ".join(state.system["swaps"]), NAME))
    entries = prerequisites.fstab_swap_lines(state.file(prerequisites.FSTAB).content or "")
    if entries:
        out.append(Difference("swap", prerequisites.FSTAB, "no active swap entries", "; ".join(entries), NAME))
    for module in MODULES:
        if not prerequisites.module_present(state, module):
            out.append(Difference("kernel-module", module, "loaded", "not loaded", NAME))
    if selinux_commands(state):
        out.append(Difference("selinux", package_data()["kubernetes"]["selinux"]["file"], "not enforcing", "enforcing",
                              NAME))
    running = state.system.get("sysctls", {})
    for name, value in SYSCTLS.items():
        if running.get(name) != value:
            out.append(Difference("sysctl", name, value, running.get(name), NAME))
    section = state.section("kubernetes")
    if section.get("kubelet_restart_due"):
        out.append(Difference("kubelet-restart", upgrade.steps()["kubelet_binary"], "the running kubelet's binary",
                              "replaced since kubelet started", NAME))
    if not joined(node, cluster, state):
        what = ADMIN_CONF if is_first(node, cluster) else KUBELET_CONF
        out.append(Difference("kubeadm", "init" if is_first(node, cluster) else "join", f"{what} present",
                              "absent", NAME))
    elif is_first(node, cluster):
        if section.get("api") is None:
            out.append(Difference("k8s-api", node.name, "answering", section.get("api_error") or "no answer", NAME))
        else:
            out.extend(_api_differences(cluster, section["api"]))
    return out


@deploy("Kubernetes")
def kubernetes() -> None:
    """Bring the node into the cluster and, from the first control plane, the cluster to the file.

    Example (after the runtime and toolkit stages in ``deploys/gpu_node.py``): ``kubernetes()``.
    """
    node = node_for(host)
    cluster = cluster_for(host)
    if not manages(cluster):
        return
    prerequisites.swap_off(name="Swap off, fstab swap entries commented out")
    selinux = Request(files={package_data()["kubernetes"]["selinux"]["file"]},
                      contents={package_data()["kubernetes"]["selinux"]["file"]})
    commands.guarded(name="SELinux permissive for kubelet", command=lambda s: " && ".join(selinux_commands(s)),
                     needed=lambda s: "; ".join(selinux_commands(s)) or None, request=selinux,
                     noop="SELinux not enforcing (or not a dnf node)")
    files.wants(name="Kernel modules at boot and Kubernetes sysctls", wants=prerequisite_files())
    prerequisites.modules_loaded(name="Kernel modules overlay and br_netfilter loaded", modules=MODULES)
    prerequisites.sysctls_applied(name="Kubernetes sysctls applied", path=SYSCTL_FILE, values=SYSCTLS)
    repos.apt_repository(name="Kubernetes repository", repo_id=REPO_ID, repo=cluster.mirrors.kubernetes,
                         k8s_minor=cluster.kubernetes.minor)
    version = cluster.kubernetes.version
    first = first_control_plane(cluster)
    # On members, kubeadm's upgrade order (operations.kubernetes.upgrade): kubeadm, the control plane, the other
    # members' configuration, then kubelet and kubectl; each step does nothing where the node is already there.
    upgrade.kubeadm_first(name=f"kubeadm {version} before the cluster's upgrade",
                          want=PackageWant("kubeadm", version, held=True), lock_timeout=node.packages.lock_timeout)
    if first is not None:
        upgrade.control_plane(name=f"Control plane at v{version} (kubeadm upgrade apply)", version=version,
                              first_control_plane=first.name)
        upgrade.node(name=f"Node configuration for v{version} (kubeadm upgrade node)", version=version,
                     first_control_plane=first.name)
    packages.wants(name=f"kubelet, kubeadm, kubectl {version} held", wants=package_wants(cluster),
                   lock_timeout=node.packages.lock_timeout)
    upgrade.kubelet_restarted(name="kubelet restarted when its binary was replaced")
    services.wants(name="kubelet enabled", wants=[UnitWant("kubelet", enabled=True, running=None)])
    if first is None:
        return
    # Every host calls the same operations up to here (each does nothing where it does not apply), so pyinfra
    # runs kubeadm init on the first control plane before any other host joins.
    files.wants(name="kubeadm init configuration", request=kubernetes_request(),
                wants=lambda state: [FileWant(INIT_CONFIG, content=init_config_text(cluster, node, state),
                                              mode="0600", backup=False)] if node.name == first.name else [])
    membership.init(name="kubeadm init", config_path=INIT_CONFIG, first_control_plane=first.name)
    membership.join(name="kubeadm join", cluster=cluster, node=node, control_plane=first.name)
    services.wants(name="kubelet running", wants=[UnitWant("kubelet", enabled=True, running=True)])
    if node.name != first.name:
        return
    source = cni.manifest_source(cluster)
    manifest_ops.cni_applied(name=f"CNI {cluster.kubernetes.cni}", source=source,
                             registry=cluster.mirrors.registry,
                             daemonset=f"{cni.cni(cluster).namespace}/{cni.cni(cluster).daemonset}", path=CNI_MANIFEST)
    others = [f for f in control_plane_files(node, cluster, NodeStateData({})) if f.path != INIT_CONFIG]
    if others:
        files.wants(name="Kubernetes manifests and scrape file", wants=others)
    for manifest in manifests(cluster):
        manifest_ops.manifest_applied(name=f"Manifest {manifest.name} applied", manifest=manifest)
    manifest_ops.objects_deleted(name="Other GPU allocation mode's objects removed",
                                 objects=tuple(applied.other_allocator(cluster)))
    labels.node_labels(name="Node labels and taints",
                       wanted={n.name: (k8s_nodes.labels(n), n.taints) for n in cluster.nodes})


def standalone() -> None:
    """:func:`kubernetes` outside the pipeline (``deploys/cluster.py``): the stage's whole probe request is
    registered first, so a converged node is read once per phase rather than once per operation.

    Called from deploy code for the current host (a plain function, so operation names keep the stage's name).
    Every command of the stage is bounded by the node's ``ssh.command_timeout`` (:func:`commands.deploy_timeout`).
    """
    node = node_for(host)
    cluster = cluster_for(host)
    target = commands.this_host()
    commands.use_request(target, request(node, cluster))
    # The pipeline's preflight refuses a version move kubeadm does not make; alone, the stage checks that itself.
    refused = kubernetes_findings(cluster, commands.current_state(target, request(node, cluster)))
    if refused:
        commands.fail(name="Kubernetes version", reason="; ".join(f.message for f in refused))
        return
    kubernetes(_timeout=commands.deploy_timeout(host))
