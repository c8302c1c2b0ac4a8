"""Checks of meaning for ``kubernetes.gpu_allocation: dra``: what NVIDIA's DRA driver needs of the cluster and nodes.

Each refusal names the threshold and where it comes from (``gpu_provision/data/dra.json``), located at the value
that falls short: the Kubernetes version, a node's driver branch or version, its containerd version (or a
distribution containerd left unpinned, or docker.io's), its sharing strategy. A cluster file that passes here can
run the driver's kubelet plugin on every GPU node.
"""

from __future__ import annotations

from gpu_provision.node.versions import version_key
from gpu_provision.spec.context import Context
from gpu_provision.spec.dradata import (
    ARCHIVE_CONTAINERD,
    CONTAINERD_MIN,
    CONTAINERD_UNPINNED,
    DRIVER_BRANCH_MIN,
    KUBERNETES_MIN,
)
from gpu_provision.spec.model import Cluster, Node

WHY_KUBERNETES = ("the DRA driver needs Kubernetes {min} or newer, where resource.k8s.io/v1 and DRA are on by "
                  "default (driver docs, prerequisites)")
WHY_DRIVER = "the DRA driver needs NVIDIA driver {min} or newer for GPU allocation (driver docs, prerequisites)"
WHY_RUNTIME = ("the DRA driver hands GPUs to containers through CDI, on by default from containerd {min} "
               "(driver docs, prerequisites)")
WHY_UNPINNED = ("the distribution's containerd is whatever the node's archive holds, and the release pockets ship "
                "containerd " + ", ".join(f"{v} ({k})" for k, v in ARCHIVE_CONTAINERD.items())
                + ", older than {min}, the first release with CDI on by default (gpu_provision/data/dra.json, "
                "containerd_unpinned)")
WHY_DOCKER_IO = ("the distribution's docker.io runs the archive's containerd, which the file cannot pin "
                 "(container_runtime.version pins Docker) and which may be older than containerd {min}, the first "
                 "release with CDI on by default (gpu_provision/data/dra.json, containerd_unpinned)")
WHY_SHARING = ("time-slicing and MPS are device plugin settings, and the device plugin is not deployed with "
               "gpu_allocation: dra")


def check(cluster: Cluster, ctx: Context) -> None:
    """Record every way the cluster file cannot run GPU allocation through DRA (nothing when it does not ask to)."""
    k8s = cluster.kubernetes
    if not (k8s.enabled and k8s.dra):
        return
    if version_key(k8s.version) < version_key(KUBERNETES_MIN):
        written = "version" in (ctx.document["cluster"].get("kubernetes") or {})
        ctx.add(("cluster", "kubernetes", "version" if written else "gpu_allocation"),
                f"gpu_allocation: dra with Kubernetes {k8s.version}: {WHY_KUBERNETES.format(min=KUBERNETES_MIN)} "
                f"(allowed: kubernetes.version {KUBERNETES_MIN} or newer, or gpu_allocation: device-plugin)")
    for index, node in enumerate(cluster.nodes):
        if node.has_gpus:
            _node(ctx, index, node)


def _node(ctx: Context, index: int, node: Node) -> None:
    driver = node.driver
    branch = driver.spell("branch")
    if driver.version and int(branch) < DRIVER_BRANCH_MIN:
        ctx.add_node(index, ("driver", "version"),
                     f"driver {driver.version} with gpu_allocation: dra: {WHY_DRIVER.format(min=DRIVER_BRANCH_MIN)} "
                     f"(allowed: a {DRIVER_BRANCH_MIN} or newer driver, or gpu_allocation: device-plugin)")
    elif not driver.version and branch.isdigit() and int(branch) < DRIVER_BRANCH_MIN:
        ctx.add_node(index, ("driver", "branch"),
                     f"driver branch {branch} with gpu_allocation: dra: "
                     f"{WHY_DRIVER.format(min=DRIVER_BRANCH_MIN)} "
                     f"(allowed: branch {DRIVER_BRANCH_MIN} or newer, or gpu_allocation: device-plugin)")
    runtime = node.container_runtime
    if runtime.kind == "containerd" and runtime.version \
            and version_key(runtime.version) < version_key(CONTAINERD_MIN):
        ctx.add_node(index, ("container_runtime", "version"),
                     f"containerd {runtime.version} with gpu_allocation: dra: "
                     f"{WHY_RUNTIME.format(min=CONTAINERD_MIN)} "
                     f"(allowed: containerd {CONTAINERD_MIN} or newer, or gpu_allocation: device-plugin)")
    if runtime.docker_source in CONTAINERD_UNPINNED:
        _unpinned(ctx, index, node)
    if node.sharing.strategy != "none":
        ctx.add_node(index, ("sharing", "strategy"),
                     f"sharing {node.sharing.strategy} with gpu_allocation: dra: {WHY_SHARING} "
                     "(allowed: none, or gpu_allocation: device-plugin)")


def _unpinned(ctx: Context, index: int, node: Node) -> None:
    """A containerd from the distribution's archive: refused under Docker (docker.io), and alone unless pinned."""
    runtime = node.container_runtime
    where = ("container_runtime", "docker_source")
    if runtime.kind == "docker":
        ctx.add_node(index, where,
                     f"docker_source {runtime.docker_source} (docker.io) with gpu_allocation: dra: "
                     f"{WHY_DOCKER_IO.format(min=CONTAINERD_MIN)} (allowed: docker_source docker, kind containerd "
                     f"with version {CONTAINERD_MIN} or newer, or gpu_allocation: device-plugin)")
    elif not runtime.version:
        ctx.add_node(index, where,
                     f"containerd from docker_source {runtime.docker_source} without a version with "
                     f"gpu_allocation: dra: {WHY_UNPINNED.format(min=CONTAINERD_MIN)} (allowed: "
                     f"container_runtime.version {CONTAINERD_MIN} or newer, docker_source docker, or "
                     "gpu_allocation: device-plugin)")
