"""A read-only testinfra suite that checks nodes against the cluster file: the conformance suite.

Point it at your own nodes::

    pip install 'gpu-provision[conformance]'
    pytest --pyargs gpu_provision.conformance --cluster cluster.yaml \\
        --hosts=ssh://root@gpu-01,ssh://ops@gpu-02 --sudo

Each host is matched to the cluster file's node of that name or address (``--cluster-node NAME`` names it when the
host spec says neither, e.g. ``--hosts=local://`` on the node itself). What a node should have comes from the same stage
wants the deploy converges and ``gpu-provision drift`` compares (:func:`gpu_provision.stages.pipeline.node_wants`),
so the three never disagree about the file; the assertions are testinfra's (``host.package``, ``host.file``,
``host.service``, ``host.group``). Nothing on the node is changed: the only command besides testinfra's reads is
the project's probe in its form that keeps no copy on the node (:func:`gpu_provision.bundle.probe_command`,
``keep=False``), which reads what the stages need to work out their wants (kernel, package manager, current
configuration text, device files). See docs/conformance.md.

* :mod:`.expect`: the node a host is, and what the file wants of it, stage by stage (pure);
* :mod:`.checks`: each want as testinfra assertions, returning the problems found;
* :mod:`.plugin`: the ``--cluster``/``--cluster-node`` options (the ``pytest11`` entry point);
* ``conftest.py``: the fixtures; ``test_node.py``: the tests.
"""
