"""The loaded NVIDIA kernel module's version, as ``/proc/driver/nvidia/version`` states it.

One reader for every consumer: the verification agent on the node, the driver stage (from the probe's copy of the
file's first line) and the doctor (from the copy in a support archive). Node-side code: Python 3.9+, standard library.

The file's first line names the module flavour and its version, e.g.
``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (...)`` (open modules) or
``NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Thu Sep 25 ...`` (proprietary modules).
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:  # the verification agent imports this module on every run: no typing at run time there
    from typing import Optional

#: Where a loaded nvidia module shows its version (absent when no module is loaded).
PROC_VERSION = "/proc/driver/nvidia/version"

_MODULE_VERSION = re.compile(r"Kernel Module(?: for [\w-]+)?\s+(\d+\.\d+(?:\.\d+)?)")


def module_version(text: Optional[str]) -> Optional[str]:
    """The module version in ``text`` (the file, or just its first line): ``580.159.04``; None when ``text`` is
    empty or names no version, so a caller never mistakes another number on the line for it."""
    match = _MODULE_VERSION.search(text or "")
    return match.group(1) if match else None
