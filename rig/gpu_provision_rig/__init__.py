"""The local test rig: Debian 12 nodes as systemd-nspawn machines on a private bridge, reachable only via loopback.

A distribution of its own (``gpu-provision-rig``, ``rig/pyproject.toml``): it imports the product
(:mod:`gpu_provision`), never the other way round, and the product's wheel holds none of it.

Layout of the package (one concern per module):

- ``config``: addresses, paths, the :class:`~gpu_provision_rig.config.RigNode` description.
- ``base``: the mmdebstrap base root filesystem, cached by package-list hash.
- ``node``: a node's overlay root, the files written into it before boot, and the process that keeps it booted.
- ``hardware``: simulated GPUs (``/etc/gpu-sim/gpus.json``) and the node's PCI view.
- ``network``: the bridge ``gprig0`` (10.77.0.1/24) and the blackhole route for 10.77.0.0/24.
- ``forward``: the TCP forwarder 127.0.10.N:22 -> node, the controller's only way in.
- ``aptproxy``: apt-cacher-ng on the bridge, the nodes' only way out.
- ``httpserve``: the read-only HTTP server for the package mirror (http://10.77.0.1:8080/).
- ``sshkeys``: the rig's login key, node host keys and known_hosts.
- ``lifecycle``: :class:`~gpu_provision_rig.lifecycle.Rig` with ``up``, ``down``, ``status``, resets.
- ``cluster``: cluster file -> rig nodes.
- ``requirements``: the Debian packages the rig needs on the host and in nodes; ``hostdeps``: all host packages.
- ``debs``, ``mirror``: the stand-in packages (``standins/``) and their signed mirror; ``sim/``: the GPU simulator.
- ``errors``: :class:`~gpu_provision_rig.errors.RigError`, the base of every rig error.
- ``cli``: the command line ``gpu-provision-rig up|down|status|inventory|reset|vagrant-cluster``.
"""
