#!/usr/bin/env bash
# Installs gpu-provision on a fresh Debian 12 (or Ubuntu) machine, idempotently: the Python virtual environment in
# .venv with the product (`pip install -e .`) and nothing else. Safe to run again; it only adds what is missing.
# The tests and the demo need more (test tools, the test rig and its host packages): scripts/setup-dev.sh.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  if ! "$PYTHON" -m venv .venv 2>/dev/null; then
    # Debian and Ubuntu ship the venv module separately.
    rm -rf .venv
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    "$PYTHON" -m venv .venv
  fi
fi
stamp=.venv/.gpu-provision-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e .
  touch "$stamp"
fi
