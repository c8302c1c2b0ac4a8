"""Upstream download locations and default versions used when the cluster file names none, read from
``gpu_provision/data/packages.json`` (where each has its source).

URLs may hold placeholders filled per node from its facts: ``{distro}`` (``ubuntu2404``, ``debian12``, ``rhel9``),
``{os}`` (``ubuntu``, ``debian``, ``rhel``), ``{codename}`` (``noble``, ``bookworm``), ``{arch}`` (``x86_64`` or
``amd64``/``arm64`` as the repository spells it), ``{pkgformat}`` (``deb`` or ``rpm``), ``{cuda_key}`` (the CUDA
repository's signing key for that release or package format, from the same file), ``{k8s_minor}`` (``1.36``) and
``{k8s_key}`` (pkgs.k8s.io's key path for that package format, from the same file).
"""

from __future__ import annotations

from typing import Any

from gpu_provision.spec.vendordata import package_data

#: The apt suite of a flat repository (NVIDIA's CUDA and toolkit repositories, pkgs.k8s.io).
FLAT_SUITE = "/"

_DATA = package_data()

#: Each repository's upstream location by ``cluster.mirrors`` name, from the data file's ``repositories`` (which
#: names the source of each, dropped here: the value is the mirror's default as the cluster file would write it).
UPSTREAM: dict[str, dict[str, Any]] = {
    name: {key: value for key, value in entry.items() if key != "source"}
    for name, entry in _DATA["repositories"].items() if name != "about"
}
#: The container toolkit version a cluster file without ``toolkit.version`` gets.
TOOLKIT_VERSION: str = _DATA["toolkit"]["default_version"]

_KUBERNETES = _DATA["kubernetes"]
#: Kubernetes minor versions this project installs: those upstream still supports (the data file names the source).
KUBERNETES_MINORS: tuple[str, ...] = tuple(_KUBERNETES["supported_minors"])
#: The Kubernetes version a cluster file without ``kubernetes.version`` gets.
KUBERNETES_VERSION: str = _KUBERNETES["default_version"]
#: kubeadm's config API by the first Kubernetes minor that reads it, and the one before (the data file's source).
KUBEADM_API: dict[str, str] = dict(_KUBERNETES["kubeadm_api"]["from"])
KUBEADM_API_BEFORE: str = _KUBERNETES["kubeadm_api"]["before"]
