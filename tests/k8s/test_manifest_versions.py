"""Every manifest the project renders, validated against the API schemas of every supported Kubernetes minor.

The supported minors come from gpu_provision/data/packages.json (kubernetes.supported_minors); kubernetes-validate
must ship a schema for each of them, so a minor added to the data file without a schema fails here instead of being
left unchecked.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import kubernetes_validate
import pytest
from kubernetes_validate import utils

from gpu_provision.k8s import applied, feature_discovery, objects
from gpu_provision.spec.defaults import KUBERNETES_MINORS
from gpu_provision.spec.model import Cluster
from gpu_provision.verify import expect, incluster

SCHEMAS = set(utils.all_versions())


def _objects(cluster: Cluster) -> list[dict[str, Any]]:
    out = [obj for objs in applied.manifests(cluster).values() for obj in objects.as_list(objs)["items"]]
    nodes = {n.name: expect.from_node(n, True, feature_labels=True).to_dict() for n in cluster.nodes if n.has_gpus}
    return out + incluster.manifests(nodes)


def test_every_supported_minor_has_a_schema() -> None:
    assert [m for m in KUBERNETES_MINORS if f"{m}.0" not in SCHEMAS] == []


@pytest.mark.parametrize("minor", KUBERNETES_MINORS)
@pytest.mark.parametrize("which", ["example", "variant", "example_with_nfd"])
def test_every_manifest_is_valid_for_every_supported_minor(minor: str, which: str,
                                                            request: pytest.FixtureRequest) -> None:
    if which == "example_with_nfd":
        cluster = request.getfixturevalue("example")
        cluster = replace(cluster, kubernetes=replace(cluster.kubernetes, node_feature_discovery=True))
    else:
        cluster = request.getfixturevalue(which)
    found = _objects(cluster)
    assert {"DaemonSet", "ConfigMap", "ClusterRole", "Namespace"} <= {o["kind"] for o in found}
    assert feature_discovery.NAME in {o["metadata"]["name"] for o in found if o["kind"] == "DaemonSet"}
    for obj in found:
        kubernetes_validate.validate(obj, f"{minor}.0", strict=True)


@pytest.mark.parametrize("minor", KUBERNETES_MINORS)
def test_kubeadm_documents_name_the_api_of_every_supported_minor(minor: str, example: Cluster) -> None:
    from gpu_provision.k8s import kubeadm

    cluster = replace(example, kubernetes=replace(example.kubernetes, version=f"{minor}.0"))
    node = next(n for n in cluster.nodes if n.role == "control-plane")
    init, config, _ = kubeadm.init_configuration(cluster, node, "192.0.2.10")
    assert init["apiVersion"] == config["apiVersion"] == kubeadm.api_version(f"{minor}.0") == "kubeadm.k8s.io/v1beta4"
