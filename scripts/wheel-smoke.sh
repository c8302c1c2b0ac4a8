#!/usr/bin/env bash
# Wheel smoke test: what an operator gets from `pip install gpu_provision-*.whl`, away from this checkout.
#
# Builds the product's wheel from a copy of the sources, installs it into a fresh virtualenv in a temporary directory
# (dependencies from the package index, through pip's own cache), and from there runs every command that touches no
# remote machine: init, validate, plan, mig-plan, export, and a read-only `pyinfra @local ... --dry` of the packaged
# deploy against a one-node file that names this machine (GPU_PROVISION_NODE); then the conformance suite's extra and
# its collection (`pytest --pyargs gpu_provision.conformance`). Run by scripts/test.sh.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
base_python="${PYTHON:-$repo/.venv/bin/python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/gpu-provision-wheel.XXXXXX")"
trap 'rm -rf "$work"' EXIT
step() { printf '\n== %s\n' "$*"; }
# Runs a command with its output kept aside, shown (the end of it) only when it fails.
quiet() { "$@" >"$work/out.log" 2>&1 || { tail -40 "$work/out.log"; echo "failed: $*" >&2; exit 1; }; }

step "wheel from a copy of the sources"
mkdir "$work/src"
for path in pyproject.toml README.md LICENSE MANIFEST.in gpu_provision deploys inventory.py inventory docs tools; do
  cp -a "$repo/$path" "$work/src/"
done
find "$work/src" -name __pycache__ -prune -exec rm -rf {} +
"$base_python" -m venv "$work/venv"
venv="$work/venv/bin"
"$venv/python" -m pip wheel -q --no-deps -w "$work/dist" "$work/src"
wheel=$(ls "$work"/dist/gpu_provision-*.whl)
echo "$wheel"

step "install into a fresh virtualenv"
"$venv/python" -m pip install -q "$wheel"

step "the node bundle carries pynvml from the installed nvidia-ml-py, with its licence"
(cd "$work" && "$venv/python" - <<'PY'
import io, zipfile
from importlib import metadata
from gpu_provision import bundle
names = zipfile.ZipFile(io.BytesIO(bundle.build())).namelist()
assert "pynvml.py" in names and "LICENSE.nvidia-ml-py" in names, names[:5]
assert not [n for n in names if "vendor" in n], "a tree copy of pynvml is in the bundle"
print("pynvml from nvidia-ml-py", metadata.version("nvidia-ml-py"))
PY
)

mkdir "$work/run"
cd "$work/run"
step "gpu-provision init site"
"$venv/gpu-provision" init site
cd site
step "validate, plan, mig-plan, export"
"$venv/gpu-provision" validate --cluster cluster.yaml
"$venv/gpu-provision" plan --cluster cluster.yaml >/dev/null
"$venv/gpu-provision" mig-plan --gpu H200 '1g.18gb x2 + 2g.35gb + 3g.71gb'
"$venv/gpu-provision" export mig-parted - --cluster cluster.yaml >/dev/null
quiet "$venv/pyinfra" inventory.py debug-inventory

step "pyinfra @local, read-only, with the init directory's deploy and the packaged one"
cat > local.yaml <<'YAML'
version: v1
cluster:
  name: local
  kubernetes: {enabled: false}
nodes:
  - name: this-machine
    address: 127.0.0.1
    gpus: {model: H200, count: 8}
YAML
export GPU_PROVISION_CLUSTER=local.yaml GPU_PROVISION_NODE=this-machine
export GPU_PROVISION_STAGES=preflight,driver,runtime,toolkit,permissions
for deploy in deploys/gpu_node.py gpu_provision.deploys.gpu_node; do
  quiet "$venv/pyinfra" @local "$deploy" --dry
  grep -q "NVIDIA driver | Driver packages (pinned, held)" "$work/out.log" || { tail -40 "$work/out.log"; exit 1; }
  echo "$deploy: planned"
done
step "the conformance suite from the installed wheel (its extra; collected, not run: this machine is no GPU node)"
"$venv/python" -m pip install -q "$wheel[conformance]"
quiet "$venv/pytest" -p no:cacheprovider --pyargs gpu_provision.conformance --collect-only -q --cluster local.yaml \
  --hosts=local:// --cluster-node this-machine
for test in "test_stage[local-driver]" "test_device_files[local]" "test_nvidia_runtime[local]"; do
  grep -qF "test_node.py::$test" "$work/out.log" || { tail -40 "$work/out.log"; echo "not collected: $test" >&2; exit 1; }
done
echo "conformance suite: $(grep -c '^test_node.py::' "$work/out.log") tests collected"
step "wheel smoke test passed"
