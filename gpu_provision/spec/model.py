"""The typed cluster model: what the rest of the code reads instead of raw dicts.

Every class is a frozen dataclass built once by :func:`gpu_provision.spec.loader.load_cluster` from a validated
cluster file, after node settings have been resolved (node over group over defaults). Field names follow the
file's keys; :mod:`gpu_provision.spec.settings` describes each of them once and gives their defaults, so no default
value is written here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, overload

from gpu_provision.node.mig.model import GpuLayout, MigLayout
from gpu_provision.spec.defaults import FLAT_SUITE
from gpu_provision.spec.settings import default

Role = Literal["control-plane", "worker"]
KernelModules = Literal["open", "proprietary", "auto"]
InstallMethod = Literal["package", "distro", "preinstalled"]
RuntimeKind = Literal["docker", "containerd"]
SharingStrategy = Literal["none", "time-slicing", "mps"]
MigStrategy = Literal["none", "single", "mixed"]
GpuAllocation = Literal["device-plugin", "dra"]
PodSecurityLevel = Literal["baseline", "restricted"]
#: The uses a driver version is spelled for; see :meth:`Driver.spell`.
DriverVersionUse = Literal["branch", "package", "pin", "debian_pin", "reported"]


@dataclass(frozen=True)
class Repository:
    """A package repository (apt or yum) and the key that signs it."""

    url: str
    #: Where the node fetches the signing key; None when ``key_file`` gives it.
    key_url: str | None = None
    #: apt "suite" (``/`` for flat repositories such as NVIDIA's and pkgs.k8s.io).
    suite: str = FLAT_SUITE
    components: tuple[str, ...] = ()
    #: The signing key as a file on the controller (absolute), shipped to the node instead of fetched there.
    key_file: str | None = None


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

    user: str = default("cluster.ssh.user")
    port: int = default("cluster.ssh.port")
    key: str | None = None
    known_hosts: str | None = None
    strict_host_key_checking: bool = default("cluster.ssh.strict_host_key_checking")
    connect_timeout: int = default("cluster.ssh.connect_timeout")
    command_timeout: int = default("cluster.ssh.command_timeout")
    probe_timeout: int = default("cluster.ssh.probe_timeout")


@dataclass(frozen=True)
class Team:
    """A team's namespace and its GPU quota."""

    name: str
    namespace: str
    gpus: int = default("cluster.kubernetes.teams[].gpus")
    mig: dict[str, int] = field(default_factory=dict)
    users: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()
    #: Service accounts of the team's own namespace bound to its role, by name.
    service_accounts: tuple[str, ...] = ()
    #: Pod Security Standard of the namespace; None: the cluster's (``Kubernetes.pod_security``).
    pod_security: PodSecurityLevel | None = None


@dataclass(frozen=True)
class Monitoring:
    """DCGM exporter and the Prometheus scrape file."""

    dcgm_exporter: bool = default("cluster.kubernetes.monitoring.dcgm_exporter")
    dcgm_exporter_image: str = default("cluster.kubernetes.monitoring.dcgm_exporter_image")
    prometheus_scrape_file: str | None = None


@dataclass(frozen=True)
class InClusterVerification:
    """The in-cluster verification DaemonSet: its image and the taints it tolerates (as ``key[=value]:Effect``)."""

    image: str = default("cluster.kubernetes.verification.image")
    tolerations: tuple[str, ...] = field(
        default_factory=lambda: tuple(default("cluster.kubernetes.verification.tolerations")))


@dataclass(frozen=True)
class Kubernetes:
    """The Kubernetes cluster the GPU nodes join."""

    enabled: bool = default("cluster.kubernetes.enabled")
    version: str = default("cluster.kubernetes.version")
    pod_cidr: str = default("cluster.kubernetes.pod_cidr")
    service_cidr: str = default("cluster.kubernetes.service_cidr")
    control_plane_endpoint: str | None = None
    cni: Literal["flannel", "calico", "cilium"] = default("cluster.kubernetes.cni")
    cni_manifest: str | None = None
    device_plugin_image: str = default("cluster.kubernetes.device_plugin_image")
    #: ``device-plugin`` or ``dra`` (NVIDIA's DRA driver instead of the device plugin).
    gpu_allocation: GpuAllocation = default("cluster.kubernetes.gpu_allocation")
    dra_driver_image: str = default("cluster.kubernetes.dra_driver_image")
    node_feature_discovery: bool = default("cluster.kubernetes.node_feature_discovery")
    teams: tuple[Team, ...] = ()
    pod_security: PodSecurityLevel = default("cluster.kubernetes.pod_security")
    monitoring: Monitoring = field(default_factory=Monitoring)
    verification: InClusterVerification = field(default_factory=InClusterVerification)

    @property
    def dra(self) -> bool:
        """Whether GPUs are allocated through NVIDIA's DRA driver rather than the device plugin."""
        return self.gpu_allocation == "dra"

    @property
    def minor(self) -> str:
        """``1.31`` for ``1.31.4``: the pkgs.k8s.io repository a version lives in."""
        return ".".join(self.version.split(".")[:2])

    def team_pod_security(self, team: Team) -> PodSecurityLevel:
        """The Pod Security Standard ``team``'s namespace enforces: the team's own, else the cluster's."""
        return team.pod_security or self.pod_security


@dataclass(frozen=True)
class WaitForJobs:
    """How long a cordoned node waits for its GPU jobs, and which pods count as GPU jobs."""

    #: Seconds; 0 waits without limit.
    timeout: int = default("cluster.rollout.wait_for_jobs.timeout")
    #: Label selector; None: every pod requesting an nvidia.com GPU resource.
    pod_selector: str | None = None


@dataclass(frozen=True)
class PodDeletion:
    """Evicting a cordoned node's remaining GPU pods: how long, and whether bare and emptyDir pods may go."""

    timeout: int = default("cluster.rollout.pod_deletion.timeout")
    force: bool = default("cluster.rollout.pod_deletion.force")
    delete_empty_dir: bool = default("cluster.rollout.pod_deletion.delete_empty_dir")


@dataclass(frozen=True)
class Drain:
    """Draining a node whose GPU pods could not be evicted: whether, how long, and which pods may go."""

    enable: bool = default("cluster.rollout.drain.enable")
    timeout: int = default("cluster.rollout.drain.timeout")
    force: bool = default("cluster.rollout.drain.force")
    delete_empty_dir: bool = default("cluster.rollout.drain.delete_empty_dir")


@dataclass(frozen=True)
class Rollout:
    """How disruptive changes roll across the nodes: batch size and how many nodes of a group may be down."""

    max_parallel: int = default("cluster.rollout.max_parallel")
    #: A node count (``2``) or a percentage of a node group (``"25%"``).
    max_unavailable: int | str = default("cluster.rollout.max_unavailable")
    wait_for_jobs: WaitForJobs = field(default_factory=WaitForJobs)
    pod_deletion: PodDeletion = field(default_factory=PodDeletion)
    drain: Drain = field(default_factory=Drain)
    #: Nodes outside Kubernetes: ``refuse``, ``wait`` or ``stop`` running GPU containers.
    gpu_containers: Literal["refuse", "wait", "stop"] = default("cluster.rollout.gpu_containers")


@dataclass(frozen=True)
class Packages:
    """How package operations behave on the node: how long they wait for another holder of the package lock."""

    lock_timeout: int = default("packages.lock_timeout")


@dataclass(frozen=True)
class Driver:
    """NVIDIA driver: which one, how it is installed, and whether the node may reboot for it."""

    #: Branch such as ``"580"``; the newest version of that branch is installed and held.
    branch: str | None = default("driver.branch")
    #: Exact version such as ``"580.159.04"``; overrides ``branch`` when given.
    version: str | None = None
    kernel_modules: KernelModules = default("driver.kernel_modules")
    install_method: InstallMethod = default("driver.install_method")
    reboot: Literal["allowed", "never"] = default("driver.reboot")
    #: Minimum CUDA version the driver must support (``nvidia-smi`` "CUDA Version").
    cuda_min: str | None = None
    #: ``"auto"`` (from the node's PCI bus, :mod:`gpu_provision.stages.fabric`) or forced true/false.
    fabric_manager: bool | Literal["auto"] = default("driver.fabric_manager")
    persistenced: bool = default("driver.persistenced")
    #: Hold the running kernel's metapackages so only the deploy moves the kernel.
    hold_kernel: bool = default("driver.hold_kernel")
    #: The site's module signing key and certificate on the node, for DKMS (both or neither).
    signing_key: str | None = None
    signing_certificate: str | None = None

    @overload
    def spell(self, use: Literal["branch", "pin", "debian_pin", "reported"], family: str | None = None) -> str: ...

    @overload
    def spell(self, use: Literal["package"], family: str | None = None) -> str | None: ...

    def spell(self, use: DriverVersionUse, family: str | None = None) -> str | None:
        """The wanted driver version as one use spells it, so the deploy, its plan, drift and verification name
        the same driver:

        - ``branch``: ``580`` (from ``version`` when an exact version is given), for package names
          (``nvidia-driver-580``) and module streams;
        - ``package``: the version driver packages are installed at, as the package manager takes it: the exact
          version (``580.159.04``; apt adds ``-*``, dnf takes any release), else the branch as a glob (``580.*``);
          None on Ubuntu (``family``) without an exact version, whose package names carry the branch. This is what
          ``gpu-provision plan`` shows (without a family: what every repository install gets);
        - ``pin``: the apt pin's and version lock's version glob (``580.159.04*``, ``580.*``);
        - ``debian_pin``: the apt pin's version glob for Debian's own driver packages (``535.261.03-*``, ``535.*``,
          ``install_method: distro``), whose versions carry a Debian revision (``535.261.03-1~deb12u1``);
        - ``reported``: what nvidia-smi and ``/proc/driver/nvidia/version`` must report, the version or its branch
          (``580.159.04``, ``580``), as :func:`gpu_provision.node.verify.checks.driver_matches` compares it.
        """
        branch = self.version.split(".")[0] if self.version else str(self.branch)
        if use == "branch":
            return branch
        if use == "reported":
            return self.version or branch
        if use == "pin":
            return f"{self.version}*" if self.version else f"{branch}.*"
        if use == "debian_pin":
            return f"{self.version}-*" if self.version else f"{branch}.*"
        if self.version:
            return self.version
        return None if family == "ubuntu" else f"{branch}.*"


@dataclass(frozen=True)
class ContainerRuntime:
    """Docker (with containerd underneath) or containerd alone."""

    kind: RuntimeKind = default("container_runtime.kind")
    #: ``docker``: Docker's own repository; ``distro``: the distribution's ``docker.io`` package.
    docker_source: Literal["docker", "distro"] = default("container_runtime.docker_source")
    default_shm_size: str | None = None
    log_max_size: str = default("container_runtime.log_max_size")
    log_max_file: int = default("container_runtime.log_max_file")
    version: str | None = None


@dataclass(frozen=True)
class Toolkit:
    """nvidia-container-toolkit."""

    version: str = default("toolkit.version")
    cdi: bool = default("toolkit.cdi")
    default_runtime: bool = default("toolkit.default_runtime")


@dataclass(frozen=True)
class Permissions:
    """Who may open the GPU device files."""

    group: str | None = None
    #: Octal mode of ``/dev/nvidia*`` as a string, e.g. ``"0660"``.
    mode: str = default("permissions.mode")
    users: tuple[str, ...] = ()

    @property
    def mode_int(self) -> int:
        """The mode as an integer (``0o660``)."""
        return int(self.mode, 8)


@dataclass(frozen=True)
class GpuExpectation:
    """The GPUs a node is expected to have."""

    model: str | None = None
    count: int = default("gpus.count")


@dataclass(frozen=True)
class Mig:
    """MIG settings of a node: one :class:`~gpu_provision.node.mig.model.MigLayout` per GPU index (the one type for
    a GPU's asked-for layout, on the controller and on the node, which this module's readers import from here)."""

    layouts: dict[int, MigLayout] = field(default_factory=dict)
    #: Stop user processes holding a GPU instead of refusing the change.
    allow_drain: bool = default("mig.allow_drain")
    #: Unload nvidia_drm/nvidia_modeset for a GPU reset (a MIG mode change) instead of failing.
    allow_module_unload: bool = default("mig.allow_module_unload")

    @property
    def enabled(self) -> bool:
        """Whether any GPU of the node has MIG on."""
        return any(layout.enabled for layout in self.layouts.values())

    @property
    def planned(self) -> dict[int, GpuLayout]:
        """Per GPU index, the planned layout to reach; ValueError for a model the cluster file's resolve step did not
        plan (a node built by hand), rather than planning again somewhere else."""
        unplanned = sorted(index for index, layout in self.layouts.items() if layout.planned is None)
        if unplanned:
            raise ValueError(f"MIG layouts of GPU(s) {unplanned} were never planned (spec.resolve.derive plans them)")
        return {index: layout.planned for index, layout in self.layouts.items() if layout.planned is not None}


@dataclass(frozen=True)
class Sharing:
    """GPU sharing as the device plugin offers it."""

    strategy: SharingStrategy = default("sharing.strategy")
    replicas: int = default("sharing.replicas")
    rename_by_default: bool = default("sharing.rename_by_default")


@dataclass(frozen=True)
class DevicePlugin:
    """NVIDIA device plugin settings for the node."""

    mig_strategy: MigStrategy = default("device_plugin.mig_strategy")


@dataclass(frozen=True)
class Verify:
    """What the verification phase demands beyond the stack settings."""

    bandwidth_min_ratio: float = default("verify.bandwidth_min_ratio")
    container_image: str | None = None


@dataclass(frozen=True)
class Preflight:
    """Preflight's checks on the node: which failures are only warnings there (``preflight.ignore``)."""

    ignore: tuple[str, ...] = ()


@dataclass(frozen=True)
class Node:
    """A node with every setting resolved (node over group over defaults)."""

    name: str
    address: str
    role: Role = default("role")
    group: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[str, ...] = ()
    ssh: SshSettings = field(default_factory=SshSettings)
    packages: Packages = field(default_factory=Packages)
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
    preflight: Preflight = field(default_factory=Preflight)
    verify: Verify = field(default_factory=Verify)
    #: Line of the node's entry in the cluster file, for messages.
    line: int = 0

    @property
    def has_gpus(self) -> bool:
        """Whether the node is expected to carry NVIDIA GPUs."""
        return bool(self.gpus.model) and self.gpus.count > 0

    def changed(self, **fields: object) -> Node:
        """This node with ``fields`` changed, as ``dataclasses.replace`` makes it, without a second pass through the
        constructor: every other field is this node's own, already built and frozen. A 10,000-node file of one group
        copies a node per entry (its name, address and line) and again per derived MIG plan; through ``replace``
        those copies were 7% of its validation under the profiler."""
        copy = object.__new__(Node)
        copy.__dict__.update(self.__dict__, **fields)
        return copy


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
    rollout: Rollout = field(default_factory=Rollout)
    #: Directories (absolute, symbolic links resolved) besides the file's own that controller files may come from.
    controller_dirs: tuple[str, ...] = ()

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
