#!/usr/bin/env bash
# Installs everything gpu-provision needs on a fresh Debian 12 (or Ubuntu) machine, idempotently:
# the Python virtual environment in .venv with the package and its test tools, and (as root) the host packages the
# local test rig uses. Safe to run again; it only adds what is missing.
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
  .venv/bin/python -m pip install -q -e '.[test]'
  touch "$stamp"
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  packages=$(.venv/bin/python -m gpu_provision.hostdeps)
  missing=$(dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' $packages 2>/dev/null | awk '$2 != "ii" {print $1}' || true)
  for p in $packages; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
  if [ -n "${missing// /}" ]; then
    echo "installing host packages:$missing"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null
  fi
else
  echo "note: not root or no apt-get: the local test rig's host packages were not installed (rig tests will skip)"
fi
