"""Container image references and the registry override for air-gapped sites."""

from __future__ import annotations

import re

from gpu_provision.spec.settings import IMAGE_REFERENCE, IMAGE_REFERENCE_FORM


def check_reference(image: str) -> str:
    """``image`` when it is a valid reference, else ValueError naming the expected form.

    >>> check_reference("python:3.12-slim@sha256:" + "0" * 64).endswith("0" * 64)
    True
    """
    if not re.fullmatch(IMAGE_REFERENCE, image):
        raise ValueError(f"image {image!r} is not {IMAGE_REFERENCE_FORM}")
    return image


def split_registry(image: str) -> tuple[str | None, str]:
    """``(registry, rest)`` of an image reference; registry is None when the reference names none (Docker Hub).

    The first path component is a registry when it contains ``.`` or ``:`` or is ``localhost``, as container
    runtimes decide it (distribution/reference ``splitDockerDomain``).
    """
    first, sep, rest = image.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first, rest
    return None, image


def with_registry(image: str, registry: str | None) -> str:
    """``image`` pulled from ``registry`` instead of its own (unchanged when ``registry`` is None).

    >>> with_registry("nvcr.io/nvidia/k8s-device-plugin:v0.17.2", "registry.internal:5000")
    'registry.internal:5000/nvidia/k8s-device-plugin:v0.17.2'
    >>> with_registry("flannel/flannel:v0.26.4", "registry.internal:5000")
    'registry.internal:5000/flannel/flannel:v0.26.4'
    """
    if not registry:
        return image
    _, rest = split_registry(image)
    return f"{registry.rstrip('/')}/{rest}"
