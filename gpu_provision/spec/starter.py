"""The starter cluster file ``gpu-provision init`` writes, generated from the settings description.

Every setting that has a default is listed under its description with that default, commented out: the file is
valid as written, and a line uncommented (with the keys above it) keeps the value the setting already had. Settings
without a default (lists, per-name maps, optional paths) are left to the reference page. The one node uses a
documentation-only address (RFC 5737), so nothing reaches a real machine until the operator writes one.
"""

from __future__ import annotations

import json
import textwrap
from typing import Any

from gpu_provision.spec.settings import DOCS, NODE_SETTINGS, SCHEMA

WIDTH = 110
#: The example node's address: TEST-NET-1 (RFC 5737), reserved for documentation, never routed.
EXAMPLE_ADDRESS = "192.0.2.10"

HEADER = f"""\
# gpu-provision cluster file (version v1), written by `gpu-provision init`.
#
# Settings that are commented out show their default: the value used while they stay commented out. To change one,
# uncomment it together with the keys above it. Every setting, those without a default included, is described in
# {DOCS} of the project and in the JSON Schema the package carries (gpu_provision/schemas/).
#
#   gpu-provision validate --cluster cluster.yaml         # every problem, located
#   gpu-provision plan --cluster cluster.yaml             # what each node will get
#   pyinfra inventory.py deploys/gpu_node.py --dry        # what would change on the nodes
#   pyinfra inventory.py deploys/gpu_node.py              # bring the nodes to this file's state
"""

EXAMPLE_NODE = f"""\
nodes:
  # One entry per node. {EXAMPLE_ADDRESS} is a documentation-only address (RFC 5737) that reaches no machine:
  # replace it with the node's address or host name, and the GPUs with what the node has (or remove 'gpus').
  # With Kubernetes on, one node is the control plane; the others keep the default role, worker.
  - name: gpu-01
    address: {EXAMPLE_ADDRESS}
    role: control-plane
    gpus: {{model: H200, count: 8}}
"""


def _has_default(schema: dict[str, Any]) -> bool:
    if "default" in schema:
        return True
    return any(_has_default(sub) for sub in schema.get("properties", {}).values())


def _comment(text: str, indent: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=f"{indent}# ", subsequent_indent=f"{indent}# ",
                         break_on_hyphens=False)


def _settings(schema: dict[str, Any], indent: str, commented: bool, given: Any = None) -> list[str]:
    """The lines of every setting under ``schema`` that has a default (``given`` holds a parent's default)."""
    lines: list[str] = []
    for name, sub in schema.get("properties", {}).items():
        value = given.get(name) if isinstance(given, dict) and name in given else sub.get("default")
        if not (_has_default(sub) or value is not None):
            continue
        lines.append("")
        lines += _comment(sub.get("description", ""), indent)
        mark = "# " if commented else ""
        if "properties" in sub:
            lines.append(f"{indent}{mark}{name}:")
            lines += _settings(sub, indent + "  ", commented, value)
        else:
            lines.append(f"{indent}{mark}{name}: {json.dumps(value)}")
    return lines


def render(commented: bool = True) -> str:
    """The starter ``cluster.yaml``; ``commented=False`` writes every default out as a live setting.

    Both forms load to the same cluster, which is how the tests hold the commented defaults to the real ones.
    """
    cluster = SCHEMA["properties"]["cluster"]
    lines = [HEADER + "version: v1", "", "cluster:"]
    lines += _comment(cluster["properties"]["name"]["description"], "  ")
    lines.append("  name: my-cluster")
    lines += _settings(cluster, "  ", commented)
    lines += ["", *_comment(NODE_SETTINGS["description"], ""), "defaults:" if not commented else "# defaults:"]
    lines += _settings(NODE_SETTINGS, "  ", commented)
    return "\n".join(lines) + "\n\n" + EXAMPLE_NODE
