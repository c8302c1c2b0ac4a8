"""Entry points of the node package: ``python3 gpu-provision-node.pyz ENTRY ARGS`` on a node, or
``python3 -m gpu_provision.node ENTRY ARGS`` in a checkout.

* ``probe [REQUEST_JSON]``: read the requested sections of the node's state, print them as one JSON object;
* ``verify --expect FILE``: the verification agent, one JSON report;
* ``mig-apply plan|apply|vgpu|boot ...``: the MIG layout and vGPU applier (the boot unit runs ``mig-apply boot``);
* ``diagnose --out FILE [--request JSON]``: a support archive of the node (``tar.gz``), secrets hidden.

Each entry's module is imported only when that entry runs, so the probe never loads the agent's pynvml.
"""

import importlib
import sys

#: Entry name -> module (relative to this package) whose ``main(argv)`` runs it.
ENTRIES = {"probe": ".probe", "verify": ".verify.main", "mig-apply": ".mig.apply", "diagnose": ".diagnose"}
USAGE = "usage: gpu-provision-node {" + ",".join(ENTRIES) + "} [ARGS...]"


def main(argv=None):
    """Run the entry named by the first argument with the rest; exit status 2 with usage for anything else."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in ENTRIES:
        print(USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(ENTRIES[argv[0]], __package__)
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
