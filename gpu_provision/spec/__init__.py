"""The cluster file: loading, validation, the typed model and MIG planning."""

from gpu_provision.spec.loader import load_cluster
from gpu_provision.spec.locate import cluster_file_from_env
from gpu_provision.spec.model import Cluster, Node

__all__ = ["Cluster", "Node", "cluster_file_from_env", "load_cluster"]
