"""Pack the verification agent into one zip application (``gpu-verify.pyz``) for the node.

One file means one upload per node. The archive is byte-for-byte reproducible (fixed timestamps, sorted
entries), so pyinfra's checksum comparison uploads it again only when the agent changed.
"""

from __future__ import annotations

import io
import os
import zipfile
from functools import lru_cache
from importlib import resources

AGENT_PACKAGE = "gpu_verify_agent"
AGENT_FILENAME = "gpu-verify.pyz"
_MAIN = (
    "import sys\n"
    f"from {AGENT_PACKAGE}.main import main\n"
    "sys.exit(main())\n"
)
_EPOCH = (1980, 1, 1, 0, 0, 0)


def _agent_files() -> list[tuple[str, bytes]]:
    """Every .py file of gpu_provision.node.verify (vendor included) with its path inside the package."""
    root = resources.files("gpu_provision.node.verify")
    found: list[tuple[str, bytes]] = []

    def walk(node: object, prefix: str) -> None:
        for child in sorted(node.iterdir(), key=lambda c: c.name):  # type: ignore[attr-defined]
            if child.is_dir():
                if child.name != "__pycache__":
                    walk(child, f"{prefix}{child.name}/")
            elif child.name.endswith(".py") or child.name.startswith("LICENSE"):
                found.append((f"{prefix}{child.name}", child.read_bytes()))

    walk(root, "")
    return found


@lru_cache(maxsize=1)
def build_agent() -> bytes:
    """Return the agent as a reproducible zip application: run it with ``python3 gpu-verify.pyz --expect F``.

    Built once per process: every host of a run gets the same bytes.
    """
    buffer = io.BytesIO()
    buffer.write(b"#!/usr/bin/env python3\n")
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        entries = [("__main__.py", _MAIN.encode())]
        entries += [(f"{AGENT_PACKAGE}/{path}", data) for path, data in _agent_files()]
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, data)
    return buffer.getvalue()


def write_agent(path: str) -> str:
    """Write the zip application to ``path`` (mode 0755) and return the path."""
    with open(path, "wb") as handle:
        handle.write(build_agent())
    os.chmod(path, 0o755)
    return path
