#!/bin/bash
# The GPU suite for a GPU machine that cannot build: no Bazel, no Debian packages, no network —
# only the NVIDIA driver, python3 with pytest, and libnccl.so.2 (e.g. the nvidia-nccl-cu13 pip
# package). Run here, on a build host with the CUDA toolkit + NCCL (tools/gpu_suite.sh's needs):
#   tools/gpu_pack.sh DIR
# builds the GPU test binaries, allreduced and allreducectl, and writes DIR/payload.tar.xz (the
# stripped binaries, every shared library they load except glibc, libstdc++, libgcc_s, libcuda
# and libnccl, and the Python GPU tests with their harness) and DIR/run.sh (tools/gpu_pack_run.sh).
# Copy DIR to the GPU machine and run `bash DIR/run.sh` there (see that script). The carried
# libraries are this host's (Debian): the GPU machine's glibc and libstdc++ must be as new.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: tools/gpu_pack.sh DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)

bazel build //tests/gpu/... //daemon/gpu:cuda_device_test //client:gpu_staging_test \
  //client:client_device_test //client/cli:bench_nccl_test //daemon:allreduced \
  //client/cli:allreducectl
if grep -q "CUDA_ENABLED = False" "$(bazel info output_base)/external/local_config_cuda/defs.bzl"; then
  echo "gpu_pack: this build found no CUDA toolkit + NCCL (set CUDA_PATH)" >&2
  exit 1
fi
bin=$(bazel info bazel-bin 2>/dev/null)
stage=$(mktemp -d /tmp/ard-gpu-pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/ard/bin" "$stage/ard/lib" "$stage/ard/py/tests/gpu" \
  "$stage/ard/py/tests/integration"
binaries=(tests/gpu/real_device_test tests/gpu/ipc_end_to_end_test
  tests/gpu/daemon_device_submit_test tests/gpu/daemon_device_collectives_test
  daemon/gpu/cuda_device_test client/gpu_staging_test client/client_device_test
  client/cli/bench_nccl_test daemon/allreduced client/cli/allreducectl)
for b in "${binaries[@]}"; do
  cp "$bin/$b" "$stage/ard/bin/"
  chmod u+w "$stage/ard/bin/$(basename "$b")"
  strip "$stage/ard/bin/$(basename "$b")"
  ldd "$bin/$b" | awk '/=> \// {print $3}'
done | sort -u |
  grep -vE '/(libc|libm|libpthread|librt|libdl|libstdc\+\+|libgcc_s|libnccl|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/ard/lib/"; done
cp tests/gpu/*.py "$stage/ard/py/tests/gpu/"
cp tests/integration/harness.py "$stage/ard/py/tests/integration/"
cp tests/pytest_main.py "$stage/ard/py/tests/"
{
  git rev-parse HEAD
  grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\) ' "$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/include/nccl.h" |
    awk '{printf "%s%s", sep, $3; sep="."} END {print " (NCCL headers built against)"}'
} >"$stage/ard/BUILT"
tar -C "$stage" -cJf "$out/payload.tar.xz" ard
cp tools/gpu_pack_run.sh "$out/run.sh"
echo "gpu_pack: $(du -sh "$out" | cut -f1) in $out; on the GPU machine: bash $(basename "$out")/run.sh"
