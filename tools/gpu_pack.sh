#!/bin/bash
# Packs the GPU suite for a machine with NVIDIA GPUs. Run on a build host with the CUDA toolkit +
# NCCL under $CUDA_PATH (default /usr/local/cuda):
#   tools/gpu_pack.sh DIR
# builds the binaries that tools/gpu_pack_run.sh's steps run (`--binaries`: the GPU tests,
# allreduced, allreducectl) and writes DIR/payload.tar.xz (those binaries stripped, every shared
# library they load except glibc, libstdc++, libgcc_s, libcuda and libnccl, and the Python GPU
# tests with their harness) and DIR/run.sh (tools/gpu_pack_run.sh). Fails when the build found no
# CUDA + NCCL, or when a test in //tests/gpu/... or //daemon/gpu/... is not one of the runner's
# steps. Run `bash DIR/run.sh` on the GPU machine (see that script) after copying DIR there; the
# GPU machine's glibc and libstdc++ must be as new as this host's (the carried libraries are
# Debian's). tools/gpu_suite.sh packs and runs it on this host.
set -euo pipefail
out=${1:?usage: tools/gpu_pack.sh DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."

mapfile -t binaries < <(bash tools/gpu_pack_run.sh --binaries)
all_tests=$(bazel query 'tests(//tests/gpu/... + //daemon/gpu/...)' 2>/dev/null)
unlisted=$(comm -23 <(sort <<<"$all_tests") <(bash tools/gpu_pack_run.sh --tests | sort))
if [ -n "$unlisted" ]; then
  echo "gpu_pack: not a step of tools/gpu_pack_run.sh (add it there): $(tr '\n' ' ' <<<"$unlisted")" >&2
  exit 1
fi
labels=()
for b in "${binaries[@]}"; do labels+=("//$(dirname "$b"):$(basename "$b")"); done
bazel build "${labels[@]}"
if grep -q "CUDA_ENABLED = False" "$(bazel info output_base)/external/local_config_cuda/defs.bzl"; then
  echo "gpu_pack: this build found no CUDA toolkit + NCCL (set CUDA_PATH)" >&2
  exit 1
fi
bin=$(bazel info bazel-bin 2>/dev/null)
stage=$(mktemp -d /tmp/ard-gpu-pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/ard/bin" "$stage/ard/lib" "$stage/ard/py/tests/gpu" \
  "$stage/ard/py/tests/integration"
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
mkdir -p "$stage/ard/py/python/allreduced"  # harness.py imports allreduced.launch
cp -r python/allreduced/__init__.py python/allreduced/launch \
  "$stage/ard/py/python/allreduced/"
cp tests/pytest_main.py "$stage/ard/py/tests/"
{
  git rev-parse HEAD
  grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\) ' "$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/include/nccl.h" |
    awk '{printf "%s%s", sep, $3; sep="."} END {print " (NCCL headers built against)"}'
} >"$stage/ard/BUILT"
tar -C "$stage" -cJf "$out/payload.tar.xz" ard
cp tools/gpu_pack_run.sh "$out/run.sh"
echo "gpu_pack: $(du -sh "$out" | cut -f1) in $out; on the GPU machine: bash $(basename "$out")/run.sh"
