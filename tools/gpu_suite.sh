#!/bin/bash
# The GPU suite (issue 6), for a host with at least one NVIDIA GPU, the driver, and the CUDA
# toolkit + NCCL under $CUDA_PATH (default /usr/local/cuda). Usage, from the repository root:
#   tools/gpu_suite.sh
# 1. Builds with CUDA and runs tests/gpu and the GPU orchestration tests: the real CUDA/NCCL
#    device (every collective and dtype across the local GPUs), two processes on one GPU through
#    GpuJob via CUDA IPC, ard_submit_device through a real daemon, `allreducectl bench --device
#    gpu` (rows checked, NCCL peer), and two daemons on this host sharing GPU 0 in hierarchical
#    mode with a cross-host job (two_daemons_hierarchical_test), and TensorFlow's GPU kernels
#    (//tests/tf:tf_gpu_test, after putting TensorFlow's GPU wheel in .venv). Fails if any GPU
#    test skipped (on a GPU host a skip means the GPU was not usable).
# 2. Starts one daemon (as tools/main_job.sh does) and prints the benchmark rows of
#    `allreducectl bench --device gpu --check` next to NCCL's own allreduce on the same GPUs:
#    one rank per GPU, and with a single GPU also two processes sharing it.
# Exit status 0 only when every step passed.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_suite: no NVIDIA GPU/driver visible (nvidia-smi -L failed); nothing to run" >&2
  exit 2
fi
gpus=$(nvidia-smi -L | grep -c '^GPU ' || true)

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
daemon_pid=
cleanup() {
  [[ -n "$daemon_pid" ]] && kill -KILL "$daemon_pid" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
log="$work/test.log"
status=0

echo "== gpu_suite: GPU tests ($gpus GPU(s))"
bazel test --test_output=all --cache_test_results=no \
  //tests/gpu/... //daemon/gpu/... //client:gpu_staging_test //tests/tf:tf_gpu_test 2>&1 |
  tee "$log" || status=$?
if grep -q "SKIPPED (no GPU)" "$log" || grep -q "no GPU here" "$log"; then
  echo "gpu_suite: FAILED: a GPU test skipped on a GPU host (see 'SKIPPED (no GPU)' above)" >&2
  exit 1
fi
if grep -q "CUDA_ENABLED = False" "$(bazel info output_base)/external/local_config_cuda/defs.bzl"; then
  echo "gpu_suite: FAILED: this build found no CUDA toolkit + NCCL (set CUDA_PATH)" >&2
  exit 1
fi

echo
echo "== gpu_suite: allreducectl bench --device gpu against a real daemon, NCCL alongside"
bazel build //daemon:allreduced //client/cli:allreducectl
bin=$(bazel info bazel-bin 2>/dev/null)
"$bin/daemon/allreduced" --cluster_address=127.0.0.1:0 --host_name=gpu-suite \
  --local_socket="$work/d.sock" --port_file="$work/d.port" >"$work/daemon.log" 2>&1 &
daemon_pid=$!
for _ in $(seq 1 100); do
  [ -s "$work/d.port" ] && break
  sleep 0.1
done
if [ ! -s "$work/d.port" ]; then
  echo "gpu_suite: FAILED: the daemon did not start:" >&2
  cat "$work/daemon.log" >&2
  exit 1
fi
bench() {  # np
  echo
  echo "-- $1 process(es), one daemon, float32 sum, sizes 4 B to 64 MiB"
  "$bin/client/cli/allreducectl" bench --device gpu --peer nccl --sockets "$work/d.sock" \
    --np "$1" --sizes 4:64M --warmup 5 --iters 20 --check --timeout_ms 900000 || {
    echo "gpu_suite: FAILED: allreducectl bench --device gpu --np $1" >&2
    cat "$work/daemon.log" >&2
    status=1
  }
}
bench "$gpus"
[[ "$gpus" -eq 1 ]] && bench 2
kill -TERM "$daemon_pid"
wait "$daemon_pid" || { echo "gpu_suite: FAILED: the daemon did not exit 0" >&2; status=1; }
daemon_pid=

[[ $status -eq 0 ]] && echo "gpu_suite: all GPU tests and benchmarks passed" || echo "gpu_suite: FAILED" >&2
exit $status
