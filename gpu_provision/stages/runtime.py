"""Container runtime: Docker (Docker's repository or the distribution's ``docker.io``) or containerd alone.

Docker's ``daemon.json`` is merged (foreign keys kept, the old file backed up): systemd cgroups, log rotation and
the shared-memory default from the cluster file. containerd gets ``SystemdCgroup = true`` for runc: through a
drop-in on containerd 2.x, which merges imported files key by key; by editing ``config.toml`` on 1.x, where an
imported file replaces the whole CRI plugin section (containerd#5837). On 1.x ``config.toml`` also imports the
drop-in directory where the node's toolkit (1.18 and later) keeps the nvidia runtime in a drop-in that repeats the
CRI section (:mod:`gpu_provision.spec.toolkit`). The TOML is edited on the controller with tomlkit from the
probed text, so comments, order and every other setting stay as they are.
"""

from __future__ import annotations

from typing import Any

import tomlkit
from pyinfra import host
from pyinfra.api import deploy

from gpu_provision.desired import FileWant, PackageWant, UnitWant, Want
from gpu_provision.inventory import cluster_for, node_for
from gpu_provision.operations import commands, files, packages, repos, services
from gpu_provision.operations.commands import current_state
from gpu_provision.spec import toolkit as toolkit_mode
from gpu_provision.spec.model import Cluster, Node
from gpu_provision.spec.vendordata import package_data
from gpu_provision.state import NodeStateData, Request

NAME = "runtime"
DAEMON_JSON = "/etc/docker/daemon.json"
CONTAINERD_CONFIG = "/etc/containerd/config.toml"
CONTAINERD_CONFD = "/etc/containerd/conf.d"
CONTAINERD_DROPIN = f"{CONTAINERD_CONFD}/10-gpu-provision.toml"
CRI_V2 = "io.containerd.grpc.v1.cri"
CRI_V3_RUNTIME = "io.containerd.cri.v1.runtime"
DOCKER_UNIT = "docker.service"
CONTAINERD_UNIT = "containerd.service"


def daemon_keys(node: Node) -> dict[str, Any]:
    """The daemon.json keys this project owns."""
    rt = node.container_runtime
    keys: dict[str, Any] = {
        "exec-opts": ["native.cgroupdriver=systemd"],
        "log-driver": "json-file",
        "log-opts": {"max-size": rt.log_max_size, "max-file": str(rt.log_max_file)},
    }
    if rt.default_shm_size:
        keys["default-shm-size"] = rt.default_shm_size
    return keys


def containerd_major(state: NodeStateData) -> int | None:
    """containerd's major version from the probe (None when containerd is not installed yet)."""
    version = state.section("runtime").get("containerd_version")
    return int(version.split(".")[0]) if version else None


def _table(parent: Any, key: str) -> Any:
    if key not in parent:
        parent[key] = tomlkit.table(is_super_table=True)
    return parent[key]


def _drop_cri_from_disabled(doc: Any) -> None:
    disabled = doc.get("disabled_plugins")
    if disabled is not None and any(p in ("cri", CRI_V2) for p in disabled):
        doc["disabled_plugins"] = [p for p in disabled if p not in ("cri", CRI_V2)]


def _import_confd(doc: Any) -> None:
    pattern = f"{CONTAINERD_CONFD}/*.toml"
    imports = list(doc.get("imports", []))
    if pattern not in imports:
        doc["imports"] = [*imports, pattern]


def config_version(text: str | None) -> int:
    """The version of a containerd config file as containerd reads it (no ``version`` key: 1)."""
    try:
        version = tomlkit.parse(text or "").get("version")
    except Exception:  # a broken file reads as version 1: nothing is imported from it
        return 1
    return int(version) if version is not None else 1


def containerd_config(current: str | None, major: int, import_dropins: bool = False) -> str:
    """``config.toml`` with the CRI plugin enabled and runc on systemd cgroups (1.x) or the drop-in imported (2.x).

    + import_dropins: on 1.x, also import the drop-in directory (the toolkit's drop-in; never for a version 1
      file, which containerd reads without imports)

    Returns ``current`` unchanged, byte for byte, when it already has what is needed.
    """
    doc = tomlkit.parse(current or "")
    _drop_cri_from_disabled(doc)
    if major >= 2:
        if not (current or "").strip():
            doc["version"] = 3
        _import_confd(doc)
        return tomlkit.dumps(doc)
    version = doc.get("version")
    if version is None:
        # containerd 1.x reads a file without "version" as version 1, whose CRI plugin is called "cri".
        if "plugins" in doc:
            version = 1
        else:
            doc["version"] = version = 2
    cri = "cri" if version == 1 else CRI_V2
    runc = _table(_table(_table(_table(_table(doc, "plugins"), cri), "containerd"), "runtimes"), "runc")
    if "runtime_type" not in runc:
        runc["runtime_type"] = "io.containerd.runc.v2"
    options = _table(runc, "options")
    if options.get("SystemdCgroup") is not True:
        options["SystemdCgroup"] = True
    if import_dropins and version != 1:
        _import_confd(doc)
    return tomlkit.dumps(doc)


def containerd_dropin() -> str:
    """The containerd 2.x drop-in: runc with systemd cgroups (config version 3 plugin name)."""
    return (
        "# Managed by gpu-provision\n"
        "version = 3\n\n"
        f'[plugins."{CRI_V3_RUNTIME}".containerd.runtimes.runc]\n'
        '  runtime_type = "io.containerd.runc.v2"\n\n'
        f'[plugins."{CRI_V3_RUNTIME}".containerd.runtimes.runc.options]\n'
        "  SystemdCgroup = true\n"
    )


def runtimes(node: Node, cluster: Cluster) -> tuple[str, ...]:
    """The runtimes whose configuration this project owns on ``node``.

    kubelet talks CRI to containerd directly, also on a node whose other containers run through Docker: there
    containerd needs CRI enabled, systemd cgroups and the nvidia runtime as well.
    """
    kind = node.container_runtime.kind
    return ("docker", "containerd") if kind == "docker" and cluster.kubernetes.enabled else (kind,)


#: Docker's own packages, whose apt versions carry Docker's epoch and a distribution suffix.
DOCKER_VERSIONED = ("docker-ce", "docker-ce-cli")


def docker_package_version(version: str, state: NodeStateData) -> str:
    """Docker's version as its repository spells it on this node: ``5:27.3.1-1~ubuntu.24.04~noble`` (apt) or
    ``27.3.1`` (dnf, which takes a version without epoch); a full version string is kept as written."""
    if ":" in version or "-" in version:
        return version
    template = package_data()["runtime"]["docker"]["versions"].get(state.package_manager or "", "{version}")
    system = state.system
    return str(template).format(version=version, os=system.get("os_id", ""), os_version=system.get("os_version", ""),
                                codename=system.get("codename", ""))


def package_wants(node: Node, state: NodeStateData) -> list[PackageWant]:
    """Docker or containerd packages from the chosen source, held when a version is pinned."""
    rt = node.container_runtime
    # With Docker, container_runtime.version is Docker's; containerd underneath follows Docker's dependencies.
    pinned = {"containerd.io", "containerd"} if rt.kind == "containerd" else {"docker-ce", "docker-ce-cli", "docker.io"}
    out = []
    for name in package_data()["runtime"][rt.kind][rt.docker_source]:
        version = rt.version if name in pinned else None
        if version and name in DOCKER_VERSIONED:
            version = docker_package_version(version, state)
        out.append(PackageWant(name, version, held=rt.version is not None and name in pinned))
    return out


def containerd_major_or_default(state: NodeStateData) -> int:
    """containerd's major version, 1 before it is installed (the package's own config is edited once it exists:
    execution re-reads the node)."""
    major = containerd_major(state)
    return 1 if major is None else major


def desired_containerd_config(state: NodeStateData, import_dropins: bool = False) -> str:
    """``config.toml`` as this stage leaves it, from the probed file."""
    current = state.file(CONTAINERD_CONFIG)
    return containerd_config(current.content if current.exists else None, containerd_major_or_default(state),
                             import_dropins)


def containerd_files(state: NodeStateData, import_dropins: bool = False) -> list[FileWant]:
    """config.toml (and the drop-in on 2.x) as they should be, from the probed config.toml."""
    out = [FileWant(CONTAINERD_CONFIG, content=desired_containerd_config(state, import_dropins))]
    if containerd_major_or_default(state) >= 2:
        out.append(FileWant(CONTAINERD_DROPIN, content=containerd_dropin()))
    return out


def file_wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """daemon.json for Docker; containerd's config where containerd serves containers or kubelet."""
    owned = runtimes(node, cluster)
    out = [FileWant(DAEMON_JSON, merge="json", keys=daemon_keys(node))] if "docker" in owned else []
    return out + (containerd_files(state, imports_toolkit_dropin(node)) if "containerd" in owned else [])


def imports_toolkit_dropin(node: Node) -> bool:
    """Whether ``config.toml`` must import the toolkit's drop-in: a GPU node whose toolkit writes one."""
    return node.has_gpus and toolkit_mode.drop_in(node)


def unit_wants(node: Node) -> list[UnitWant]:
    """The runtime's services, restarted when their configuration changed in this run."""
    containerd = UnitWant(CONTAINERD_UNIT, restart_on=(CONTAINERD_CONFIG, CONTAINERD_DROPIN))
    if node.container_runtime.kind == "docker":
        return [containerd, UnitWant(DOCKER_UNIT, restart_on=(DAEMON_JSON,))]
    return [containerd]


def repository_wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[FileWant]:
    """Docker's repository files when packages come from Docker, plus the apt proxy file."""
    out: list[FileWant] = []
    if cluster.mirrors.package_proxy and state.package_manager == "apt":
        out.append(repos.proxy_want(cluster.mirrors.package_proxy))
    if node.container_runtime.docker_source == "docker":
        out.extend(repos.repository_files("docker", cluster.mirrors.docker, state, (),
                                          cluster.mirrors.package_proxy))
    return out


def wants(node: Node, cluster: Cluster, state: NodeStateData) -> list[Want]:
    """Everything the runtime stage converges on ``node``."""
    return [*repository_wants(node, cluster, state), *package_wants(node, state), *file_wants(node, cluster, state),
            *unit_wants(node)]


def request(node: Node, cluster: Cluster) -> Request:
    """Runtime packages, config files (with their text), units, and the runtime section (containerd version)."""
    rt = node.container_runtime
    paths = {DAEMON_JSON, CONTAINERD_CONFIG, CONTAINERD_DROPIN, repos.PROXY_FILE}
    return Request(
        packages=set(package_data()["runtime"][rt.kind][rt.docker_source]),
        files=paths | repos.repository_request("docker").files,
        contents={DAEMON_JSON, CONTAINERD_CONFIG, repos.PROXY_FILE},
        units={CONTAINERD_UNIT, DOCKER_UNIT},
        sections={"system", "runtime"},
    )


@deploy("Container runtime")
def runtime_stage() -> None:
    """Install Docker or containerd, merge their configuration, restart them only when it changed."""
    target = commands.this_host()
    node, cluster = node_for(host), cluster_for(host)
    req = request(node, cluster)
    state = current_state(target, req)
    if node.container_runtime.docker_source == "docker":
        repos.apt_repository(name="Docker repository", repo_id="docker", repo=cluster.mirrors.docker,
                             proxy=cluster.mirrors.package_proxy)
    packages.wants(name=f"{node.container_runtime.kind} packages", wants=package_wants(node, state),
                   lock_timeout=node.packages.lock_timeout)
    files.wants(name=f"{node.container_runtime.kind} configuration", wants=lambda s: file_wants(node, cluster, s),
                request=req)
    services.wants(name=f"{node.container_runtime.kind} running", wants=unit_wants(node))
