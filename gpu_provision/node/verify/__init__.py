"""Node-side verification agent: standard library only (Python 3.9 to 3.12), plus NVIDIA's ``pynvml``, which the
bundle carries.

The controller ships this package to each node as one zip application and runs it with an expectations file;
it prints one JSON report (schema ``verify-report.v1``). Modules: ``nvsmi`` parses nvidia-smi, ``readings``
reads the node, ``cuda`` drives libcuda.so.1 through ctypes, ``nvml`` wraps pynvml, ``runtime`` runs containers
and Kubernetes probes, ``probes`` runs the CUDA children and background threads, ``node_readings`` takes each
reading once when a check needs it, ``checks`` decides, ``registry`` lists every check with its readings,
``report`` records, ``main`` runs the table.
"""

AGENT_VERSION = "0.1.0"
