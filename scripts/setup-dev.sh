#!/usr/bin/env bash
# Installs what the tests and the demo need on top of the product (scripts/setup.sh), idempotently: the test tools
# (`pip install -e '.[test]'`), the local test rig's own distribution (`pip install -e ./rig`, command
# gpu-provision-rig) and, as root with apt, the host packages the rig uses (listed by `python -m
# gpu_provision_rig.hostdeps`). Safe to run again; it only adds what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh

stamp=.venv/.gpu-provision-dev-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ rig/pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q -e '.[test]' -e ./rig
  touch "$stamp"
fi

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  updated=
  for flags in "" "--no-recommends"; do
    packages=$(.venv/bin/python -m gpu_provision_rig.hostdeps $flags)
    missing=$(dpkg-query -W -f '${Package} ${db:Status-Abbrev}\n' $packages 2>/dev/null | awk '$2 != "ii" {print $1}' || true)
    for p in $packages; do dpkg-query -W "$p" >/dev/null 2>&1 || missing="$missing $p"; done
    if [ -n "${missing// /}" ]; then
      echo "installing host packages${flags:+ ($flags)}:$missing"
      [ -n "$updated" ] || { apt-get update -qq; updated=1; }
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${flags:+--no-install-recommends} $missing >/dev/null
    fi
  done
else
  echo "note: not root or no apt-get: the local test rig's host packages were not installed (rig tests will skip)"
fi
