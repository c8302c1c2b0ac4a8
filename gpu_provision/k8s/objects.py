"""Helpers shared by the manifest renderers: metadata, the applied-content hash and ``List`` documents."""

from __future__ import annotations

import hashlib
import json
from typing import Any

#: Label on every object this project creates (``kubectl get -l`` finds them).
MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-provision"}
#: Annotation holding the SHA-256 of the object as rendered; drift checks compare it with the rendered object.
HASH_ANNOTATION = "gpu-provision/content-sha256"

Obj = dict[str, Any]


def meta(name: str, namespace: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """``metadata`` with the managed-by label (and ``labels``)."""
    out: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **(labels or {})}}
    if namespace is not None:
        out["namespace"] = namespace
    return out


def canonical(obj: Any) -> str:
    """The canonical JSON text of ``obj`` (sorted keys, no spaces)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


def content_hash(obj: Obj) -> str:
    """SHA-256 of an object as rendered, ignoring the hash annotation itself."""
    clean = json.loads(canonical(obj))
    annotations = clean.get("metadata", {}).get("annotations", {})
    annotations.pop(HASH_ANNOTATION, None)
    if not annotations:
        clean.get("metadata", {}).pop("annotations", None)
    return hashlib.sha256(canonical(clean).encode()).hexdigest()


def stamped(obj: Obj) -> Obj:
    """``obj`` with :data:`HASH_ANNOTATION` set to its content hash."""
    out = json.loads(canonical(obj))
    out["metadata"].setdefault("annotations", {})[HASH_ANNOTATION] = content_hash(obj)
    return out


def key(obj: Obj) -> tuple[str, str, str]:
    """``(kind, namespace, name)``; namespace is ``""`` for cluster-scoped objects."""
    return obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def as_list(objs: list[Obj]) -> Obj:
    """A ``v1 List`` holding ``objs`` stamped with their hashes (what ``kubectl apply -f`` is given)."""
    return {"apiVersion": "v1", "kind": "List", "items": [stamped(o) for o in objs]}


def to_text(obj: Obj) -> str:
    """The file text of a manifest: indented JSON, which kubectl reads like YAML."""
    return json.dumps(obj, indent=2, sort_keys=True) + "\n"
