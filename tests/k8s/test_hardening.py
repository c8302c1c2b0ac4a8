"""Hardened Kubernetes objects: team namespaces under Pod Security Admission, and IPv6 endpoints in brackets."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from gpu_provision.k8s import applied, kubeadm, monitoring, teams
from gpu_provision.k8s.endpoints import host_port, with_default_port
from gpu_provision.spec.model import Cluster
from gpu_provision.spec.namespaces import reserved

PSA = "pod-security.kubernetes.io"


def namespace_labels(cluster: Cluster, team: int) -> dict[str, str]:
    objs = teams.manifests(cluster.kubernetes.teams[team], cluster.kubernetes)
    return next(o for o in objs if o["kind"] == "Namespace")["metadata"]["labels"]


def test_team_namespaces_enforce_baseline_by_default(example: Cluster) -> None:
    labels = namespace_labels(example, 0)
    assert {k: v for k, v in labels.items() if k.startswith(PSA)} == {
        f"{PSA}/enforce": "baseline", f"{PSA}/enforce-version": "v1.36",
        f"{PSA}/audit": "baseline", f"{PSA}/audit-version": "latest",
        f"{PSA}/warn": "baseline", f"{PSA}/warn-version": "latest"}
    assert labels[teams.TEAM_LABEL] == "vision"


def test_a_team_may_be_restricted(variant: Cluster) -> None:
    research, solo = namespace_labels(variant, 0), namespace_labels(variant, 1)
    assert research[f"{PSA}/enforce"] == research[f"{PSA}/audit"] == research[f"{PSA}/warn"] == "restricted"
    assert research[f"{PSA}/enforce-version"] == "v1.35"
    assert solo[f"{PSA}/enforce"] == "baseline"


def test_the_cluster_wide_level_applies_to_teams_without_their_own(make_cluster) -> None:
    cluster = make_cluster("""\
        version: v1
        cluster:
          name: strict
          kubernetes:
            pod_security: restricted
            teams: [{name: a}, {name: b, pod_security: baseline}]
        nodes:
          - {name: cp, address: 10.0.0.1, role: control-plane}
        """)
    assert namespace_labels(cluster, 0)[f"{PSA}/enforce"] == "restricted"
    assert namespace_labels(cluster, 1)[f"{PSA}/enforce"] == "baseline"
    for obj in applied.manifests(cluster)["teams"]:
        kubernetes_validate.validate(obj, "1.31.0", strict=True)


@pytest.mark.parametrize("namespace", ["default", "kube-system", "kube-public", "kube-node-lease", "kube-flannel",
                                       "gpu-monitoring", "gpu-provision"])
def test_reserved_namespaces(namespace: str) -> None:
    assert reserved(namespace)


@pytest.mark.parametrize("namespace", ["research", "kubeflow", "gpu-team", "defaults"])
def test_team_namespaces_that_are_free(namespace: str) -> None:
    assert reserved(namespace) is None


@pytest.mark.parametrize(("host", "port", "expected"), [
    ("2001:db8::10", 6443, "[2001:db8::10]:6443"),
    ("[2001:db8::10]", 6443, "[2001:db8::10]:6443"),
    ("::1", 9400, "[::1]:9400"),
    ("192.0.2.10", 6443, "192.0.2.10:6443"),
    ("api.lab.internal", 6443, "api.lab.internal:6443"),
])
def test_host_port(host: str, port: int, expected: str) -> None:
    assert host_port(host, port) == expected


@pytest.mark.parametrize(("endpoint", "expected"), [
    ("2001:db8::10", "[2001:db8::10]:6443"),
    ("[2001:db8::10]", "[2001:db8::10]:6443"),
    ("[2001:db8::10]:7443", "[2001:db8::10]:7443"),
    ("api.lab.internal", "api.lab.internal:6443"),
    ("api.lab.internal:7443", "api.lab.internal:7443"),
    ("192.0.2.10", "192.0.2.10:6443"),
])
def test_endpoint_with_default_port(endpoint: str, expected: str) -> None:
    assert with_default_port(endpoint, 6443) == expected


IPV6 = """\
version: v1
cluster:
  name: six
  kubernetes: {pod_cidr: "fd00:10:244::/56", service_cidr: "fd00:10:96::/112", SETTINGS}
nodes:
  - {name: cp, address: "2001:db8::10", role: control-plane}
  - {name: g, address: "2001:db8::20", gpus: {model: L4, count: 1}}
"""


def test_ipv6_control_plane_endpoint_is_bracketed(make_cluster) -> None:
    cluster = make_cluster(IPV6.replace("SETTINGS", ""))
    _, config, _ = kubeadm.init_configuration(cluster, cluster.node("cp"), "2001:db8::10")
    assert config["controlPlaneEndpoint"] == "[2001:db8::10]:6443"
    given = make_cluster(IPV6.replace("SETTINGS", 'control_plane_endpoint: "2001:db8::100"'))
    _, config, _ = kubeadm.init_configuration(given, given.node("cp"), "2001:db8::10")
    assert config["controlPlaneEndpoint"] == "[2001:db8::100]:6443"


def test_ipv6_scrape_targets_are_bracketed(make_cluster) -> None:
    cluster = make_cluster(IPV6.replace("SETTINGS", ""))
    job = yaml.safe_load(monitoring.scrape_config(cluster))["scrape_configs"][0]
    assert [t["targets"] for t in job["static_configs"]] == [["[2001:db8::20]:9400"]]
