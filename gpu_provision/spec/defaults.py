"""Upstream download locations used when the cluster file names no mirror.

URLs may hold placeholders filled per node from its facts: ``{distro}`` (``ubuntu2404``, ``debian12``, ``rhel9``),
``{os}`` (``ubuntu``, ``debian``, ``rhel``), ``{codename}`` (``noble``, ``bookworm``), ``{arch}`` (``x86_64`` or
``amd64``/``arm64`` as the repository spells it), ``{pkgformat}`` (``deb`` or ``rpm``), ``{cuda_key}`` (the CUDA repository's signing key for that release or package format, from
``gpu_provision/data/packages.json``), ``{k8s_minor}`` (``1.36``) and ``{k8s_key}`` (pkgs.k8s.io's key path for that
package format, from the same file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: The apt suite of a flat repository (NVIDIA's CUDA and toolkit repositories, pkgs.k8s.io).
FLAT_SUITE = "/"

UPSTREAM: dict[str, dict[str, Any]] = {
    "cuda": {
        "url": "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{cuda_arch}/",
        "key_url": "https://developer.download.nvidia.com/compute/cuda/repos/{distro}/{cuda_arch}/{cuda_key}",
        "suite": FLAT_SUITE,
    },
    "container_toolkit": {
        "url": "https://nvidia.github.io/libnvidia-container/stable/{pkgformat}/{arch}/",
        "key_url": "https://nvidia.github.io/libnvidia-container/gpgkey",
        "suite": FLAT_SUITE,
    },
    "docker": {
        "url": "https://download.docker.com/linux/{os}",
        "key_url": "https://download.docker.com/linux/{os}/gpg",
        "suite": "{codename}",
        "components": ["stable"],
    },
    "kubernetes": {
        "url": "https://pkgs.k8s.io/core:/stable:/v{k8s_minor}/{pkgformat}/",
        "key_url": "https://pkgs.k8s.io/core:/stable:/v{k8s_minor}/{pkgformat}/{k8s_key}",
        "suite": FLAT_SUITE,
    },
}

_KUBERNETES = json.loads((Path(__file__).resolve().parent.parent / "data" / "packages.json").read_text())["kubernetes"]
#: Kubernetes minor versions this project installs: those upstream still supports (the data file names the source).
KUBERNETES_MINORS: tuple[str, ...] = tuple(_KUBERNETES["supported_minors"])
#: The Kubernetes version a cluster file without ``kubernetes.version`` gets.
KUBERNETES_VERSION: str = _KUBERNETES["default_version"]
#: kubeadm's config API by the first Kubernetes minor that reads it, and the one before (the data file's source).
KUBEADM_API: dict[str, str] = dict(_KUBERNETES["kubeadm_api"]["from"])
KUBEADM_API_BEFORE: str = _KUBERNETES["kubeadm_api"]["before"]
