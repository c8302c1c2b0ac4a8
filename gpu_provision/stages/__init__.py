"""``@deploy`` stages, called in order by ``deploys/gpu_node.py``."""
