"""Probe sections: node-side modules, each with ``collect(request) -> dict`` (Python 3.9+, stdlib only)."""
