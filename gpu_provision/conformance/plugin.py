"""The conformance suite's pytest plugin: its command-line options, and nothing else.

Registered through the ``pytest11`` entry point (so ``pytest --pyargs gpu_provision.conformance --cluster FILE``
works wherever gpu-provision is installed), or loaded with ``-p gpu_provision.conformance.plugin``. It only adds
options: pytest must know them before it collects the suite (a package's own conftest is read too late for
``--pyargs``). Everything else (fixtures, imports of the stages) lives in the suite's conftest, loaded only when the
suite runs, so other pytest runs pay nothing for it.
"""

from __future__ import annotations

import pytest

#: The suite's options, as the fixtures read them.
CLUSTER_OPTION = "--cluster"
NODE_OPTION = "--cluster-node"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--cluster FILE`` and ``--cluster-node NAME``."""
    group = parser.getgroup("gpu-provision", "gpu-provision conformance suite (pytest --pyargs gpu_provision.conformance)")
    group.addoption(CLUSTER_OPTION, metavar="FILE",
                    help="cluster file the nodes must match (default: $GPU_PROVISION_CLUSTER, else ./cluster.yaml)")
    group.addoption(NODE_OPTION, metavar="NAME",
                    help="the cluster file's node the host is, when the host spec names neither a node nor its "
                         "address (e.g. --hosts=local:// on the node itself)")
