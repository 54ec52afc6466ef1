#!/bin/bash
# The GPU suite (issue 6) on a host with NVIDIA GPUs that can build: the driver, and the CUDA
# toolkit + NCCL under $CUDA_PATH (default /usr/local/cuda). Usage, from the repository root:
#   tools/gpu_suite.sh [BUDGET_S]   (default 3600)
# Does what only a building host can: tools/bootstrap.sh, a virtual environment of its own with
# TensorFlow's GPU wheel, and tools/gpu_pack.sh into a temporary directory. Then runs that
# payload's run.sh (tools/gpu_pack_run.sh: the checks, the suite's steps, the benchmark rows next to
# NCCL, a skip fails) within BUDGET_S seconds, with the NCCL the build used, that environment's
# python and TensorFlow's GPU kernels' test (//tests/tf:tf_gpu_test, built against that
# environment through --repo_env=ALLREDUCED_VENV) as its last step. Exit status 0 only when every
# step passed.
# The shared per-machine environment (.venv -> $cache/venv-*, tensorflow-cpu) is never changed:
# the GPU one is $cache/gpu-venv-<hash of its requirements>, made once (locked, marked complete
# only after every install succeeded, like tools/bootstrap.sh's).
set -euo pipefail
cd "$(dirname "$0")/.."
budget=${1:-3600}
bash tools/gpu_pack_run.sh --check # fails at once, with a message, where there is no GPU

tools/bootstrap.sh # packages and .venv, as for tools/test_all.sh
cache=${ALLREDUCED_VENV_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/allreduced}
requirements=$(sed 's/^tensorflow-cpu==/tensorflow[and-cuda]==/' tools/requirements.txt)
want=$({ echo "$requirements" && cat tools/requirements_nodeps.txt; } | sha256sum | cut -d' ' -f1)
gv="$cache/gpu-venv-${want:0:16}"
mkdir -p "$cache"
(
  flock 9
  if [ ! -f "$gv/.complete" ]; then
    echo "gpu_suite: creating $gv (tensorflow[and-cuda] and the test packages from PyPI)" >&2
    rm -rf "$gv"
    python3 -m venv "$gv"
    "$gv/bin/pip" install -q --upgrade pip
    "$gv/bin/pip" install -q -r <(echo "$requirements")
    "$gv/bin/pip" install -q --no-deps -r tools/requirements_nodeps.txt
    touch "$gv/.complete"
  fi
) 9>"$cache/.gpu-lock"
work=$(mktemp -d /tmp/ard-gpu-suite.XXXXXX)
trap 'rm -rf "$work"' EXIT
tools/gpu_pack.sh "$work"
tf=(--repo_env=ALLREDUCED_VENV="$gv")
bazel build "${tf[@]}" //tests/tf:tf_gpu_test # before the budget starts; the step only runs it

status=0
ARD_NCCL_DIR="$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/lib64" ARD_PYTHON="$gv/bin/python" \
  bash "$work/run.sh" "$budget" \
  tf_gpu_test bazel test "${tf[@]}" --test_output=all --cache_test_results=no //tests/tf:tf_gpu_test ||
  status=$?
[[ $status -eq 0 ]] && echo "gpu_suite: all GPU tests and benchmarks passed" || echo "gpu_suite: FAILED" >&2
exit $status
