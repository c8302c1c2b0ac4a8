"""Checks of meaning that a JSON Schema cannot express.

Each check reads the resolved model and records problems in the loader's context, located at the line where the
offending value was written (a node's own entry, its group, or the defaults). Checks only report: values derived
from valid settings (MIG placements, the device plugin's MIG strategy) are filled in afterwards by
:func:`gpu_provision.spec.resolve.derive`.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
from collections import Counter

from gpu_provision.errors import MigLayoutError
from gpu_provision.node.versions import version_key
from gpu_provision.spec import catalog, dra, keyfile, mig, namespaces, nodepaths
from gpu_provision.spec.context import Context
from gpu_provision.spec.defaults import KUBERNETES_MINORS
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.resolve import mig_strategy_for, origin
from gpu_provision.spec.schema import trap
from gpu_provision.spec.settings import ADDRESS
from gpu_provision.spec.yamlsafe import Path


def check(cluster: Cluster, ctx: Context) -> None:
    """Run every check of meaning on the resolved ``cluster``, recording each problem in ``ctx``."""
    _unique_nodes(cluster, ctx)
    _groups_exist(ctx)
    clean: set[int] = set()
    for index, node in enumerate(cluster.nodes):
        if ctx.copies.get(index, -1) in clean:
            continue  # every setting is the same object as a node's whose checks found nothing (ctx.copies)
        problems = len(ctx.problems)
        model = _gpu_model(ctx, index, node)
        _driver(ctx, index, node, model)
        _mig(ctx, index, node, model)
        _sharing(ctx, index, node)
        _vgpu(ctx, index, node, model)
        _gpu_settings_without_model(ctx, index, node)
        _vgpu_driver(ctx, index, node)
        _permissions(ctx, index, node)
        _yaml_numbers(ctx, index, node)
        if len(ctx.problems) == problems:
            clean.add(index)
    _kubernetes(cluster, ctx)
    dra.check(cluster, ctx)
    _mirror_keys(cluster, ctx)
    _paths(cluster, ctx)


def _paths(cluster: Cluster, ctx: Context) -> None:
    """Files written on nodes stay in their documented directories; files read on the controller are regular
    files within the size limit (:mod:`gpu_provision.spec.nodepaths`)."""
    k8s = cluster.kubernetes
    scrape = k8s.monitoring.prometheus_scrape_file
    if scrape is not None:
        problem = nodepaths.node_path_problem("prometheus_scrape_file", scrape)
        if problem:
            ctx.add(("cluster", "kubernetes", "monitoring", "prometheus_scrape_file"), problem)
    manifest = k8s.cni_manifest
    if manifest and not nodepaths.is_url(manifest):
        path = ctx.base_dir / os.path.expanduser(manifest)
        where: Path = ("cluster", "kubernetes", "cni_manifest")
        try:
            nodepaths.controller_file(path, "CNI manifest")
            problem = nodepaths.outside_problem(str(path), ctx.base_dir, list(cluster.controller_dirs))
        except ValueError as exc:
            problem = str(exc)
        if problem:
            ctx.add(where, problem)
    _ssh_files(cluster, ctx)


def _ssh_files(cluster: Cluster, ctx: Context) -> None:
    """SSH key and known_hosts files come from the allowed directories; one that exists is a regular file within the
    size limit. A missing one is left to the SSH connection to report: a test rig writes its key when it starts."""
    given: list[tuple[Path, str | None]] = [(("cluster", "ssh", key), getattr(cluster.ssh, key))
                                     for key in ("key", "known_hosts") if key in (ctx.document["cluster"].get("ssh") or {})]
    # A node's key may come from its own entry, its group or the defaults; each place is checked once.
    given += [(origin(ctx.provenance.get(i, {}), i, ("ssh", "key")), node.ssh.key)
              for i, node in enumerate(cluster.nodes) if node.ssh.key != cluster.ssh.key]
    for where, path in dict(given).items():
        if not path:
            continue
        problem = nodepaths.outside_problem(path, ctx.base_dir, list(cluster.controller_dirs))
        if problem is None and os.path.lexists(path):
            try:
                nodepaths.controller_file(path, "SSH file")
            except ValueError as exc:
                problem = str(exc)
        if problem:
            ctx.add(where, problem)


def _mirror_keys(cluster: Cluster, ctx: Context) -> None:
    """A mirror names its signing key once: a URL the node fetches, or a file on the controller that must hold a key
    (read now, so a wrong path stops before any node is touched)."""
    mirrors = ctx.document["cluster"].get("mirrors") or {}
    for name in ("cuda", "container_toolkit", "docker", "kubernetes"):
        raw = mirrors.get(name)
        if not isinstance(raw, dict):
            continue
        where = ("cluster", "mirrors", name)
        if "key_url" in raw and "key_file" in raw:
            ctx.add((*where, "key_file"), "give key_url or key_file, not both", key=True)
        elif "key_url" not in raw and "key_file" not in raw:
            ctx.add(where, "missing required key 'key_url' (or key_file, the key as a file on the controller)")
        repo = getattr(cluster.mirrors, name)
        if "key_file" in raw and repo.key_file:
            try:
                keyfile.read_key(repo.key_file)
                problem = nodepaths.outside_problem(repo.key_file, ctx.base_dir, list(cluster.controller_dirs))
            except keyfile.KeyFileError as exc:
                problem = str(exc)
            if problem:
                ctx.add((*where, "key_file"), problem)


#: A node address's one form (see settings.ADDRESS), matched as a whole value.
_ADDRESS = re.compile(ADDRESS)
#: An IPv4 address written as ``ipaddress`` writes it (four decimal octets, no leading zeros): its own canonical
#: form, so the common case skips the parse.
_CANONICAL_IPV4 = re.compile(r"(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)")


def canonical_address(address: str) -> str | None:
    """``address`` in one spelling per host (``::1`` for ``0:0::1``, host names in lower case), None if not valid.

    A node address is handed to SSH and written into node configuration: an IP literal or an RFC 1123 host name only,
    so whitespace, control characters or a leading '-' (read as an option) never reach a command line. A name that
    inet_aton(3) would read as an IPv4 address ('10' is 0.0.0.10, '0x7f.1' is 127.0.0.1) but that is no dotted quad
    is a malformed address, not a host name: SSH or a resolver would connect somewhere the file does not name.
    """
    if not _ADDRESS.fullmatch(address):
        return None
    if _CANONICAL_IPV4.fullmatch(address):
        return address
    try:
        return ipaddress.ip_address(address).compressed
    except ValueError:
        pass
    if ":" in address or _inet_aton_reads(address):
        return None
    return address.lower().rstrip(".")


def _inet_aton_reads(name: str) -> bool:
    try:
        socket.inet_aton(name)
    except (OSError, ValueError):
        return False
    return True


def _unique_nodes(cluster: Cluster, ctx: Context) -> None:
    addresses = [canonical_address(node.address) for node in cluster.nodes]
    for index, node in enumerate(cluster.nodes):
        if addresses[index] is None:
            ctx.add(("nodes", index, "address"), f"{node.address!r} is not an IP address or a host name (allowed: an "
                                                 "IPv4 or IPv6 address, or an RFC 1123 host name such as 'gpu-01.lab' "
                                                 "that does not look like an IPv4 address)")
    for attr, values in (("name", [node.name for node in cluster.nodes]), ("address", addresses)):
        counts = Counter(values)
        first: dict[str, int] = {}
        for index, node in enumerate(cluster.nodes):
            value = values[index]
            if value is not None and counts[value] > 1:
                if value in first:
                    ctx.add(("nodes", index, attr), f"duplicate node {attr} '{getattr(node, attr)}' (also node "
                                                    f"{first[value]}, line {cluster.nodes[first[value]].line})")
                else:
                    first[value] = index


def _groups_exist(ctx: Context) -> None:
    groups = ctx.document.get("groups") or {}
    for index, node in enumerate(ctx.document["nodes"]):
        group = node.get("group")
        if group is not None and group not in groups:
            ctx.add(("nodes", index, "group"), f"unknown group '{group}' (allowed: {', '.join(groups) or 'none defined'})")


def _gpu_model(ctx: Context, index: int, node: Node) -> catalog.GpuModel | None:
    if not node.gpus.model:
        if node.gpus.count:
            ctx.add_node(index, ("gpus", "count"), "gpus.count is given without gpus.model")
        return None
    model = catalog.model(node.gpus.model)
    if model is None:
        ctx.add_node(index, ("gpus", "model"), f"unknown GPU model '{node.gpus.model}' "
                                               f"(allowed: {', '.join(catalog.models())})")
    elif node.gpus.count == 0:
        ctx.add_node(index, ("gpus",), "gpus.count is required when gpus.model is given (allowed: 1..16)")
    return model


def _driver(ctx: Context, index: int, node: Node, model: catalog.GpuModel | None) -> None:
    driver = node.driver
    pair = {"signing_key": driver.signing_key, "signing_certificate": driver.signing_certificate}
    for name, value in pair.items():
        other = next(n for n in pair if n != name)
        if value and not pair[other]:
            ctx.add_node(index, ("driver", name), f"driver.{name} needs driver.{other} beside it (allowed: both "
                                                  "or neither)")
    if model is None or node.driver.install_method == "preinstalled":
        return
    needed = model.mig.min_driver if model.mig and node.mig.enabled else model.min_driver
    what = "MIG on" if model.mig and node.mig.enabled else model.key
    if driver.version:
        if version_key(driver.version) < version_key(needed):
            ctx.add_node(index, ("driver", "version"), f"driver {driver.version} does not support {what} "
                                                        f"(allowed: {needed} or newer)")
    elif version_key(driver.spell("branch"), 1) < version_key(needed, 1):
        ctx.add_node(index, ("driver", "branch"), f"driver branch {driver.spell('branch')} does not support {what} "
                                                   f"(allowed: branch {needed.split('.')[0]} or newer)")
    if driver.kernel_modules == "proprietary" and model.open_modules_required:
        ctx.add_node(index, ("driver", "kernel_modules"), f"{model.key} needs the open kernel modules "
                                                           "(allowed: open, auto)")
    if driver.kernel_modules == "open" and not model.open_modules_supported:
        ctx.add_node(index, ("driver", "kernel_modules"), f"{model.key} ({model.architecture}) predates the open "
                                                           "kernel modules (allowed: proprietary, auto)")


def _mig(ctx: Context, index: int, node: Node, model: catalog.GpuModel | None) -> None:
    """Checked once per set of MIG settings (nodes of one group share it) and what else the check reads; a set that
    has a problem is checked again on every node, so each node's problem is located at its own lines."""
    key = ("mig-check", id(node.mig), id(model), node.device_plugin.mig_strategy, node.sharing.strategy,
           _explicit(ctx, index, ("device_plugin", "mig_strategy")))
    if key in ctx.parts:
        return
    problems = len(ctx.problems)
    _mig_layouts(ctx, index, node, model)
    if len(ctx.problems) == problems:
        ctx.parts[key] = (node.mig, None)


def _mig_layouts(ctx: Context, index: int, node: Node, model: catalog.GpuModel | None) -> None:
    if not node.mig.layouts:
        if node.device_plugin.mig_strategy != "none":
            ctx.add_node(index, ("device_plugin", "mig_strategy"),
                         f"device_plugin.mig_strategy {node.device_plugin.mig_strategy} needs a MIG layout (allowed: none)")
        return
    if model is None:
        if node.gpus.model is None:
            ctx.add_node(index, ("mig",), "a MIG layout needs gpus.model and gpus.count")
        return
    if model.mig is None:
        if node.mig.enabled:
            capable = ", ".join(k for k, m in catalog.models().items() if m.mig)
            ctx.add_node(index, ("mig",), f"{model.key} does not support MIG (MIG-capable: {capable})")
        return
    for gpu, layout in sorted(node.mig.layouts.items()):
        rel = ("mig", "gpus", str(gpu), "layout") if _per_gpu(ctx, index, gpu) else ("mig", "layout")
        if layout.config_name:
            rel = ("mig", "gpus", str(gpu), "config") if _per_gpu(ctx, index, gpu) else ("mig", "config")
        if not layout.enabled:
            if layout.profiles:
                ctx.add_node(index, rel, "MIG devices given while MIG is disabled")
            continue
        try:
            mig.plan(model.mig, layout.profiles)
        except MigLayoutError as exc:
            ctx.add_node(index, rel, f"GPU {gpu} ({model.key}): {exc}")
    if not node.mig.enabled:
        return
    strategy = node.device_plugin.mig_strategy
    if strategy == "none" and _explicit(ctx, index, ("device_plugin", "mig_strategy")):
        ctx.add_node(index, ("device_plugin", "mig_strategy"),
                     "device_plugin.mig_strategy none advertises no MIG devices on a node with MIG on "
                     "(allowed: single, mixed)")
    elif strategy == "single" and mig_strategy_for(node.mig.layouts) != "single":
        ctx.add_node(index, ("device_plugin", "mig_strategy"),
                     "device_plugin.mig_strategy single needs every GPU to have the same layout of one profile "
                     "(allowed: mixed)")
    if node.sharing.strategy == "mps":
        ctx.add_node(index, ("sharing", "strategy"), "MPS sharing cannot be combined with MIG "
                                                     "(allowed with MIG: none, time-slicing)")


def _per_gpu(ctx: Context, index: int, gpu: int) -> bool:
    return ("mig", "gpus", str(gpu)) in ctx.provenance.get(index, {})


def _explicit(ctx: Context, index: int, rel: tuple[str, ...]) -> bool:
    return rel in ctx.provenance.get(index, {})


def _sharing(ctx: Context, index: int, node: Node) -> None:
    if node.sharing.strategy != "none" and node.sharing.replicas < 2:
        ctx.add_node(index, ("sharing", "replicas"), f"{node.sharing.strategy} needs replicas of at least 2 "
                                                     f"(allowed: 2..64)")
    if node.sharing.strategy != "none" and not node.has_gpus:
        ctx.add_node(index, ("sharing", "strategy"), "GPU sharing on a node without GPUs (set gpus.model and gpus.count)")


def _vgpu(ctx: Context, index: int, node: Node, model: catalog.GpuModel | None) -> None:
    if not node.vgpu or model is None:
        return
    for gpu, vgpu_type in sorted(node.vgpu.items()):
        rel = ("vgpu", "gpus", str(gpu)) if ("vgpu", "gpus", str(gpu)) in ctx.provenance.get(index, {}) else ("vgpu", "type")
        if gpu >= node.gpus.count:
            ctx.add_node(index, rel, f"GPU index {gpu} does not exist: the node has {node.gpus.count} GPU(s)")
        elif not model.vgpu_types:
            ctx.add_node(index, rel, f"no vGPU types are known for {model.key}")
        elif vgpu_type not in model.vgpu_types:
            ctx.add_node(index, rel, f"'{vgpu_type}' is not a vGPU type of {model.key} "
                                     f"(allowed: {', '.join(model.vgpu_types)})")


#: Settings that mean something only for a node's GPUs (sharing's own check is :func:`_sharing`).
_GPU_SETTINGS = ("mig", "vgpu")
_NOT_GPU_SETTINGS = (("mig", "allow_drain"), ("mig", "allow_module_unload"))


def _gpu_settings_without_model(ctx: Context, index: int, node: Node) -> None:
    # A MIG layout or vGPU type on a node naming no GPU model would be dropped without a word (the node has no GPU
    # to give it to). Inherited from defaults they are meant for the GPU nodes and pass; sharing has its own check
    # (:func:`_sharing`).
    if node.gpus.model:
        return
    provenance = ctx.provenance.get(index, {})
    for rel in sorted(provenance):
        if rel[0] in _GPU_SETTINGS and rel[:2] not in _NOT_GPU_SETTINGS and provenance[rel][0] != "defaults":
            ctx.add_node(index, rel[:2], f"{'.'.join(map(str, rel[:2]))} is given on a node that names no GPU model "
                                          "(allowed: set gpus.model and gpus.count, or leave it out)")
            return


def _vgpu_driver(ctx: Context, index: int, node: Node) -> None:
    # vGPU types exist only under NVIDIA's vGPU Manager (host driver), sold through the NVIDIA Licensing Portal; the
    # repositories' data-center driver creates no vGPU types, so the deploy can only check a driver installed already.
    if not node.vgpu or node.driver.install_method == "preinstalled":
        return
    rel = ("driver", "install_method") if _explicit(ctx, index, ("driver", "install_method")) else ("vgpu",)
    ctx.add_node(index, rel, f"a vGPU host needs NVIDIA's vGPU Manager, not the data-center driver that "
                             f"driver.install_method: {node.driver.install_method} installs: install the vGPU Manager "
                             "from the NVIDIA Licensing Portal and set driver.install_method: preinstalled "
                             "(allowed: preinstalled)")


def _yaml_numbers(ctx: Context, index: int, node: Node) -> None:
    # These settings take a number too, so the schema cannot catch YAML 1.1 reading 12.10 as 12.1 or 0x244 as 580.
    for rel, value in ((("driver", "branch"), node.driver.branch), (("driver", "cuda_min"), node.driver.cuda_min)):
        path = origin(ctx.provenance.get(index, {}), index, rel)
        written = ctx.positions.written(path)
        if value is not None and written and ctx.positions.plain(path) and written != value:
            ctx.add(path, trap(written, f"the number {value}"))


def _permissions(ctx: Context, index: int, node: Node) -> None:
    mode = node.permissions.mode
    if int(mode, 8) > 0o777:
        path = origin(ctx.provenance.get(index, {}), index, ("permissions", "mode"))
        written = ctx.positions.written(path) or mode
        quoted = f"0{written}" if re.fullmatch("[0-7]{3}", written) else "0660"
        ctx.add(path, f"{written} is not a file mode: YAML reads it as the decimal number {written}, octal {mode} "
                      f"(quote it: '{quoted}')")
        return
    if node.permissions.group is None and not int(mode, 8) & 0o006 and (int(mode, 8) & 0o060):
        ctx.add_node(index, ("permissions", "mode"), f"mode {mode} grants a group but permissions.group is not set")
    if node.permissions.users and node.permissions.group is None:
        ctx.add_node(index, ("permissions", "users"), "permissions.users are given but permissions.group is not set")


def _network(ctx: Context, key: str, cidr: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    """``cidr`` as a network, or None after a located problem (``999.0.0.0/8`` passes the schema's pattern)."""
    try:
        return ipaddress.ip_network(cidr, strict=False)
    except ValueError as exc:
        ctx.add(("cluster", "kubernetes", key), f"'{cidr}' is not a valid CIDR: {exc} "
                                               "(allowed: an IPv4 or IPv6 CIDR such as '10.244.0.0/16')")
        return None


def _kubernetes(cluster: Cluster, ctx: Context) -> None:
    k8s = cluster.kubernetes
    if not k8s.enabled:
        return
    if not cluster.control_planes:
        ctx.add(("nodes",), "Kubernetes is enabled but no node has role control-plane "
                            "(allowed: set role: control-plane on one node, or cluster.kubernetes.enabled: false)")
    if k8s.minor not in KUBERNETES_MINORS:
        ctx.add(("cluster", "kubernetes", "version"), f"Kubernetes {k8s.version} is not supported "
                                                      f"(allowed: {', '.join(v + '.x' for v in KUBERNETES_MINORS)})")
    pods, services = _network(ctx, "pod_cidr", k8s.pod_cidr), _network(ctx, "service_cidr", k8s.service_cidr)
    if pods and services and pods.version != services.version:
        ctx.add(("cluster", "kubernetes", "service_cidr"), f"service CIDR {services} is IPv{services.version}, the "
                                                           f"pod CIDR {pods} IPv{pods.version} (allowed: one address "
                                                           "family; dual-stack is not supported)")
    elif pods and services and pods.overlaps(services):
        ctx.add(("cluster", "kubernetes", "service_cidr"), f"service CIDR {services} overlaps the pod CIDR {pods}")
    problem = _endpoint_problem(k8s.control_plane_endpoint) if k8s.control_plane_endpoint else None
    if problem:
        ctx.add(("cluster", "kubernetes", "control_plane_endpoint"), problem)
    if pods:
        _address_families(cluster, ctx, pods.version)
    for index, node in enumerate(cluster.nodes):
        version = node.container_runtime.version
        # Kubernetes 1.26 removed CRI v1alpha2; containerd 1.6 is the oldest release serving CRI v1.
        if version and version_key(version) < version_key("1.6"):
            ctx.add_node(index, ("container_runtime", "version"),
                         f"containerd {version} cannot serve Kubernetes {k8s.version} (allowed: 1.6 or newer)")
        # containerd 2.x is supported from Kubernetes 1.30 (kubelet drops its v1alpha2 fallback there).
        if node.container_runtime.kind == "containerd" and version and version_key(version) >= version_key("2") \
                and version_key(k8s.version) < version_key("1.30"):
            ctx.add_node(index, ("container_runtime", "version"),
                         f"containerd {version} needs Kubernetes 1.30 or newer (have {k8s.version})")
    names = Counter(t.name for t in k8s.teams)
    profiles = {p.name for m in catalog.models().values() if m.mig for p in m.mig.profiles}
    for t_index, team in enumerate(k8s.teams):
        if names[team.name] > 1:
            ctx.add(("cluster", "kubernetes", "teams", t_index, "name"), f"duplicate team name '{team.name}'")
        _team_namespace(ctx, t_index, team.namespace)
        _team_subjects(ctx, t_index)
        for profile in team.mig:
            if profile not in profiles:
                ctx.add(("cluster", "kubernetes", "teams", t_index, "mig", profile),
                        f"'{profile}' is not a MIG profile of any known GPU")


def _team_namespace(ctx: Context, t_index: int, namespace: str) -> None:
    # A team's Role, quota, LimitRange and Pod Security labels must not land where Kubernetes or this project runs.
    why = namespaces.reserved(namespace)
    if why is None:
        return
    written = "namespace" in ctx.document["cluster"]["kubernetes"]["teams"][t_index]
    where = "namespace" if written else "name"
    what = f"team namespace '{namespace}'" + ("" if written else " (the team name)")
    ctx.add(("cluster", "kubernetes", "teams", t_index, where),
            f"{what} cannot hold a team: {why} (allowed: {namespaces.ALLOWED})")


def _ip_version(host: str) -> int | None:
    try:
        return ipaddress.ip_address(host.strip("[]")).version
    except ValueError:
        return None


def _endpoint_host(endpoint: str) -> str:
    """The host of ``host``, ``host:port``, ``v6`` or ``[v6]:port``."""
    if endpoint.startswith("["):
        return endpoint[1:].partition("]")[0]
    return endpoint if _ip_version(endpoint) == 6 else endpoint.rpartition(":")[0] or endpoint


def _endpoint_problem(endpoint: str) -> str | None:
    """What is wrong with the endpoint's host or port (the schema only checked their form), else None."""
    host = _endpoint_host(endpoint)
    port = endpoint.rpartition("]:")[2] if endpoint.startswith("[") else "" if _ip_version(endpoint) == 6 \
        else endpoint.rpartition(":")[2] if ":" in endpoint else ""
    if canonical_address(host) is None:
        return (f"'{endpoint}' is not an API server endpoint: '{host}' is not an IP address or a host name (allowed: "
                "an IPv4 or IPv6 address, or an RFC 1123 host name that does not look like an IPv4 address)")
    if port and not 1 <= int(port) <= 65535:
        return f"'{endpoint}' is not an API server endpoint: port {port} is out of range (allowed: 1 to 65535)"
    return None


def _address_families(cluster: Cluster, ctx: Context, family: int) -> None:
    # kubeadm's single-stack cluster takes one address family for the API endpoint, the addresses control planes
    # advertise and the pod and service subnets; dual-stack (two subnets each) cannot be stated.
    want = f"an IPv{family} address like the pod and service CIDRs (dual-stack is not supported)"
    endpoint = cluster.kubernetes.control_plane_endpoint
    if endpoint and not _endpoint_problem(endpoint) and _ip_version(_endpoint_host(endpoint)) not in (None, family):
        ctx.add(("cluster", "kubernetes", "control_plane_endpoint"),
                f"'{endpoint}' is an IPv{_ip_version(_endpoint_host(endpoint))} endpoint in an IPv{family} cluster "
                f"(allowed: {want}, or a host name)")
    for index, node in enumerate(cluster.nodes):
        version = _ip_version(node.address)
        if node.role == "control-plane" and version not in (None, family) \
                and not ipaddress.ip_address(node.address).is_loopback:
            ctx.add(("nodes", index, "address"), f"control plane {node.name} would advertise the IPv{version} "
                                                 f"address {node.address} in an IPv{family} cluster (allowed: {want})")


#: Subjects no team may be bound as: every user of the cluster, its administrators, the nodes and controllers.
_RESERVED_SUBJECT = "system:"


def _team_subjects(ctx: Context, t_index: int) -> None:
    # A team's RoleBinding grants its namespace: a 'system:' group (system:authenticated, system:masters) or user
    # would hand it to everyone or to the cluster's own components, and another namespace's service account
    # (system:serviceaccount:NS:NAME) to a workload outside the team. Wildcards ('*') are refused by the schema.
    raw = ctx.document["cluster"]["kubernetes"]["teams"][t_index]
    for key in ("users", "groups"):
        for s_index, name in enumerate(raw.get(key) or ()):
            where = ("cluster", "kubernetes", "teams", t_index, key, s_index)
            if name.lower().startswith(_RESERVED_SUBJECT):
                hint = "; a service account of the team's namespace goes in service_accounts" if key == "users" else ""
                ctx.add(where, f"'{name}' is a Kubernetes system {key[:-1]}, which a team cannot be bound as "
                               f"(allowed: the team's own {key}{hint})")
