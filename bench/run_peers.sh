#!/usr/bin/env bash
# Measures allreduced against its peers on this machine, in one run:
#   daemon HxP (H hosts x P processes each): 1x4, 2x1, 2x2, 4x1, 8x1: allreduced daemons started
#     here (each one "host" on loopback, as tests/integration/harness.py does), measured with
#     `allreducectl bench --sockets ... --np P --check`; daemon HxP_shm (2x1, 2x2, 4x1): the same
#     with `--device shm` (tensors built in shared memory, results read in place);
#   at each process count of those cases (2, 4, 8): Gloo (gloo_allreduce_bench --np N, TCP on
#     loopback, best of its algorithm classes) and Open MPI TCP (btl tcp,self on lo); at 4 also
#     Open MPI shared memory (btl vader,self).
# Each case runs --repeat times; the report takes, per size, the median time of the repeats.
# Small sizes are noisy over --iters (15) iterations: each run of a case measures
# --small_sizes again with --small_iters iterations (its rows replace the first pass's; 0: off).
# Prints every table, keeps them in a log directory, and writes bench/RESULTS.md (side-by-side
# busbw, daemon/best-peer ratios at the same process count, 4 B latency) with
# bench/make_results.py, and COST_MODEL.md beside it (bench/cost_model.py: an alpha-beta model
# fitted to the daemon_Hx1 cases). A failing case is recorded (its error verbatim) and the
# others still run.
# See bench/README.md.
#
#   bench/run_peers.sh [--sizes 4:256M] [--warmup 3] [--iters 15] [--repeat 1]
#       [--small_sizes 4,1K,16K,64K] [--small_iters 1000]
#       [--cases daemon_2x1,gloo_2,...] [--out FILE] [--logs DIR]
#
# Binaries: $ARD_BIN_DIR (a Bazel bin directory) or the runfiles of `bazel run //bench:run_peers`
# or <repo>/bazel-bin; each can be overridden with ARD_BIN_ALLREDUCED, ARD_BIN_ALLREDUCECTL,
# ARD_BIN_GLOO_BENCH, ARD_BIN_MPI_BENCH. CASE_TIMEOUT_S bounds each run of a case (default 420).
# ARD_DAEMON_FLAGS adds flags to every daemon (e.g. --steady_state=false).
set -u -o pipefail

SIZES=4:256M
WARMUP=3
ITERS=15
REPEAT=1
SMALL_SIZES=4,1K,16K,64K
SMALL_ITERS=1000
# Every case, in run order: daemon_<hosts>x<per host>, the same with _shm (tensors built in shared
# memory, results read in place: no client copy), gloo_<np>, mpi_tcp_<np>, mpi_vader_<np>.
ALL_CASES=daemon_1x4,daemon_2x1,daemon_2x2,daemon_4x1,daemon_8x1,daemon_2x1_shm,daemon_2x2_shm,daemon_4x1_shm,gloo_2,gloo_4,gloo_8,mpi_tcp_2,mpi_tcp_4,mpi_tcp_8,mpi_vader_4
CASES=$ALL_CASES
REPO=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=$REPO/bench/RESULTS.md
LOGS=""
usage() {
  echo "usage: $0 [--sizes 4:256M] [--warmup 3] [--iters 15] [--repeat 1]" \
       "[--small_sizes 4,1K,16K,64K] [--small_iters 1000] [--cases LIST] [--out FILE]" \
       "[--logs DIR]; cases: $ALL_CASES" >&2
  exit 2
}
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --repeat) REPEAT=$2; shift 2 ;;
    --small_sizes) SMALL_SIZES=$2; shift 2 ;;
    --small_iters) SMALL_ITERS=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    *) usage ;;
  esac
done
[[ "$REPEAT" =~ ^[1-9][0-9]*$ ]] || usage
[[ "$SMALL_ITERS" =~ ^[0-9]+$ ]] || usage
for c in ${CASES//,/ }; do
  [[ ",$ALL_CASES," == *",$c,"* ]] || { echo "run_peers: unknown case '$c'" >&2; usage; }
done

# Binaries: explicit variables, else the first directory that has all four.
find_bin_dir() {
  local d
  for d in "${ARD_BIN_DIR:-}" "${RUNFILES_DIR:-$0.runfiles}/allreduced" "$REPO/bazel-bin"; do
    if [ -n "$d" ] && [ -x "$d/daemon/allreduced" ] && [ -x "$d/bench/gloo_allreduce_bench" ]; then
      echo "$d"
      return
    fi
  done
}
BIN_DIR=$(find_bin_dir)
ALLREDUCED=${ARD_BIN_ALLREDUCED:-$BIN_DIR/daemon/allreduced}
CTL=${ARD_BIN_ALLREDUCECTL:-$BIN_DIR/ctl/allreducectl}
GLOO=${ARD_BIN_GLOO_BENCH:-$BIN_DIR/bench/gloo_allreduce_bench}
MPI=${ARD_BIN_MPI_BENCH:-$BIN_DIR/bench/mpi_allreduce_bench}
for b in "$ALLREDUCED" "$CTL" "$GLOO" "$MPI"; do
  if [ ! -x "$b" ]; then
    echo "run_peers: missing binary '$b': build //bench/... //daemon:allreduced" \
         "//ctl:allreducectl and set ARD_BIN_DIR" >&2
    exit 2
  fi
done
command -v mpirun >/dev/null || { echo "run_peers: mpirun not found (openmpi-bin)" >&2; exit 2; }

[ -n "$LOGS" ] || LOGS=$(mktemp -d /tmp/ard-peers.XXXXXX)
mkdir -p "$LOGS"
WORK=$(mktemp -d /tmp/ardp.XXXXXX)  # daemons' sockets: short paths (sun_path is 108 bytes)
DAEMON_PIDS=()

stop_daemons() {
  local pid
  for pid in "${DAEMON_PIDS[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${DAEMON_PIDS[@]}"; do wait "$pid" 2>/dev/null; done
  DAEMON_PIDS=()
}
trap 'stop_daemons; rm -rf "$WORK"' EXIT

# Waits for a daemon's port file (written once it serves); prints the port.
wait_port() {
  local file=$1 pid=$2 i
  for i in $(seq 1 300); do
    if [ -s "$file" ] && [ "$(tail -c 1 "$file" | od -An -c | tr -d ' ')" = '\n' ]; then
      tr -d '\n' <"$file"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# Number of hosts the coordinator at $1 reports UP.
hosts_up() {
  "$CTL" --daemon "$1" --timeout_ms 2000 status --json 2>/dev/null | python3 -c '
import json, sys
try:
    print(sum(h["state"] == "UP" for h in json.load(sys.stdin)["hosts"]))
except Exception:
    print(0)'
}

# Starts $1 daemons h0..h{n-1} (h0 coordinates) with logs in $LOGS/<run>.<host>.log; sets
# SOCKETS to their comma-separated sockets. Returns 1 (message on stderr) if they do not come up.
start_daemons() {
  local n=$1 case_name=$2 coordinator="" i
  SOCKETS=""
  for i in $(seq 0 $((n - 1))); do
    local name=h$i
    rm -f "$WORK/$name.port" "$WORK/$name.sock"
    "$ALLREDUCED" --cluster_address=127.0.0.1:0 --host_name=$name \
        --local_socket="$WORK/$name.sock" --port_file="$WORK/$name.port" \
        ${coordinator:+--coordinator=$coordinator} ${ARD_DAEMON_FLAGS:-} \
        >"$LOGS/$case_name.$name.log" 2>&1 &
    local pid=$!
    DAEMON_PIDS+=("$pid")
    local port
    if ! port=$(wait_port "$WORK/$name.port" "$pid"); then
      echo "daemon $name did not start; its log:" >&2
      cat "$LOGS/$case_name.$name.log" >&2
      return 1
    fi
    [ -n "$coordinator" ] || coordinator=127.0.0.1:$port
    SOCKETS=${SOCKETS:+$SOCKETS,}$WORK/$name.sock
  done
  for i in $(seq 1 200); do
    [ "$(hosts_up "$coordinator")" = "$n" ] && return 0
    sleep 0.1
  done
  echo "only $(hosts_up "$coordinator") of $n hosts UP after 20 s" >&2
  return 1
}

# Runs one repeat of a case: its table goes to the terminal and $LOGS/<run>.out, stderr to
# <run>.err, its exit status to <run>.rc (<run> = <case>.r<repeat>). The command is run once per
# pass (PASSES: "sizes iters" pairs), with --sizes and --iters of that pass appended; the passes'
# tables follow each other in <run>.out, and the first failing pass's status is the run's.
PASSES=("$SIZES $ITERS")
[ "$SMALL_ITERS" -gt 0 ] && PASSES+=("$SMALL_SIZES $SMALL_ITERS")
run_case() {
  local run=$1 pass rc=0 start=$SECONDS
  shift
  : >"$LOGS/$run.out"
  : >"$LOGS/$run.err"
  for pass in "${PASSES[@]}"; do
    local pass_args=(--sizes "${pass% *}" --iters "${pass#* }")
    echo
    echo "=== $run: $* ${pass_args[*]}"
    timeout -k 5 "${CASE_TIMEOUT_S:-420}" "$@" "${pass_args[@]}" \
        2> >(tee -a "$LOGS/$run.err" >&2) | tee -a "$LOGS/$run.out"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || break
  done
  echo "$rc" >"$LOGS/$run.rc"
  echo "=== $run: exit status $rc, $((SECONDS - start)) s"
}

# One repeat of a daemon topology: $1 hosts x $2 processes per host, repeat $3. A failed attempt
# is retried once (other sessions on this machine have been seen to SIGTERM every allreduced
# mid-run); its files are kept as <run>.try1.* and make_results.py reports them.
# $4, if set, is "shm": the case daemon_HxP_shm, inputs built in shared memory and results read
# in place (allreducectl bench --device shm: no copy in the client).
run_daemon_case() {
  local hosts=$1 per_host=$2 variant=${4:-} run=daemon_${1}x${2}${4:+_$4}.r$3 attempt f
  for attempt in 1 2; do
    if start_daemons "$hosts" "$run" 2>"$LOGS/$run.err"; then
      run_case "$run" "$CTL" bench --sockets "$SOCKETS" --np "$per_host" --warmup "$WARMUP" \
          --check ${variant:+--device "$variant"}
    else
      cat "$LOGS/$run.err" >&2
      : >"$LOGS/$run.out"
      echo 1 >"$LOGS/$run.rc"
    fi
    stop_daemons
    if [ "$(cat "$LOGS/$run.rc")" = 0 ] || [ "$attempt" = 2 ]; then
      return
    fi
    for f in "$LOGS/$run".*; do mv "$f" "${f/$run./$run.try1.}"; done
    echo "=== $run failed; retrying once (first attempt: $LOGS/$run.try1.*)"
  done
}

# One repeat ($2) of case $1.
run_named_case() {
  local c=$1 r=$2 np=${1##*_}
  local common=(--warmup "$WARMUP" --check)
  local mpirun=(mpirun --allow-run-as-root --oversubscribe -np "$np")
  case "$c" in
    daemon_*x*_shm)
      local topology=${c#daemon_}
      topology=${topology%_shm}
      run_daemon_case "${topology%x*}" "${topology#*x}" "$r" shm ;;
    daemon_*x*)
      local topology=${c#daemon_}
      run_daemon_case "${topology%x*}" "${topology#*x}" "$r" ;;
    gloo_*) run_case "$c.r$r" "$GLOO" --np "$np" "${common[@]}" ;;
    mpi_tcp_*)
      run_case "$c.r$r" "${mpirun[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI" \
          "${common[@]}" ;;
    mpi_vader_*) run_case "$c.r$r" "${mpirun[@]}" --mca btl vader,self "$MPI" "${common[@]}" ;;
  esac
}

echo "# run_peers: cases $CASES; sizes $SIZES, warmup $WARMUP, iters $ITERS, repeat $REPEAT;" \
     "small sizes $SMALL_SIZES with $SMALL_ITERS iters; logs in $LOGS"
# What is measured, recorded before the run (others may commit or rebuild meanwhile).
SOURCE="commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
# --no-optional-locks: a read-only status, not even an index refresh.
if [ -n "$(git -C "$REPO" --no-optional-locks status --porcelain -- daemon client proto \
           2>/dev/null)" ]; then
  SOURCE="$SOURCE with uncommitted changes in daemon/ client/ proto/"
fi
SOURCE="$SOURCE; allreduced binary built $(date -r "$ALLREDUCED" '+%F %T')"
T0=$SECONDS
# Repeats interleave (every case once, then again), so that a burst of load on this shared
# machine lands on one repeat of several cases rather than on every repeat of one.
for r in $(seq 1 "$REPEAT"); do
  for c in ${CASES//,/ }; do run_named_case "$c" "$r"; done
done
ELAPSED=$((SECONDS - T0))

MAKE_RESULTS=$(dirname "$0")/make_results.py
[ -f "$MAKE_RESULTS" ] || MAKE_RESULTS=$REPO/bench/make_results.py
python3 "$MAKE_RESULTS" --logs "$LOGS" --out "$OUT" --sizes "$SIZES" --cases "$CASES" \
    --warmup "$WARMUP" --iters "$ITERS" --repeat "$REPEAT" --elapsed_s "$ELAPSED" \
    --small_sizes "$SMALL_SIZES" --small_iters "$SMALL_ITERS" \
    --source "$SOURCE"
echo
cat "$OUT"
echo "# run_peers: wrote $OUT in $ELAPSED s (logs in $LOGS)"
# The alpha-beta model needs daemon_Hx1 cases at two or more host counts; it says why when not.
MODEL_OUT=$(dirname "$OUT")/COST_MODEL.md
if python3 "$(dirname "$MAKE_RESULTS")/cost_model.py" --logs "$LOGS" --out "$MODEL_OUT"; then
  echo "# run_peers: wrote $MODEL_OUT (bench/cost_model.py)"
fi
