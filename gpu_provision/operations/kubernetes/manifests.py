"""Objects in the cluster: the CNI installed once, and each rendered manifest applied while it differs from the API.

Applying is decided per manifest from the content hash annotation every rendered object carries, so a converged
cluster costs no ``kubectl apply``; images are pointed at the registry mirror when the cluster file names one.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyinfra.api import operation

from gpu_provision.k8s.images import with_registry
from gpu_provision.k8s.objects import Obj, content_hash, key
from gpu_provision.operations import atomic
from gpu_provision.operations.commands import fail_command, mark_changed, this_host
from gpu_provision.operations.kubernetes.probe import KUBECTL, control_plane_api
from gpu_provision.spec import nodepaths


@dataclass(frozen=True)
class Manifest:
    """A manifest file on the control plane and the objects it holds."""

    name: str
    path: str
    objects: tuple[Obj, ...]


def stale_objects(manifest: Manifest, api: Mapping[str, Any]) -> list[str]:
    """``Kind/namespace/name`` of the manifest's objects that the API lacks or holds with other content."""
    applied = api.get("objects", {})
    out = []
    for obj in manifest.objects:
        kind, namespace, name = key(obj)
        ident = f"{kind}/{namespace}/{name}"
        if applied.get(ident) != content_hash(obj):
            out.append(ident)
    return out


@operation()
def manifest_applied(manifest: Manifest):
    """The manifest's objects present in the API with the content rendered from the cluster file.

    + manifest: name, path of the file on this control plane (written before by ``files.wants``) and its objects

    ``kubectl apply -f`` runs when any object is missing or carries another content hash annotation.

    .. code:: python

        manifests.manifest_applied(name="Device plugin", manifest=Manifest("device-plugin", path, objs))
    """
    host = this_host()
    api = yield from control_plane_api(host, f"manifest {manifest.name}")
    if api is None:
        return
    stale = stale_objects(manifest, api)
    if not stale:
        host.noop(f"manifest {manifest.name} already applied")
        return
    mark_changed(host)
    yield f"{KUBECTL} apply -f {shlex.quote(manifest.path)}"


@operation()
def objects_deleted(objects: tuple[Obj, ...]):
    """Objects this project made that must not stay (the other GPU allocation mode's): those of ``objects`` the API
    lists are deleted, so a second run finds none and changes nothing.

    + objects: the objects to remove (kind, namespace and name are read)

    .. code:: python

        manifests.objects_deleted(name="Device plugin removed", objects=tuple(applied.other_allocator(cluster)))
    """
    host = this_host()
    api = yield from control_plane_api(host, "objects to remove")
    if api is None:
        return
    present = api.get("objects", {})
    found = [key(obj) for obj in objects if "/".join(key(obj)) in present]
    if not found:
        host.noop("no object of the other GPU allocation mode is left")
        return
    mark_changed(host)
    for kind, namespace, name in found:
        scope = f" -n {shlex.quote(namespace)}" if namespace else ""
        yield f"{KUBECTL} delete {kind.lower()} {shlex.quote(name)}{scope} --ignore-not-found"


# Runs on the control plane: fetch a manifest, point its images at the registry mirror, write it for kubectl.
_FETCH_MANIFEST = (
    "import os,re,sys,tempfile,urllib.request\n"
    "text=urllib.request.urlopen(sys.argv[1],timeout=60).read().decode()\n"
    "reg=sys.argv[3]\n"
    "def swap(m):\n"
    "    ref=m.group(3); first,sep,rest=ref.partition('/')\n"
    "    if sep and ('.' in first or ':' in first or first=='localhost'): ref=rest\n"
    "    return m.group(1)+m.group(2)+reg.rstrip('/')+'/'+ref+m.group(2)\n"
    "if reg: text=re.sub(r'(\"?image\"?\\s*:\\s*)([\"\\']?)([^\"\\'\\s,]+)\\2',swap,text)\n"
    "d,name=os.path.split(sys.argv[2])\n"
    "fd,tmp=tempfile.mkstemp(dir=d,prefix='.'+name+'.')\n"
    "try:\n"
    "    with os.fdopen(fd,'w') as f:\n"
    "        f.write(text);f.flush();os.fchmod(f.fileno(),0o644);os.fsync(f.fileno())\n"
    "    os.replace(tmp,sys.argv[2])\n"
    "except BaseException:\n"
    "    os.unlink(tmp);raise\n"
)


def rewrite_images(text: str, registry: str | None) -> str:
    """Manifest text (YAML or JSON) with every ``image:`` pointed at ``registry`` (the node-side rewrite's twin)."""
    if not registry:
        return text
    pattern = re.compile(r"(\"?image\"?\s*:\s*)([\"']?)([^\"'\s,]+)\2")
    return pattern.sub(lambda m: m.group(1) + m.group(2) + with_registry(m.group(3), registry) + m.group(2), text)


@operation()
def cni_applied(source: str | None, registry: str | None, daemonset: str, path: str):
    """The CNI installed once: its manifest fetched, images pointed at the registry mirror, applied.

    + source: URL (fetched by the control plane) or local file path (read here) of the manifest
    + registry: ``mirrors.registry`` or None
    + daemonset: ``namespace/name`` of the CNI's DaemonSet; its presence means the CNI is installed
    + path: where the manifest is written on the control plane

    .. code:: python

        manifests.cni_applied(name="CNI", source=FLANNEL_URL, registry=None,
                              daemonset="kube-flannel/kube-flannel-ds", path="/etc/gpu-provision/kubernetes/cni.yaml")
    """
    host = this_host()
    api = yield from control_plane_api(host, "CNI")
    if api is None:
        return
    if daemonset in api.get("daemonsets", []):
        host.noop(f"CNI already installed ({daemonset})")
        return
    if source is None:
        yield fail_command("the CNI has no upstream manifest: set kubernetes.cni_manifest in the cluster file")
        return
    mark_changed(host)
    yield f"mkdir -p {shlex.quote(posixpath.dirname(path))}"
    if re.match(r"^[a-z]+://", source):
        yield (f"python3 -c {shlex.quote(_FETCH_MANIFEST)} {shlex.quote(source)} {shlex.quote(path)} "
               f"{shlex.quote(registry or '')}")
    else:
        try:  # checked when the cluster file loaded; read boundedly again, it may have changed since
            data = nodepaths.controller_file(source, "CNI manifest")
        except ValueError as exc:
            yield fail_command(str(exc))
            return
        yield atomic.write(path, rewrite_images(data.decode("utf-8", errors="replace"), registry))
    yield f"{KUBECTL} apply -f {shlex.quote(path)}"
