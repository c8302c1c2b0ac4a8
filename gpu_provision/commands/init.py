"""``init``: a directory to run gpu-provision and pyinfra from, outside any checkout of the project.

    gpu-provision init site && cd site
    # edit cluster.yaml, then:
    gpu-provision validate --cluster cluster.yaml
    pyinfra inventory.py deploys/gpu_node.py --dry
"""

from __future__ import annotations

import argparse
from importlib import resources
from pathlib import Path

from gpu_provision.commands.args import EXIT_OK, add_command, emit, say
from gpu_provision.errors import GpuProvisionError
from gpu_provision.spec import starter

#: Files copied from the package's ``scaffold/`` folder, by their path in the new directory.
SCAFFOLD = ("inventory.py", "deploys/gpu_node.py")
CLUSTER_FILE = "cluster.yaml"


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``init`` command."""
    p = add_command(
        sub, "init", "write a starter cluster.yaml, inventory.py and deploys/gpu_node.py into a directory",
        "Write a commented cluster.yaml (every setting with a default shown, one example node at a "
        "documentation-only address), a pyinfra inventory.py and a thin deploys/gpu_node.py into DIR, so that "
        "'pyinfra inventory.py deploys/gpu_node.py' works from there. Files already there are kept, and nothing "
        "is written, unless --force is given.",
        ["gpu-provision init site && cd site", "gpu-provision init . --force"],
        errors="a file is already there, or the directory cannot be written")
    p.add_argument("directory", metavar="DIR", help="directory to write into (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite files that already exist")
    p.set_defaults(handler=init)


def files() -> dict[str, str]:
    """What ``init`` writes: relative path -> content (the cluster file generated, the rest from the package)."""
    scaffold = resources.files("gpu_provision") / "scaffold"
    out = {CLUSTER_FILE: starter.render()}
    for name in SCAFFOLD:
        out[name] = scaffold.joinpath(*name.split("/")).read_text(encoding="utf-8")
    return out


def init(args: argparse.Namespace) -> int:
    """Write the starter files; refuse, writing nothing, when one exists and ``--force`` is not given."""
    target = Path(args.directory)
    contents = files()
    existing = [name for name in contents if (target / name).exists()]
    if existing and not args.force:
        raise GpuProvisionError(f"{target}: already there: {', '.join(existing)}; nothing written "
                                "(--force overwrites them)")
    written = []
    for name, text in contents.items():
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(str(path))
        say(f"wrote {path}")
    emit(args, {"directory": str(target), "wrote": written},
         f"next: cd {target}, edit {CLUSTER_FILE}, then 'gpu-provision validate --cluster {CLUSTER_FILE}' and "
         "'pyinfra inventory.py deploys/gpu_node.py --dry'")
    return EXIT_OK
