#!/bin/bash
# The GPU suite, defined once: its steps in order, the checks before them, the rule that a GPU test
# that skips fails, and the benchmark rows. Runs tools/gpu_pack.sh's payload (DIR/payload.tar.xz
# beside this script, copied as DIR/run.sh) on a bare machine with NVIDIA GPUs (no Bazel, no
# network), or on the build host itself (tools/gpu_suite.sh). Usage:
#   bash DIR/run.sh [--dry-run] [BUDGET_S [NAME COMMAND...]]
#   tools/gpu_pack_run.sh --binaries | --tests | --check
# BUDGET_S (default 480): every step ends within it; a step that would start with under 15 s left
# is NOT RUN, which fails the suite. Step limits below are for 480 s and grow in proportion with a
# larger budget. NAME COMMAND...: one more step, run last from the caller's directory with what is
# left (tools/gpu_suite.sh adds TensorFlow's GPU test so).
# Checks first, each one stops the suite with its reason: an NVIDIA GPU and driver (nvidia-smi);
# driver R580 or newer (the binaries are built with CUDA 13, which needs it); glibc at least the
# build host's; libnccl.so.2 from $ARD_NCCL_DIR, else $LD_LIBRARY_PATH, else python3's nvidia.nccl
# package, else /usr/local/cuda/lib64 (its version printed beside the headers built against).
# Every test case runs in its own process (a fresh CUDA context each: CUDA after fork() is
# undefined), one C++ TEST_CASE or one pytest item at a time. A case whose output says "SKIPPED (no
# GPU)" fails on a GPU machine (the GPU was not usable). Exit 0 only when every step passed.
# --dry-run: for a machine without a GPU (the pack's own test): no driver checks, and skips are
# expected; what runs for real there is what runs on the host doubles (the daemon's GPU path on
# daemon/gpu/testing, the client's on client/testing/fake_cuda.cc).
# --binaries, --tests: paths under bazel-bin and Bazel labels of the steps, for tools/gpu_pack.sh.
set -u

# The C++ steps, in run order: path under bazel-bin, limit (s) for all of its cases together.
cc_tests=(
  daemon/gpu/testing/host_device_test 20
  daemon/gpu/fusion_layout_test 10
  daemon/gpu/gpu_plan_test 15
  daemon/gpu/gpu_job_one_host_test 25
  daemon/gpu/gpu_job_two_hosts_test 25
  daemon/gpu_daemon_one_host_test 20
  daemon/gpu_daemon_failure_test 20
  daemon/gpu_daemon_cross_host_test 25
  daemon/gpu_daemon_unregister_test 15
  client/gpu_staging_test 10
  client/client_device_test 10
  client/session_gpu_test 10
  ctl/bench_nccl_test 15
  daemon/gpu/cuda_device_test 20
  tests/gpu/real_device_test 40
  tests/gpu/ipc_end_to_end_test 30
  tests/gpu/daemon_device_submit_test 40
  tests/gpu/daemon_device_collectives_test 50
)
# Then the Python tests in tests/gpu (real daemons, real trainers: allreducectl bench processes).
py_tests=(
  trainer_kill_test 90
  two_daemons_hierarchical_test 90
  nccl_one_gpu_test 40
  bench_device_test 90
)
bench_limit=90 # suite_bench: the GPU rows next to NCCL's own
tools=(daemon/allreduced ctl/allreducectl)
extras=(client/testing/libfake_cuda.so) # beside the tests that load it

case "${1:-}" in
  --binaries)
    for ((i = 0; i < ${#cc_tests[@]}; i += 2)); do echo "${cc_tests[i]}"; done
    printf '%s\n' "${tools[@]}" "${extras[@]}"
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
dry=0
if [ "${1:-}" = --dry-run ]; then
  dry=1
  shift
fi
stop() { # the suite cannot run here: why, and exit 2
  echo "GPU suite: $*" >&2
  exit 2
}
if [ "$dry" = 0 ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1 ||
    stop "no NVIDIA GPU/driver visible (nvidia-smi -L failed); nothing to run"
  [ "${1:-}" = --check ] && exit 0
  driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1)
  [ "${driver%%.*}" -ge 580 ] 2>/dev/null ||
    stop "NVIDIA driver $driver is older than R580, which CUDA 13 (these binaries) needs:" \
      "install driver 580 or newer"
fi
budget=${1:-480}
[[ "$budget" =~ ^[0-9]+$ ]] || stop "usage: bash DIR/run.sh [--dry-run] [BUDGET_S [NAME COMMAND...]]"
[ $# -gt 0 ] && shift
t0=$(date +%s)
python=${ARD_PYTHON:-python3}
origin=$PWD
here=$(cd "$(dirname "$0")" && pwd)
top=$(mktemp -d /tmp/ard-gpu-run.XXXXXX)
trap 'rm -rf "$top"' EXIT
tar -xJf "$here/payload.tar.xz" -C "$top" || stop "cannot unpack $here/payload.tar.xz"
A=$top/ard
echo "== built from: $(tr '\n' ' ' <"$A/BUILT")"
[ "$dry" = 1 ] && echo "== DRY RUN: no GPU checks; GPU cases must skip, the host doubles' cases run"
[ "$dry" = 0 ] && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
glibc=$(ldd --version | head -1 | grep -o '[0-9.]*$')
need=$(sed -n 's/^glibc //p' "$A/BUILT")
echo "== $(head -1 /etc/os-release 2>/dev/null), glibc $glibc (built with $need), kernel $(uname -r)"
[ "$(printf '%s\n%s\n' "$need" "$glibc" | sort -V | head -1)" = "$need" ] ||
  stop "glibc $glibc is older than the build host's $need: the carried binaries cannot load"
"$python" -c 'import sys; assert sys.version_info >= (3, 8)' 2>/dev/null ||
  stop "no python3 >= 3.8 ($python; set ARD_PYTHON) for the Python tests"

nccl_dir=
lib_path=${LD_LIBRARY_PATH:-}
for d in ${ARD_NCCL_DIR:-} ${lib_path//:/ }; do
  [ -e "$d/libnccl.so.2" ] && nccl_dir=$d && break
done
[ -e "$nccl_dir/libnccl.so.2" ] || nccl_dir=$("$python" -c 'import os, nvidia.nccl as n
print(os.path.join(list(n.__path__)[0], "lib"))' 2>/dev/null) || true
[ -e "$nccl_dir/libnccl.so.2" ] || nccl_dir=/usr/local/cuda/lib64
if [ -e "$nccl_dir/libnccl.so.2" ]; then
  echo "== NCCL $("$python" -c "import ctypes; v = ctypes.c_int(); ctypes.CDLL('$nccl_dir/libnccl.so.2').ncclGetVersion(ctypes.byref(v)); print(f'{v.value // 10000}.{v.value // 100 % 100}.{v.value % 100}')" 2>&1) at $nccl_dir"
elif [ "$dry" = 0 ]; then
  stop "no libnccl.so.2 (ARD_NCCL_DIR, LD_LIBRARY_PATH, $python's nvidia.nccl, /usr/local/cuda/lib64)"
fi
export ARD_NCCL_DIR=$nccl_dir # for nccl_one_gpu_test
# The carried libraries only for our binaries (python and the extra step keep the machine's own).
export ARD_LD="$A/lib:$nccl_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
mkdir -p "$A/wrap"
for b in allreduced allreducectl; do
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s/bin/%s" "$@"\n' "$ARD_LD" "$A" "$b" >"$A/wrap/$b"
  chmod +x "$A/wrap/$b"
done
missing=$(cd "$A/bin" && for b in *; do LD_LIBRARY_PATH=$ARD_LD ldd "$b" | grep 'not found'; done)
[ -z "$missing" ] || stop "the carried binaries cannot load: $(sort -u <<<"$missing" | tr -s ' \n' ' ')"

summary=()
failed=0
# step NAME LIMIT_S CASE_LISTER CASE_COMMAND: runs every case the lister prints, each as its own
# process (the command CASE_COMMAND sets in `cmd`) under what is left of the step's limit; one
# summary line per step.
step() {
  local name=$1 limit=$2 lister=$3 runner=$4
  local left=$((budget - ($(date +%s) - t0)))
  if [ "$left" -lt 15 ]; then
    summary+=("$name: NOT RUN (budget)")
    failed=1
    return
  fi
  [ "$budget" -gt 480 ] && limit=$((limit * budget / 480))
  [ "$limit" -gt $((left - 5)) ] && limit=$((left - 5))
  echo
  echo "=== $name (limit ${limit}s)"
  local start=$SECONDS log="$A/$name.log" cases=0 bad=0 skipped=0 c rc
  mapfile -t list < <($lister)
  [ ${#list[@]} -gt 0 ] || { summary+=("$name: FAILED (no test cases listed)") && failed=1 && return; }
  for c in "${list[@]}"; do
    local rest=$((limit - (SECONDS - start)))
    if [ "$rest" -lt 1 ]; then
      echo "--- $c: NOT RUN (step limit)" | tee -a "$log"
      bad=$((bad + 1))
      continue
    fi
    echo "--- $c" | tee -a "$log"
    $runner "$c"
    timeout -k 5 "$rest" "${cmd[@]}" >"$A/case.log" 2>&1
    rc=$?
    cat "$A/case.log" >>"$log"
    cases=$((cases + 1))
    if grep -q "SKIPPED (no GPU)\|no GPU here" "$A/case.log"; then
      skipped=$((skipped + 1))
      [ "$dry" = 1 ] || rc=1
    fi
    if [ "$rc" -ne 0 ]; then
      bad=$((bad + 1))
      tail -40 "$A/case.log"
      echo "--- $c: FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ", timed out"))"
    fi
    grep -h "^NCCL \(REFUSED\|ACCEPTED\)" "$A/case.log"
  done
  local verdict="passed"
  [ "$bad" -eq 0 ] || { verdict="FAILED ($bad of ${#list[@]} cases)" && failed=1; }
  [ "$skipped" -eq 0 ] || verdict="$verdict, $skipped skipped (no GPU)"
  summary+=("$name: $verdict, $cases cases in $((SECONDS - start))s")
}
# C++ cases: Catch2's names, escaped for its test spec (\ , [ ] are special).
cc_cases() { LD_LIBRARY_PATH=$ARD_LD "./$cc" --list-test-names-only | grep -v '^$'; }
cc_case() { cmd=(env "LD_LIBRARY_PATH=$ARD_LD" "./$cc" "$(sed 's/[][\\,]/\\&/g' <<<"$1")"); }
py=(env PYTHONUNBUFFERED=1 "PYTHONPATH=$A/py/site" "$python" "$A/py/tests/pytest_main.py"
  "allreduced=$A/wrap/allreduced" "allreducectl=$A/wrap/allreducectl")
# Python cases: pytest's node ids (pytest_main.py already passes -q, so one id a line).
py_cases() { (cd "$A/py/tests/gpu" && "${py[@]}" --collect-only "$pyt.py" | grep '::'); }
py_case() { cmd=(env -C "$A/py/tests/gpu" "${py[@]}" -v "$1"); }
# One daemon; `allreducectl bench --device gpu --check` next to NCCL's own allreduce through the
# same GPUs (nccl-tests-style algbw/busbw rows, then ratios), float32 sum, 4 B to 64 MiB.
bench_cases() {
  echo 1
  echo 2 # two processes sharing GPU 0 on a one-GPU machine
  [ "$gpus" -gt 2 ] && echo "$gpus"
}
bench_case() { cmd=(bash -c 'suite_bench "$@"' suite_bench "$1"); }
suite_bench() {
  local d st=0 pid
  d=$(mktemp -d /tmp/ard-sb.XXXXXX)
  "$A/wrap/allreduced" --cluster_address=127.0.0.1:0 --host_name=gpu-suite \
    --local_socket="$d/d.sock" --port_file="$d/d.port" >"$d/daemon.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 100); do
    [ -s "$d/d.port" ] && break
    sleep 0.1
  done
  if [ -s "$d/d.port" ]; then
    echo "-- allreducectl bench --device gpu --peer nccl --np $1 --sizes 4:64M --check"
    "$A/wrap/allreducectl" bench --device gpu --peer nccl --sockets "$d/d.sock" --np "$1" \
      --sizes 4:64M --warmup 5 --iters 20 --check --timeout_ms 60000 2>&1 | tee "$d/bench.out"
    [ "${PIPESTATUS[0]}" -eq 0 ] || st=1
    # Without a GPU the client refuses at once; on a GPU machine the skip then fails the step.
    if [ "$st" = 1 ] && grep -q "no CUDA driver/device" "$d/bench.out"; then
      echo "SKIPPED (no GPU) suite_bench --np $1"
      st=0
    fi
  else
    echo "the daemon did not start:"
    st=1
  fi
  kill -TERM "$pid" 2>/dev/null
  wait "$pid" || { echo "the daemon exited $?" && st=1; }
  echo "-- daemon log"
  cat "$d/daemon.log"
  rm -rf "$d"
  return "$st"
}
gpus=0
[ "$dry" = 0 ] && gpus=$(nvidia-smi -L | grep -c '^GPU ')
export -f suite_bench
export A
cd "$A/bin" || exit 1
for ((i = 0; i < ${#cc_tests[@]}; i += 2)); do
  cc=$(basename "${cc_tests[i]}")
  step "$cc" "${cc_tests[i + 1]}" cc_cases cc_case
done
for ((i = 0; i < ${#py_tests[@]}; i += 2)); do
  pyt=${py_tests[i]}
  step "$pyt" "${py_tests[i + 1]}" py_cases py_case
done
step suite_bench "$bench_limit" bench_cases bench_case
extra=${1:-}
if [ -n "$extra" ]; then
  shift
  extra_cmd=("$@")
  extra_cases() { echo "$extra"; }
  extra_case() { cmd=(env -C "$origin" "${extra_cmd[@]}"); }
  step "$extra" "$budget" extra_cases extra_case
fi
echo
echo "=== summary ($(($(date +%s) - t0))s, $gpus GPU(s)$([ "$dry" = 1 ] && echo ", DRY RUN: nothing ran on a GPU")$([ -n "$extra" ] ||
  echo "; TensorFlow's GPU test not run: tools/gpu_suite.sh runs it on a host that builds"))"
printf '%s\n' "${summary[@]}"
exit $failed
