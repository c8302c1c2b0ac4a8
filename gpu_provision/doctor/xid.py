"""Xid events read from the kernel log and decoded with NVIDIA's Xid catalogue (``gpu_provision/data/xid.json``,
which cites its source; an entry not read in the catalogue's own table would be marked, and the finding says so)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

#: ``NVRM: Xid (PCI:0000:17:00): 79, pid=..., GPU has fallen off the bus.`` (the ``PCI:`` prefix is optional).
_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F:.]+)\): (\d+)\b")
#: Xid 154's own words: ``GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)``.
_RECOVERY = re.compile(r"recovery action changed from .*? to 0x[0-9a-fA-F]+ \(([^)]+)\)")


@cache
def xid_table() -> dict[str, Any]:
    """The Xid data file: ``source``, ``actions`` (bucket -> what to do) and ``codes`` (code -> entry)."""
    return json.loads((resources.files("gpu_provision") / "data" / "xid.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class XidEvents:
    """Every event of one Xid code in a log: how many, on which GPUs (PCI addresses), and the last line."""

    code: int
    count: int
    gpus: tuple[str, ...]
    last: str

    def entry(self) -> dict[str, Any]:
        """The catalogue's entry for the code; an unknown code gets a generic one."""
        return xid_table()["codes"].get(str(self.code)) or {
            "mnemonic": "unknown", "description": "not in this catalogue", "action": "CONTACT_SUPPORT",
            "status": "unknown"}

    def action(self) -> str:
        """What to do, in words, from the catalogue's immediate-action bucket; for Xid 154, whose bucket is "follow
        the action the line names", the action its last line names."""
        bucket = self.entry()["action"]
        text = f"{bucket}: {xid_table()['actions'].get(bucket, bucket)}"
        named = _RECOVERY.search(self.last) if self.code == 154 else None
        return text + (f"; the last line names: {named.group(1)}" if named else "")


def xid_events(log: str) -> list[XidEvents]:
    """The Xid events in ``log`` (kernel log text), one per code, in code order."""
    found: dict[int, list[tuple[str, str]]] = {}
    for line in log.splitlines():
        match = _XID.search(line)
        if match:
            found.setdefault(int(match.group(2)), []).append((match.group(1), line.strip()))
    return [XidEvents(code=code, count=len(seen), gpus=tuple(sorted({gpu for gpu, _ in seen})), last=seen[-1][1])
            for code, seen in sorted(found.items())]
