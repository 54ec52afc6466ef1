#!/bin/bash
# The GPU suite, defined once: its steps in order, the rule that a GPU test that skips fails, and
# the benchmark rows. Runs tools/gpu_pack.sh's payload (DIR/payload.tar.xz beside this script,
# copied as DIR/run.sh) on a machine with NVIDIA GPUs: a bare one that cannot build, after copying
# DIR there, or the build host itself (tools/gpu_suite.sh). Usage:
#   bash DIR/run.sh [BUDGET_S [NAME COMMAND...]]
#   tools/gpu_pack_run.sh --check | --binaries | --tests
# BUDGET_S (default 540): every step ends within it; a step that would start with under 20 s left
# is NOT RUN, which fails the suite. The time limits below are for 540 s and grow in proportion
# with a larger budget. NAME COMMAND...: one more step, run last from the caller's directory with
# what is left of the budget (tools/gpu_suite.sh adds TensorFlow's GPU test so). --check: exit 2
# with a message unless nvidia-smi lists a GPU. --binaries, --tests: the binaries (paths under
# bazel-bin) and Bazel test labels of the steps, for tools/gpu_pack.sh.
# Needs the NVIDIA driver (nvidia-smi), python3 with pytest ($ARD_PYTHON if set), and libnccl.so.2:
# from $ARD_NCCL_DIR, else $LD_LIBRARY_PATH, else python3's nvidia.nccl package (pip
# nvidia-nccl-cu*), else /usr/local/cuda/lib64. Prints what it found (GPU, driver, NCCL version and path), runs each step
# under its time limit, and ends with one summary line per step. Exit 0 only when every step
# passed; a step whose output says "SKIPPED (no GPU)" or "no GPU here" failed (on a GPU machine a
# skip means the GPU was not usable).
set -u

# The steps, in run order. C++ tests: path under bazel-bin and time limit (s) at the default budget.
# //daemon/gpu/... runs too: in a CUDA build gpu_plan_test queries the real GPUs.
cc_tests=(
  daemon/gpu/cuda_device_test 30
  daemon/gpu/fusion_layout_test 30
  daemon/gpu/gpu_plan_test 30
  daemon/gpu/gpu_job_test 30
  daemon/gpu/testing/host_device_test 30
  client/gpu_staging_test 30
  client/client_device_test 30
  ctl/bench_nccl_test 30
  tests/gpu/real_device_test 90
  tests/gpu/ipc_end_to_end_test 60
  tests/gpu/daemon_device_submit_test 60
  tests/gpu/daemon_device_collectives_test 90
)
# Then suite_bench (below), then the Python tests in tests/gpu (real daemons and allreducectl).
bench_limit=150
py_tests=(bench_device_test 200 two_daemons_hierarchical_test 150)
tools=(daemon/allreduced ctl/allreducectl)

case "${1:-}" in
  --binaries)
    for ((i = 0; i < ${#cc_tests[@]}; i += 2)); do echo "${cc_tests[i]}"; done
    printf '%s\n' "${tools[@]}"
    exit 0
    ;;
  --tests)
    for ((i = 0; i < ${#cc_tests[@]}; i += 2)); do
      echo "//$(dirname "${cc_tests[i]}"):$(basename "${cc_tests[i]}")"
    done
    for ((i = 0; i < ${#py_tests[@]}; i += 2)); do echo "//tests/gpu:${py_tests[i]}"; done
    exit 0
    ;;
esac
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L; then
  echo "GPU suite: no NVIDIA GPU/driver visible (nvidia-smi -L failed); nothing to run" >&2
  exit 2
fi
[ "${1:-}" = --check ] && exit 0
budget=${1:-540}
if ! [[ "$budget" =~ ^[0-9]+$ ]]; then
  echo "usage: bash DIR/run.sh [BUDGET_S [NAME COMMAND...]] (BUDGET_S in seconds, not '$budget')" >&2
  exit 1
fi
[ $# -gt 0 ] && shift
t0=$(date +%s)
python=${ARD_PYTHON:-python3}
origin=$PWD
here=$(cd "$(dirname "$0")" && pwd)
gpus=$(nvidia-smi -L | grep -c '^GPU ')
top=$(mktemp -d /tmp/ard-gpu-run.XXXXXX)
trap 'rm -rf "$top"' EXIT
tar -xJf "$here/payload.tar.xz" -C "$top" || exit 1
A=$top/ard
echo "== built from: $(tr '\n' ' ' <"$A/BUILT")"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
echo "$(head -1 /etc/os-release 2>/dev/null), $(ldd --version | head -1), kernel $(uname -r)"

nccl_dir=
lib_path=${LD_LIBRARY_PATH:-}
for d in ${ARD_NCCL_DIR:-} ${lib_path//:/ }; do
  [ -e "$d/libnccl.so.2" ] && nccl_dir=$d && break
done
[ -e "$nccl_dir/libnccl.so.2" ] || nccl_dir=$("$python" -c 'import os, nvidia.nccl as n
print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null) || true
[ -e "$nccl_dir/libnccl.so.2" ] || nccl_dir=/usr/local/cuda/lib64
if [ ! -e "$nccl_dir/libnccl.so.2" ]; then
  echo "gpu_pack_run: no libnccl.so.2 (ARD_NCCL_DIR, LD_LIBRARY_PATH, $python's nvidia.nccl," \
    "/usr/local/cuda/lib64)" >&2
  exit 1
fi
echo "== NCCL: $("$python" -c "import ctypes; v = ctypes.c_int(); ctypes.CDLL('$nccl_dir/libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(f'{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}')") at $nccl_dir"
# The carried libraries only for our binaries (python and the extra step keep the machine's own).
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
  [ "$budget" -gt 540 ] && limit=$((limit * budget / 540))
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
# One daemon; `allreducectl bench --device gpu --check` next to NCCL's own allreduce on the same
# GPUs, float32 sum, 4 B to 64 MiB, for each process count given. Runs in `bash -c` under step.
# shellcheck disable=SC2317
suite_bench() {
  local d st=0 pid np
  d=$(mktemp -d /tmp/ard-sb.XXXXXX)
  "$A/wrap/allreduced" --cluster_address=127.0.0.1:0 --host_name=gpu-suite \
    --local_socket="$d/d.sock" --port_file="$d/d.port" >"$d/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    [ -s "$d/d.port" ] && break
    sleep 0.1
  done
  if [ ! -s "$d/d.port" ]; then
    echo "the daemon did not start:"
    cat "$d/daemon.log"
    kill -KILL "$pid" 2>/dev/null
    rm -rf "$d"
    return 1
  fi
  for np in "$@"; do
    echo "-- allreducectl bench --device gpu --peer nccl --np $np --sizes 4:64M --warmup 5 --iters 20 --check"
    "$A/wrap/allreducectl" bench --device gpu --peer nccl --sockets "$d/d.sock" --np "$np" \
      --sizes 4:64M --warmup 5 --iters 20 --check --timeout_ms 900000 || st=1
  done
  kill -TERM "$pid"
  wait "$pid" || { echo "the daemon exited $?" && st=1; }
  echo "-- daemon log"
  cat "$d/daemon.log"
  rm -rf "$d"
  return "$st"
}
export -f suite_bench
export A
cd "$A/bin" || exit 1
L=(env "LD_LIBRARY_PATH=$ARD_LD")
for ((i = 0; i < ${#cc_tests[@]}; i += 2)); do
  t=$(basename "${cc_tests[i]}")
  step "$t" "${cc_tests[i + 1]}" "${L[@]}" "./$t" --durations yes
done
# One process; two (sharing GPU 0 on a one-GPU machine); one per GPU where there are more.
nps=(1 2)
[ "$gpus" -gt 2 ] && nps+=("$gpus")
step suite_bench "$bench_limit" bash -c 'suite_bench "$@"' suite_bench "${nps[@]}"
py=(env PYTHONUNBUFFERED=1 "$python" "$A/py/tests/pytest_main.py" "allreduced=$A/wrap/allreduced"
  "allreducectl=$A/wrap/allreducectl")
for ((i = 0; i < ${#py_tests[@]}; i += 2)); do
  step "${py_tests[i]}" "${py_tests[i + 1]}" "${py[@]}" "$A/py/tests/gpu/${py_tests[i]}.py" -v
done
extra=${1:-}
if [ -n "$extra" ]; then
  shift
  step "$extra" "$budget" env -C "$origin" "$@"
fi
echo
echo "=== summary ($(($(date +%s) - t0))s, $gpus GPU(s)$([ -n "$extra" ] ||
  echo "; TensorFlow's GPU test not run: tools/gpu_suite.sh runs it on a host that builds"))"
printf '%s\n' "${summary[@]}"
exit $failed
