"""What the verification agent expects on one node, written by the controller as JSON.

The agent reads the JSON as plain dicts, so the GPU model's facts (product names, PCI ids, bandwidth, MIG memory
slices) are copied in here from the controller's catalog (:mod:`gpu_provision.spec.catalog`, which reads
``gpu_provision/data/gpus/<MODEL>.json``) and the node needs no data files. The types here are expectations, named
for that, and kept apart from the cluster file's model (:mod:`gpu_provision.spec.model`) they are built from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from gpu_provision.errors import GpuProvisionError
from gpu_provision.node.mig.model import GpuLayout, Placement
from gpu_provision.spec import catalog
from gpu_provision.spec.settings import default

EXPECT_SCHEMA = "verify-expect.v1"
#: The cluster file's verify.bandwidth_min_ratio when it leaves it out.
DEFAULT_BANDWIDTH_RATIO: float = default("verify.bandwidth_min_ratio")


@dataclass(frozen=True)
class ExpectedGpu:
    """The GPUs the agent expects: how many, and the model facts it compares readings against."""

    model: str
    count: int
    product_names: list[str]
    pci_device_ids: list[str]
    memory_bandwidth_gbs: float | None
    mig_memory_slices: int | None


@dataclass(frozen=True)
class ExpectedRuntime:
    """How a GPU container is started on the node: ``kind`` docker|containerd|none, runtime name, CDI, image."""

    kind: str = "none"
    runtime: str = "nvidia"
    cdi: bool = False
    image: str | None = None


@dataclass(frozen=True)
class ExpectedKubernetes:
    """Kubernetes side of the node: its Node name, the allocatable GPU resources expected, the probe pod's image."""

    enabled: bool = False
    node_name: str | None = None
    allocatable: dict[str, int] = field(default_factory=dict)
    #: ``device-plugin`` or ``dra``: whether the node's GPUs show in its allocatable or in its ResourceSlices.
    allocation: str = "device-plugin"
    #: Under DRA, the devices the node's ResourceSlices list: ``gpu`` (whole GPUs) and ``mig-<profile>``.
    devices: dict[str, int] = field(default_factory=dict)
    pod_image: str | None = None
    kubeconfig: str | None = None
    namespace: str = "default"
    #: GPU Feature Discovery's labels (see :func:`gfd_labels`); empty when they are not expected.
    labels: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Expectations:
    """Everything the agent checks one node against; ``to_json()`` is the file shipped to the node."""

    node: str
    gpu: ExpectedGpu
    driver_version: str | None = None
    cuda_min: str | None = None
    bandwidth_ratio: float = DEFAULT_BANDWIDTH_RATIO
    persistence: bool = True
    ecc: bool = True
    mig: dict[int, GpuLayout] = field(default_factory=dict)
    device_permissions: dict[str, str] | None = None
    container: ExpectedRuntime = field(default_factory=ExpectedRuntime)
    kubernetes: ExpectedKubernetes = field(default_factory=ExpectedKubernetes)
    paths: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """Return the plain-dict form the agent reads."""
        data: dict[str, Any] = {
            "schema": EXPECT_SCHEMA,
            "node": self.node,
            "gpu": asdict(self.gpu),
            "driver": {"version": self.driver_version} if self.driver_version else None,
            "cuda_min": self.cuda_min,
            "bandwidth_ratio": self.bandwidth_ratio,
            "persistence": self.persistence,
            "ecc": self.ecc,
            "mig": {str(index): [asdict(p) for p in layout.placements] for index, layout in sorted(self.mig.items())},
            "device_permissions": self.device_permissions,
            "container": asdict(self.container),
            "kubernetes": asdict(self.kubernetes),
        }
        if self.paths:
            data["paths"] = dict(self.paths)
        return data

    def to_json(self) -> str:
        """Return the expectations file's text (stable key order, so unchanged expectations upload nothing)."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True) + "\n"


def _model(key: str) -> catalog.GpuModel:
    known = catalog.models()
    if key not in known:
        raise GpuProvisionError(f"unknown GPU model {key!r} (known: {', '.join(known)})")
    return known[key]


def _layout(layout: GpuLayout | list[Any]) -> GpuLayout:
    """A GPU's wanted layout, given as a :class:`GpuLayout` or as a list of placements or their dicts (in the
    order given, which the expectations file keeps)."""
    if isinstance(layout, GpuLayout):
        return layout
    return GpuLayout(True, tuple(p if isinstance(p, Placement) else Placement.from_dict(p) for p in layout))


def build_expectations(node: str, model: str, count: int, *, driver_version: str | None = None,
                       cuda_min: str | None = None, bandwidth_ratio: float = DEFAULT_BANDWIDTH_RATIO,
                       persistence: bool = True, ecc: bool = True,
                       mig: dict[int, Any] | None = None,
                       device_permissions: dict[str, str] | None = None,
                       container: ExpectedRuntime | dict[str, Any] | None = None,
                       kubernetes: ExpectedKubernetes | dict[str, Any] | None = None,
                       paths: dict[str, str] | None = None) -> Expectations:
    """Build one node's expectations from plain values and the model's facts in the catalog.

    + node: the node's name as reports and tables show it
    + model: GPU model key (``H200``), a model of :mod:`gpu_provision.spec.catalog`
    + count: GPUs the node must have
    + driver_version: pinned version (``580.159.04``) or branch (``580``); None skips the check
    + cuda_min: lowest CUDA version the driver must support (``12.4``)
    + mig: per GPU index, the layout as a ``GpuLayout``, or a list of ``Placement``s or ``{profile, start, size}``
      dicts (absent or a disabled ``GpuLayout`` = MIG off)
    + device_permissions: ``{"group": "video", "mode": "0660"}`` for /dev/nvidia*; None skips the check
    + container, kubernetes: ``ExpectedRuntime`` / ``ExpectedKubernetes`` or dicts of their fields
    + paths: overrides for test rigs (``sysfs``, ``dev``, ``proc``, ``nvidia_smi``, ``libcuda``,
      ``driver_version_file`` for the rig's stand-in of /proc/driver/nvidia/version)

    Example: ``build_expectations("gpu-01", "H200", 8, driver_version="580", cuda_min="12.8")``.
    """
    facts = _model(model)
    if count < 0:
        raise GpuProvisionError(f"node {node}: GPU count {count} is negative")
    gpu = ExpectedGpu(model=facts.key, count=count, product_names=list(facts.product_names),
                      pci_device_ids=list(facts.pci_device_ids), memory_bandwidth_gbs=facts.memory_bandwidth_gbs,
                      mig_memory_slices=facts.mig.memory_slices if facts.mig else None)
    if mig and not facts.mig:
        raise GpuProvisionError(f"node {node}: MIG layout given but {model} has no MIG support")
    wanted_mig = {int(i): _layout(layout) for i, layout in (mig or {}).items() if layout is not None}
    if isinstance(container, dict):
        container = ExpectedRuntime(**container)
    if isinstance(kubernetes, dict):
        kubernetes = ExpectedKubernetes(**kubernetes)
    return Expectations(
        node=node, gpu=gpu, driver_version=driver_version, cuda_min=cuda_min, bandwidth_ratio=bandwidth_ratio,
        persistence=persistence, ecc=ecc,
        mig={i: layout for i, layout in wanted_mig.items() if layout.enabled},
        device_permissions=device_permissions, container=container or ExpectedRuntime(),
        kubernetes=kubernetes or ExpectedKubernetes(), paths=dict(paths or {}))


def mig_resources(layouts: dict[int, GpuLayout], count: int, strategy: str = "mixed") -> dict[str, int]:
    """The allocatable resources the NVIDIA device plugin advertises for these layouts.

    ``mixed`` names one resource per profile (``nvidia.com/mig-3g.71gb``); ``single`` counts every slice as
    ``nvidia.com/gpu``; GPUs without MIG always count as ``nvidia.com/gpu``.
    """
    resources_: dict[str, int] = {}
    whole = count - len([i for i in layouts if i < count])
    if whole:
        resources_["nvidia.com/gpu"] = whole
    for layout in layouts.values():
        for instance in layout.placements:
            key = "nvidia.com/gpu" if strategy == "single" else f"nvidia.com/mig-{instance.profile}"
            resources_[key] = resources_.get(key, 0) + 1
    return resources_


def allocatable_for(count: int, layouts: dict[int, GpuLayout], mig_strategy: str = "none",
                    replicas: int = 1, renamed: bool = False) -> dict[str, int]:
    """What the NVIDIA device plugin advertises for a node: MIG resources per strategy, time-slicing replicas."""
    if layouts and mig_strategy in ("single", "mixed"):
        return mig_resources(layouts, count, mig_strategy)
    name = "nvidia.com/gpu.shared" if replicas > 1 and renamed else "nvidia.com/gpu"
    return {name: count * max(replicas, 1)} if count else {}


def dra_devices(count: int, layouts: dict[int, GpuLayout]) -> dict[str, int]:
    """The devices NVIDIA's DRA driver lists for these layouts: each GPU without MIG as ``gpu``, each MIG device as
    ``mig-<profile>``; a GPU with MIG on is listed by its MIG devices only (the driver's static MIG)."""
    out = mig_resources(layouts, count, "mixed")
    return {key.removeprefix("nvidia.com/"): n for key, n in out.items()}


def _kubernetes(node: Any, enabled: bool, dra: bool, feature_labels: bool,
                layouts: dict[int, GpuLayout]) -> ExpectedKubernetes:
    """What the node's Kubernetes side should show: the device plugin's allocatable, or DRA's listed devices; and
    GPU Feature Discovery's labels where they reach the node (through Node Feature Discovery), in both modes."""
    image = node.verify.container_image
    labels = gfd_labels(node) if enabled and feature_labels and node.gpus.model else {}
    if dra:
        return ExpectedKubernetes(enabled=enabled, node_name=node.name, allocation="dra",
                                  devices=dra_devices(node.gpus.count, layouts), pod_image=image, labels=labels)
    return ExpectedKubernetes(
        enabled=enabled, node_name=node.name,
        allocatable=allocatable_for(node.gpus.count, layouts, node.device_plugin.mig_strategy,
                                    node.sharing.replicas if node.sharing.strategy != "none" else 1,
                                    node.sharing.rename_by_default),
        pod_image=image, labels=labels)


def _label_value(text: str) -> str:
    """A product name as GFD writes it: characters outside ``[A-Za-z0-9-_. ]`` dropped, runs of spaces as one dash
    (k8s-device-plugin ``internal/lm/resource.go``, ``sanitise``)."""
    kept = "".join(ch for ch in text if ch.isascii() and (ch.isalnum() or ch in "-_. "))
    return "-".join(kept.split())


def gfd_labels(node: Any) -> dict[str, Any]:
    """The labels GPU Feature Discovery sets on ``node``: ``exact`` values (``mig.capable``, ``mig.strategy``,
    ``gpu.sharing-strategy``), the ``products`` its ``gpu.product`` starts with, and the ``memory_mib`` its
    ``gpu.memory`` is near (left out under the single MIG strategy, where GFD labels a slice's memory)."""
    facts = _model(node.gpus.model)
    strategy = node.device_plugin.mig_strategy
    shared = node.sharing.strategy != "none" and node.sharing.replicas > 1
    exact = {"nvidia.com/mig.capable": "true" if facts.mig else "false",
             "nvidia.com/mig.strategy": strategy,
             "nvidia.com/gpu.sharing-strategy": node.sharing.strategy if shared else "none"}
    out: dict[str, Any] = {"exact": exact, "products": sorted({_label_value(p) for p in facts.product_names})}
    if strategy != "single":
        out["memory_mib"] = facts.memory_gib * 1024
    return out


def node_layouts(node: Any) -> dict[int, GpuLayout]:
    """The MIG layouts the file plans for ``node``'s GPUs, by GPU index (GPUs without MIG left out)."""
    return {index: layout for index, layout in node.mig.planned.items() if layout.enabled}


def from_node(node: Any, kubernetes_enabled: bool = False, dra: bool = False,
              feature_labels: bool = False) -> Expectations:
    """Expectations for a typed node of the cluster file (``gpu_provision.spec.model.Node``); ``dra``: the cluster
    allocates GPUs through NVIDIA's DRA driver; ``feature_labels``: GPU Feature Discovery's labels reach the node."""
    layouts = node_layouts(node)
    permissions = node.permissions
    runtime = node.container_runtime
    image = node.verify.container_image
    return build_expectations(
        node.name, node.gpus.model, node.gpus.count,
        driver_version=node.driver.spell("reported"),
        cuda_min=node.driver.cuda_min,
        bandwidth_ratio=node.verify.bandwidth_min_ratio,
        persistence=node.driver.persistenced,
        mig=layouts,
        device_permissions={"group": permissions.group or "root", "mode": permissions.mode},
        container=ExpectedRuntime(kind=runtime.kind, runtime="nvidia", cdi=node.toolkit.cdi, image=image),
        kubernetes=_kubernetes(node, kubernetes_enabled, dra, feature_labels, layouts),
    )


def expectations_for_host(host: Any) -> str | None:
    """The expectations JSON for a pyinfra host, or None for a node the cluster file gives no GPUs.

    ``host.data.gpu_provision_verify_expect`` (a path to an expectations JSON file) wins, for rigs and tests;
    otherwise the host's typed node from the cluster file (``gpu_provision.inventory.node_for``, which also
    serves ``@local`` hosts named by ``GPU_PROVISION_NODE``).
    """
    override = host.data.get("gpu_provision_verify_expect")
    if override:
        try:
            with open(override, encoding="utf-8") as handle:
                return handle.read()
        except OSError as exc:
            raise GpuProvisionError(f"{host.name}: cannot read expectations {override}: {exc}") from None
    from gpu_provision.inventory import cluster_for, node_for

    node = node_for(host)
    if not node.has_gpus:
        return None
    k8s = cluster_for(host).kubernetes
    return from_node(node, k8s.enabled, k8s.dra, k8s.node_feature_discovery).to_json()
