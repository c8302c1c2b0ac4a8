"""CLI subcommands, one module each, discovered by :mod:`gpu_provision.cli`."""
