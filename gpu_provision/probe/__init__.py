"""The node probe: one remote command that reads every piece of node state the stages and drift checks compare.

Each module in :mod:`gpu_provision.node.probe` is node-side code (Python 3.9+, standard library only) with a
``collect(request)`` function. :func:`gpu_provision.probe.bundle.script` packs them into one ``python3 -c`` command,
so reading a converged node costs one SSH round trip however many operations read the result.
"""
