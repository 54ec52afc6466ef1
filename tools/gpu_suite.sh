#!/bin/bash
# The GPU suite (issue 6), for a host with at least one NVIDIA GPU, the driver, and the CUDA
# toolkit + NCCL under $CUDA_PATH (default /usr/local/cuda). Usage, from the repository root:
#   tools/gpu_suite.sh
# Builds with CUDA, runs tests/gpu (real CUDA/NCCL device: every collective and dtype across the
# local GPUs; two processes on one GPU through GpuJob via CUDA IPC) and the GPU orchestration
# tests, and fails if any GPU test skipped (on a GPU host a skip means the GPU was not usable).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_suite: no NVIDIA GPU/driver visible (nvidia-smi -L failed); nothing to run" >&2
  exit 2
fi
log=$(mktemp /tmp/ard-gpu-suite.XXXXXX)
status=0
bazel test --test_output=all --cache_test_results=no \
  //tests/gpu/... //daemon/gpu/... //client:gpu_staging_test 2>&1 | tee "$log" || status=$?
if grep -q "SKIPPED (no GPU)" "$log" || grep -q "no GPU here" "$log"; then
  echo "gpu_suite: FAILED: a GPU test skipped on a GPU host (see 'SKIPPED (no GPU)' above)" >&2
  exit 1
fi
if grep -q "CUDA_ENABLED = False" "$(bazel info output_base)/external/local_config_cuda/defs.bzl"; then
  echo "gpu_suite: FAILED: this build found no CUDA toolkit + NCCL (set CUDA_PATH)" >&2
  exit 1
fi
[[ $status -eq 0 ]] && echo "gpu_suite: all GPU tests passed" || echo "gpu_suite: FAILED" >&2
exit $status
