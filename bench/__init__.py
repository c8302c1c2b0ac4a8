"""Drift-check benchmark: gpu-provision's batched probe against stock pyinfra operations and an Ansible playbook
in ``--check --diff`` mode, on the same nodes, side by side. Run with ``python -m bench`` (see bench/README.md)."""
