#!/usr/bin/env bash
# The test command: sets everything up (scripts/setup-dev.sh), then lint, type checks, the wheel smoke test (the built
# wheel in a fresh virtualenv outside the checkout, scripts/wheel-smoke.sh) and the whole pytest suite, rig tests
# included when run as root. pytest's "no tests ran" (exit 5) is a failure here, like any other.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-dev.sh
.venv/bin/ruff check gpu_provision rig tests bench deploys inventory.py tools
.venv/bin/mypy
bash scripts/wheel-smoke.sh
set +e
.venv/bin/pytest --durations=20 "$@"
status=$?
set -e
if [ "$status" = 5 ]; then
  echo "pytest collected no tests: failing" >&2
fi
exit "$status"
