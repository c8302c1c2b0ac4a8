"""Options and fixtures of the conformance suite (``pytest --pyargs gpu_provision.conformance``).

The options come from :mod:`.plugin`: ``--cluster FILE`` (else ``GPU_PROVISION_CLUSTER``, else ``./cluster.yaml``)
names the cluster file; ``--cluster-node NAME`` names the node a host is when its host spec names neither a node nor
its address. testinfra's own options choose the hosts and how to reach them (``--hosts``, ``--sudo``,
``--ssh-identity-file``, ``--ssh-config``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_provision import bundle
from gpu_provision.conformance.expect import (
    ConformanceError,
    Expected,
    expected_for,
    node_for_host,
    probe_request,
)
from gpu_provision.conformance.plugin import CLUSTER_OPTION, NODE_OPTION
from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import Cluster, cluster_file_from_env, load_cluster
from gpu_provision.state import NodeStateData


@pytest.fixture(scope="session")
def cluster(pytestconfig: pytest.Config) -> Cluster:
    """The cluster file, loaded and validated once; a bad or missing file stops the run with its one-line reason."""
    try:
        return load_cluster(pytestconfig.getoption(CLUSTER_OPTION) or cluster_file_from_env())
    except GpuProvisionError as exc:
        pytest.exit(f"gpu-provision conformance: {exc}", returncode=2)


def probe(host: Any, request_json: dict[str, Any]) -> NodeStateData:
    """The probe's answer for ``request_json`` through testinfra's connection, in the form that writes nothing."""
    try:
        done = host.run(bundle.probe_command(request_json, keep=False))
    except RuntimeError as exc:  # testinfra's ssh backends raise it, with the command's result, when ssh itself fails
        result = exc.args[0] if exc.args else None
        reason = str(getattr(result, "stderr", "") or exc).strip()[-400:]
        raise ConformanceError(f"cannot run the probe on {host.backend.get_hostname()}: {reason}") from None
    if done.rc != 0:
        raise ConformanceError(f"the probe failed on {host.backend.get_hostname()} (exit status {done.rc}; is "
                               f"python3 installed?): {done.stderr.strip()[-400:]}")
    try:
        return NodeStateData(json.loads(done.stdout))
    except ValueError as exc:
        raise ConformanceError(f"the probe printed no JSON on {host.backend.get_hostname()}: {exc}") from None


@pytest.fixture(scope="module")
def expected(host: Any, cluster: Cluster, pytestconfig: pytest.Config) -> Expected:
    """What the cluster file wants of the node ``host`` is (one probe per host and module)."""
    try:
        node = node_for_host(cluster, host.backend.get_hostname(), pytestconfig.getoption(NODE_OPTION))
        return expected_for(node, cluster, probe(host, probe_request(node, cluster).to_probe()))
    except ConformanceError as exc:
        pytest.fail(str(exc), pytrace=False)
