#!/bin/bash
# The GPU suite (issue 6) on a host with NVIDIA GPUs that can build: the driver, and the CUDA
# toolkit + NCCL under $CUDA_PATH (default /usr/local/cuda). Usage, from the repository root:
#   tools/gpu_suite.sh [BUDGET_S]   (default 3600)
# Does what only a building host can: tools/bootstrap.sh, TensorFlow's GPU wheel in .venv, and
# tools/gpu_pack.sh into a temporary directory. Then runs that payload's run.sh (tools/
# gpu_pack_run.sh: the suite's steps, the benchmark rows next to NCCL, a skip fails) within
# BUDGET_S seconds, with the NCCL the build used, .venv's python (as Bazel's py_test) and
# TensorFlow's GPU kernels' test (//tests/tf:tf_gpu_test) as its last step. Exit status 0 only when every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-3600}
bash tools/gpu_pack_run.sh --check  # fails at once, with a message, where there is no GPU

tools/bootstrap.sh  # packages and .venv, as for tools/test_all.sh
# The TensorFlow GPU kernels' test needs TensorFlow's GPU wheel (CI's venv has tensorflow-cpu).
if ! .venv/bin/python -c "import sys, tensorflow as tf
sys.exit(0 if tf.config.list_physical_devices('GPU') else 1)" 2>/dev/null; then
  tf_version=$(sed -n 's/^tensorflow-cpu==//p' tools/requirements.txt)
  echo "== gpu_suite: installing tensorflow[and-cuda]==$tf_version into .venv for //tests/tf:tf_gpu_test"
  .venv/bin/pip uninstall -y -q tensorflow-cpu
  .venv/bin/pip install -q "tensorflow[and-cuda]==$tf_version"
fi
work=$(mktemp -d /tmp/ard-gpu-suite.XXXXXX)
trap 'rm -rf "$work"' EXIT
tools/gpu_pack.sh "$work"
bazel build //tests/tf:tf_gpu_test  # before the budget starts; the step only runs it

status=0
ARD_NCCL_DIR="$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/lib64" ARD_PYTHON="$PWD/.venv/bin/python" \
  bash "$work/run.sh" "$budget" \
  tf_gpu_test bazel test --test_output=all --cache_test_results=no //tests/tf:tf_gpu_test ||
  status=$?
[[ $status -eq 0 ]] && echo "gpu_suite: all GPU tests and benchmarks passed" || echo "gpu_suite: FAILED" >&2
exit $status
