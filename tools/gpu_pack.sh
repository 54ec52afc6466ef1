#!/bin/bash
# Packs the GPU suite for a bare machine with NVIDIA GPUs (no Bazel, no network there). Run on a
# build host with the CUDA toolkit + NCCL under $CUDA_PATH (default /usr/local/cuda):
#   tools/gpu_pack.sh DIR
# builds what tools/gpu_pack_run.sh's steps run (`--binaries`: the GPU tests, the daemon's and the
# client's host-double tests, allreduced, allreducectl, the client's libcuda double) and writes
# DIR/payload.tar.xz: those binaries stripped, every shared library they load except glibc's,
# libstdc++, libgcc_s, libcuda and libnccl (the machine's own), the Python GPU tests with their
# harness and pytest itself (from .venv), and BUILT (commit, CUDA, NCCL headers, glibc); and
# DIR/run.sh (tools/gpu_pack_run.sh). Fails when the build found no CUDA + NCCL, when a GPU test
# (//tests/gpu/..., //daemon/gpu/..., //daemon:gpu_daemon_*) is not one of the runner's steps, or
# when DIR is over 60 MiB (the device tool carries 64 MiB). On the GPU machine, after copying DIR:
# `bash DIR/run.sh` (the pack's own test without a GPU: `bash DIR/run.sh --dry-run`).
# tools/gpu_suite.sh packs and runs it on a GPU host that builds.
set -euo pipefail
out=${1:?usage: tools/gpu_pack.sh DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
python=.venv/bin/python
[ -x "$python" ] || { echo "gpu_pack: no .venv (tools/bootstrap.sh) for pytest" >&2 && exit 1; }

mapfile -t binaries < <(bash tools/gpu_pack_run.sh --binaries)
all_tests=$(bazel query 'tests(//tests/gpu/... + //daemon/gpu/...) +
  filter("gpu_daemon_", tests(//daemon:all))' 2>/dev/null)
unlisted=$(comm -23 <(sort <<<"$all_tests") <(bash tools/gpu_pack_run.sh --tests | sort))
if [ -n "$unlisted" ]; then
  echo "gpu_pack: not a step of tools/gpu_pack_run.sh (add it there): $(tr '\n' ' ' <<<"$unlisted")" >&2
  exit 1
fi
labels=()
for b in "${binaries[@]}"; do # the label: the nearest package above the path
  pkg=$(dirname "$b")
  while [ ! -f "$pkg/BUILD" ] && [ ! -f "$pkg/BUILD.bazel" ]; do pkg=$(dirname "$pkg"); done
  labels+=("//$pkg:${b#"$pkg"/}")
done
bazel build "${labels[@]}"
if grep -q "CUDA_ENABLED = False" "$(bazel info output_base)/external/local_config_cuda/defs.bzl"; then
  echo "gpu_pack: this build found no CUDA toolkit + NCCL (set CUDA_PATH)" >&2
  exit 1
fi
bin=$(bazel info bazel-bin 2>/dev/null)
stage=$(mktemp -d /tmp/ard-gpu-pack.XXXXXX)
trap 'rm -rf "$stage"' EXIT
A=$stage/ard
mkdir -p "$A/bin" "$A/lib" "$A/py/tests/gpu" "$A/py/tests/integration" "$A/py/site" \
  "$A/py/python/allreduced"
for b in "${binaries[@]}"; do
  cp "$bin/$b" "$A/bin/"
  chmod u+w "$A/bin/$(basename "$b")"
  strip "$A/bin/$(basename "$b")"
  ldd "$bin/$b" | awk '/=> \// {print $3}'
done | sort -u |
  grep -vE '/(libc|libm|libpthread|librt|libdl|libresolv|libstdc\+\+|libgcc_s|libnccl|libcuda)\.so' |
  while read -r lib; do cp -L "$lib" "$A/lib/"; done
cp tests/gpu/*.py "$A/py/tests/gpu/"
cp tests/integration/harness.py "$A/py/tests/integration/"
cp tests/pytest_main.py "$A/py/tests/"
cp -r python/allreduced/__init__.py python/allreduced/launch "$A/py/python/allreduced/"
# pytest and what it imports, pure Python: the GPU machine needs only python3.
"$python" - "$A/py/site" <<'EOF'
import glob, importlib, os, shutil, sys
for name in ["pytest", "_pytest", "pluggy", "iniconfig", "packaging", "py", "exceptiongroup",
             "tomli"]:
    try:
        module = importlib.import_module(name)
    except ImportError:
        continue  # not needed by this pytest (or by this Python)
    path = module.__file__
    if os.path.basename(path) == "__init__.py":
        shutil.copytree(os.path.dirname(path), os.path.join(sys.argv[1], name),
                        ignore=shutil.ignore_patterns("__pycache__"))
    else:
        shutil.copy(path, sys.argv[1])
    # Its metadata too: pytest and pluggy read their own versions through importlib.metadata.
    site = os.path.dirname(os.path.dirname(path) if path.endswith("__init__.py") else path)
    for info in glob.glob(os.path.join(site, name.lstrip("_") + "-*.dist-info")):
        target = os.path.join(sys.argv[1], os.path.basename(info))
        if not os.path.exists(target):
            shutil.copytree(info, target)
EOF
{
  git rev-parse HEAD
  "$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/CUDA \1/p'
  grep -h '#define NCCL_\(MAJOR\|MINOR\|PATCH\) ' "$(readlink -f "${CUDA_PATH:-/usr/local/cuda}")/include/nccl.h" |
    awk '{printf "%s%s", sep, $3; sep="."} END {print " (NCCL headers built against)"}'
  echo "glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
} >"$A/BUILT"
tar -C "$stage" -cJf "$out/payload.tar.xz" ard
cp tools/gpu_pack_run.sh "$out/run.sh"
bytes=$(du -cb "$out/payload.tar.xz" "$out/run.sh" | tail -1 | cut -f1)
echo "gpu_pack: $((bytes / 1024)) KiB in $out ($(du -sh "$A" | cut -f1) unpacked);" \
  "on the GPU machine: bash $(basename "$out")/run.sh"
if [ "$bytes" -gt $((60 << 20)) ]; then
  echo "gpu_pack: over 60 MiB: the device tool carries 64 MiB in all" >&2
  exit 1
fi
