"""The ``diagnose`` entry: a support archive of the node (``tar.gz``) for ``gpu-provision diagnose``.

    python3 gpu-provision-node.pyz diagnose --out FILE [--request JSON]

``--request`` names what only the cluster file knows: ``users`` (who should reach the GPUs), ``images`` (container
images whose CUDA version matters), ``verify`` (the verification agent's expectations: the archive then holds the
agent's report of the node's state against them), ``bug_report`` (false: skip ``nvidia-bug-report.sh``) and
``bug_report_seconds``. Nothing on the node is changed; secrets are hidden before the archive is written.
"""

import argparse
import json

from .collect import write_archive


def main(argv=None):
    """Write the archive and print its manifest as JSON (one line) for the controller."""
    parser = argparse.ArgumentParser(prog="gpu-provision-node diagnose")
    parser.add_argument("--out", required=True, help="the tar.gz to write")
    parser.add_argument("--request", default="{}", help="JSON: users, images, verify, bug_report, bug_report_seconds")
    args = parser.parse_args(argv)
    manifest = write_archive(args.out, json.loads(args.request))
    print(json.dumps({"bundle": args.out, "items": len(manifest["items"]), "seconds": manifest["seconds"]}))
    return 0
