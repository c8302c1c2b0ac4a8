"""Node-side code of gpu-provision: everything that runs on a node's own ``python3``.

Standard library only (plus NVIDIA's ``pynvml``, which the bundle carries), Python 3.9 to 3.12, and no import from
the rest of ``gpu_provision``: the controller ships this package to nodes, so it must stand on its own. It travels
as one zip application built by :mod:`gpu_provision.bundle`, whose entry points (:mod:`.__main__`) are ``probe``,
``verify`` and ``mig-apply``; inside the package every import of its own modules is relative.

* :mod:`.probe`: sections that read a node's GPU-stack state (``collect(request) -> dict`` each);
* :mod:`.verify`: the verification agent (CUDA checks per GPU, a JSON report);
* :mod:`.mig`: the MIG layout decision, the vGPU decision and the applier that carries them out.
"""
