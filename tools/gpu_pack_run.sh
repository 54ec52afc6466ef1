#!/bin/bash
# Runs the GPU suite from tools/gpu_pack.sh's payload on a GPU machine that cannot build (copied
# there as DIR/run.sh beside DIR/payload.tar.xz). Usage, on that machine:
#   bash DIR/run.sh [BUDGET_S]   (default 540: every step ends within it; later steps are skipped)
# Needs the NVIDIA driver (nvidia-smi), python3 with pytest, and libnccl.so.2: from
# $LD_LIBRARY_PATH, else python3's nvidia.nccl package (pip nvidia-nccl-cu*), else
# /usr/local/cuda/lib64. Prints what it found (GPU, driver, NCCL version and path), then runs, each
# under a time limit: the C++ GPU tests (real CUDA/NCCL device, CUDA IPC between processes, real
# daemons serving ard_submit_device), one daemon with `allreducectl bench --device gpu --check`
# next to NCCL (one process, then two sharing GPU 0), and the Python GPU tests
# (bench_device_test, two_daemons_hierarchical_test). Not run: TensorFlow's GPU kernels
# (//tests/tf:tf_gpu_test needs Bazel and TensorFlow's GPU wheel). Exit 0 only when every step
# passed and none skipped for want of a GPU; the last lines are a one-line-per-step summary.
set -u
budget=${1:-540}
t0=$(date +%s)
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "gpu_pack_run: no NVIDIA GPU/driver visible (nvidia-smi -L failed); nothing to run" >&2
  exit 2
fi
A=$(mktemp -d /tmp/ard-gpu-run.XXXXXX)
tar -xJf "$here/payload.tar.xz" -C "$A" || exit 1
A=$A/ard
echo "== built from: $(tr '\n' ' ' <"$A/BUILT")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "$(head -1 /etc/os-release 2>/dev/null), $(ldd --version | head -1), kernel $(uname -r)"

nccl_dir=
for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do
  [ -e "$d/libnccl.so.2" ] && nccl_dir=$d && break
done
[ -n "$nccl_dir" ] || nccl_dir=$(python3 -c 'import os, nvidia.nccl as n
print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null) || true
[ -e "$nccl_dir/libnccl.so.2" ] || nccl_dir=/usr/local/cuda/lib64
if [ ! -e "$nccl_dir/libnccl.so.2" ]; then
  echo "gpu_pack_run: no libnccl.so.2 (LD_LIBRARY_PATH, python3's nvidia.nccl, /usr/local/cuda)" >&2
  exit 1
fi
echo "== NCCL: $(python3 -c "import ctypes; v = ctypes.c_int(); ctypes.CDLL('$nccl_dir/libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(f'{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}')") at $nccl_dir"
# The carried libraries only for our binaries (python3 keeps the machine's own).
export ARD_LD="$A/lib:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$A/wrap"
for b in allreduced allreducectl; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s/bin/%s" "$@"\n' "$ARD_LD" "$A" "$b" >"$A/wrap/$b"
  chmod +x "$A/wrap/$b"
done
if LD_LIBRARY_PATH=$ARD_LD ldd "$A/bin/allreduced" | grep 'not found'; then
  echo "gpu_pack_run: allreduced cannot load the libraries above" >&2
  exit 1
fi

summary=()
failed=0
step() {  # name limit_s command...: runs it with its output in the log and a line in the summary
  local name=$1 limit=$2
  shift 2
  local left=$((budget - ($(date +%s) - t0)))
  if [ "$left" -lt 20 ]; then
    summary+=("$name: NOT RUN (budget)")
    failed=1
    return
  fi
  [ "$limit" -gt $((left - 10)) ] && limit=$((left - 10))
  echo
  echo "=== $name (limit ${limit}s)"
  local start=$SECONDS log="$A/$name.log"
  timeout -k 5 "$limit" "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]} verdict=passed
  if [ "$rc" -ne 0 ]; then
    verdict="FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out"))"
  elif grep -q "SKIPPED (no GPU)\|no GPU here" "$log"; then
    verdict="FAILED (skipped on a GPU machine)"
  fi
  [ "$verdict" = passed ] || failed=1
  summary+=("$name: $verdict in $((SECONDS - start))s")
}
suite_bench() {  # one daemon; bench --device gpu next to NCCL, 1 then 2 processes on the GPUs
  local d st=0 pid
  d=$(mktemp -d /tmp/ard-sb.XXXXXX)
  "$A/wrap/allreduced" --cluster_address=127.0.0.1:0 --host_name=gpu-pack \
    --local_socket="$d/d.sock" --port_file="$d/d.port" >"$d/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    [ -s "$d/d.port" ] && break
    sleep 0.1
  done
  for np in 1 2; do
    echo "-- allreducectl bench --device gpu --peer nccl --np $np --sizes 4:64M --warmup 5 --iters 20 --check"
    "$A/wrap/allreducectl" bench --device gpu --peer nccl --sockets "$d/d.sock" --np "$np" \
      --sizes 4:64M --warmup 5 --iters 20 --check --timeout_ms 900000 || st=1
  done
  kill -TERM "$pid"
  wait "$pid" || { echo "the daemon exited $?" && st=1; }
  echo "-- daemon log"
  cat "$d/daemon.log"
  return $st
}
export -f suite_bench
export A
cd "$A/bin"
L=(env "LD_LIBRARY_PATH=$ARD_LD")
step cuda_device_test 30 "${L[@]}" ./cuda_device_test --durations yes
step gpu_staging_test 30 "${L[@]}" ./gpu_staging_test --durations yes
step client_device_test 30 "${L[@]}" ./client_device_test --durations yes
step bench_nccl_test 30 "${L[@]}" ./bench_nccl_test --durations yes
step real_device_test 90 "${L[@]}" ./real_device_test --durations yes
step ipc_end_to_end_test 60 "${L[@]}" ./ipc_end_to_end_test --durations yes
step daemon_device_submit_test 60 "${L[@]}" ./daemon_device_submit_test --durations yes
step daemon_device_collectives_test 90 "${L[@]}" ./daemon_device_collectives_test --durations yes
step suite_bench 150 bash -c suite_bench
py=(env PYTHONUNBUFFERED=1 python3 "$A/py/tests/pytest_main.py" "allreduced=$A/wrap/allreduced"
  "allreducectl=$A/wrap/allreducectl")
step bench_device_test 200 "${py[@]}" "$A/py/tests/gpu/bench_device_test.py" -v
step two_daemons_hierarchical_test 150 "${py[@]}" \
  "$A/py/tests/gpu/two_daemons_hierarchical_test.py" -v
echo
echo "=== summary ($(($(date +%s) - t0))s; TensorFlow's GPU test not run: needs Bazel and its wheel)"
printf '%s\n' "${summary[@]}"
exit $failed
