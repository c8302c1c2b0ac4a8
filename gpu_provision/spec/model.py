"""The typed cluster model: what the rest of the code reads instead of raw dicts.

Every class is a frozen dataclass built once by :func:`gpu_provision.spec.loader.load_cluster` from a validated
cluster file, after node settings have been resolved (node over group over defaults). Field names follow the
file's keys; the schema in ``schemas/cluster.v1.schema.json`` documents each of them once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Role = Literal["control-plane", "worker"]
KernelModules = Literal["open", "proprietary", "auto"]
InstallMethod = Literal["package", "preinstalled"]
RuntimeKind = Literal["docker", "containerd"]
SharingStrategy = Literal["none", "time-slicing", "mps"]
MigStrategy = Literal["none", "single", "mixed"]


@dataclass(frozen=True)
class Repository:
    """A package repository (apt or yum) and the key that signs it."""

    url: str
    key_url: str
    #: apt "suite" (``/`` for flat repositories such as NVIDIA's and pkgs.k8s.io).
    suite: str = "/"
    components: tuple[str, ...] = ()


@dataclass(frozen=True)
class Mirrors:
    """Every download location, overridable for air-gapped sites."""

    cuda: Repository
    container_toolkit: Repository
    docker: Repository
    kubernetes: Repository
    #: Registry host that replaces the registry part of every container image (None keeps upstream registries).
    registry: str | None = None
    #: Proxy for apt/dnf on the nodes (``Acquire::http::Proxy``), if any.
    package_proxy: str | None = None


@dataclass(frozen=True)
class SshSettings:
    """How the controller reaches nodes."""

    user: str = "root"
    port: int = 22
    key: str | None = None
    known_hosts: str | None = None
    strict_host_key_checking: bool = True
    connect_timeout: int = 10


@dataclass(frozen=True)
class Team:
    """A team's namespace and its GPU quota."""

    name: str
    namespace: str
    gpus: int = 0
    mig: dict[str, int] = field(default_factory=dict)
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


@dataclass(frozen=True)
class Monitoring:
    """DCGM exporter and the Prometheus scrape file."""

    dcgm_exporter: bool = True
    dcgm_exporter_image: str = "nvcr.io/nvidia/k8s/dcgm-exporter:4.2.3-4.1.3-ubuntu22.04"
    prometheus_scrape_file: str | None = None


@dataclass(frozen=True)
class Kubernetes:
    """The Kubernetes cluster the GPU nodes join."""

    enabled: bool = True
    version: str = "1.31.4"
    pod_cidr: str = "10.244.0.0/16"
    service_cidr: str = "10.96.0.0/12"
    control_plane_endpoint: str | None = None
    cni: Literal["flannel", "calico", "cilium"] = "flannel"
    cni_manifest: str | None = None
    device_plugin_image: str = "nvcr.io/nvidia/k8s-device-plugin:v0.17.2"
    teams: tuple[Team, ...] = ()
    monitoring: Monitoring = field(default_factory=Monitoring)

    @property
    def minor(self) -> str:
        """``1.31`` for ``1.31.4``: the pkgs.k8s.io repository a version lives in."""
        return ".".join(self.version.split(".")[:2])


@dataclass(frozen=True)
class Driver:
    """NVIDIA driver: which one, how it is installed, and whether the node may reboot for it."""

    #: Branch such as ``"580"``; the newest version of that branch is installed and held.
    branch: str | None = "580"
    #: Exact version such as ``"580.159.04"``; overrides ``branch`` when given.
    version: str | None = None
    kernel_modules: KernelModules = "auto"
    install_method: InstallMethod = "package"
    reboot: Literal["allowed", "never"] = "never"
    #: Minimum CUDA version the driver must support (``nvidia-smi`` "CUDA Version").
    cuda_min: str | None = None
    fabric_manager: bool | None = None
    persistenced: bool = True

    @property
    def pinned_branch(self) -> str:
        """The branch the pin applies to (from ``version`` when an exact version is given)."""
        if self.version:
            return self.version.split(".")[0]
        return str(self.branch)


@dataclass(frozen=True)
class ContainerRuntime:
    """Docker (with containerd underneath) or containerd alone."""

    kind: RuntimeKind = "containerd"
    #: ``docker``: Docker's own repository; ``distro``: the distribution's ``docker.io`` package.
    docker_source: Literal["docker", "distro"] = "docker"
    default_shm_size: str | None = None
    log_max_size: str = "100m"
    log_max_file: int = 3
    version: str | None = None


@dataclass(frozen=True)
class Toolkit:
    """nvidia-container-toolkit."""

    version: str = "1.17.8"
    cdi: bool = True
    default_runtime: bool = True


@dataclass(frozen=True)
class Permissions:
    """Who may open the GPU device files."""

    group: str | None = None
    #: Octal mode of ``/dev/nvidia*`` as a string, e.g. ``"0660"``.
    mode: str = "0666"
    users: tuple[str, ...] = ()

    @property
    def mode_int(self) -> int:
        """The mode as an integer (``0o660``)."""
        return int(self.mode, 8)


@dataclass(frozen=True)
class GpuExpectation:
    """The GPUs a node is expected to have."""

    model: str | None = None
    count: int = 0


@dataclass(frozen=True)
class MigPlacement:
    """One GPU instance at a concrete placement (memory slices ``start .. start+size-1``)."""

    profile: str
    start: int
    size: int


@dataclass(frozen=True)
class MigLayout:
    """The MIG layout of one GPU: ``None`` profiles means MIG disabled."""

    #: Profile name -> instance count, e.g. ``{"1g.18gb": 2, "3g.71gb": 1}``; empty with MIG enabled and no instances.
    profiles: dict[str, int]
    enabled: bool = True
    #: Concrete placements planned from the model's placement table (filled by the loader).
    placements: tuple[MigPlacement, ...] = ()
    #: Name of the mig-parted config this layout came from, if any.
    config_name: str | None = None


@dataclass(frozen=True)
class Mig:
    """MIG settings of a node: one layout per GPU index."""

    layouts: dict[int, MigLayout] = field(default_factory=dict)
    #: Stop user processes holding a GPU instead of refusing the change.
    allow_drain: bool = False

    @property
    def enabled(self) -> bool:
        """Whether any GPU of the node has MIG on."""
        return any(layout.enabled for layout in self.layouts.values())


@dataclass(frozen=True)
class Sharing:
    """GPU sharing as the device plugin offers it."""

    strategy: SharingStrategy = "none"
    replicas: int = 1
    rename_by_default: bool = False


@dataclass(frozen=True)
class DevicePlugin:
    """NVIDIA device plugin settings for the node."""

    mig_strategy: MigStrategy = "none"


@dataclass(frozen=True)
class Verify:
    """What the verification phase demands beyond the stack settings."""

    bandwidth_min_ratio: float = 0.85
    container_image: str | None = None


@dataclass(frozen=True)
class Node:
    """A node with every setting resolved (node over group over defaults)."""

    name: str
    address: str
    role: Role = "worker"
    group: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    ssh: SshSettings = field(default_factory=SshSettings)
    driver: Driver = field(default_factory=Driver)
    container_runtime: ContainerRuntime = field(default_factory=ContainerRuntime)
    toolkit: Toolkit = field(default_factory=Toolkit)
    permissions: Permissions = field(default_factory=Permissions)
    gpus: GpuExpectation = field(default_factory=GpuExpectation)
    mig: Mig = field(default_factory=Mig)
    #: vGPU type name per GPU index (``"NVIDIA H200X-141C"``) on a vGPU host.
    vgpu: dict[int, str] = field(default_factory=dict)
    sharing: Sharing = field(default_factory=Sharing)
    device_plugin: DevicePlugin = field(default_factory=DevicePlugin)
    verify: Verify = field(default_factory=Verify)
    #: Line of the node's entry in the cluster file, for messages.
    line: int = 0

    @property
    def has_gpus(self) -> bool:
        """Whether the node is expected to carry NVIDIA GPUs."""
        return bool(self.gpus.model) and self.gpus.count > 0


@dataclass(frozen=True)
class Cluster:
    """A whole validated cluster file."""

    name: str
    source: str
    kubernetes: Kubernetes
    mirrors: Mirrors
    ssh: SshSettings
    nodes: tuple[Node, ...]
    #: The mig-parted ``version: v1`` document the file refers to, if any (kept for export).
    mig_parted_file: str | None = None

    def node(self, name: str) -> Node:
        """The node called ``name``; KeyError if there is none."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def control_planes(self) -> tuple[Node, ...]:
        """Nodes with the control-plane role, in file order."""
        return tuple(n for n in self.nodes if n.role == "control-plane")
