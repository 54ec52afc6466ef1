#!/usr/bin/env bash
# Measures allreduced against its peers on this machine, in one run, at 4 processes in all:
#   daemon 1x4 (1 host x 4 processes), 2x2 (2 hosts x 2), 4x1 (4 hosts x 1): allreduced daemons
#     started here (each one "host" on loopback, as tests/integration/harness.py does), measured
#     with `allreducectl bench --sockets ... --np P --check`;
#   Gloo (gloo_allreduce_bench --np 4, TCP on loopback, best of its algorithm classes);
#   Open MPI TCP (btl tcp,self on lo) and Open MPI shared memory (btl vader,self), 4 ranks.
# Prints every table, keeps them in a log directory, and writes bench/RESULTS.md (side-by-side
# busbw, daemon/best-peer ratios, 4 B latency) with bench/make_results.py. A failing case is
# recorded (its error verbatim) and the others still run. See bench/README.md.
#
#   bench/run_peers.sh [--sizes 4:256M] [--warmup 3] [--iters 15] [--out FILE] [--logs DIR]
#
# Binaries: $ARD_BIN_DIR (a Bazel bin directory) or the runfiles of `bazel run //bench:run_peers`
# or <repo>/bazel-bin; each can be overridden with ARD_BIN_ALLREDUCED, ARD_BIN_ALLREDUCECTL,
# ARD_BIN_GLOO_BENCH, ARD_BIN_MPI_BENCH. CASE_TIMEOUT_S bounds each case (default 420).
set -u -o pipefail

SIZES=4:256M
WARMUP=3
ITERS=15
NP_TOTAL=4  # the process count of every case; the topologies below assume 4
REPO=${BUILD_WORKSPACE_DIRECTORY:-$(cd "$(dirname "$0")/.." && pwd)}
OUT=$REPO/bench/RESULTS.md
LOGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sizes) SIZES=$2; shift 2 ;;
    --warmup) WARMUP=$2; shift 2 ;;
    --iters) ITERS=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --logs) LOGS=$2; shift 2 ;;
    *) echo "usage: $0 [--sizes 4:256M] [--warmup 3] [--iters 15] [--out FILE] [--logs DIR]" >&2
       exit 2 ;;
  esac
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
CTL=${ARD_BIN_ALLREDUCECTL:-$BIN_DIR/client/cli/allreducectl}
GLOO=${ARD_BIN_GLOO_BENCH:-$BIN_DIR/bench/gloo_allreduce_bench}
MPI=${ARD_BIN_MPI_BENCH:-$BIN_DIR/bench/mpi_allreduce_bench}
for b in "$ALLREDUCED" "$CTL" "$GLOO" "$MPI"; do
  if [ ! -x "$b" ]; then
    echo "run_peers: missing binary '$b': build //bench/... //daemon:allreduced" \
         "//client/cli:allreducectl and set ARD_BIN_DIR" >&2
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

# Starts $1 daemons h0..h{n-1} (h0 coordinates) with logs in $LOGS/<case>.<host>.log; sets
# SOCKETS to their comma-separated sockets. Returns 1 (message on stderr) if they do not come up.
start_daemons() {
  local n=$1 case_name=$2 coordinator="" i
  SOCKETS=""
  for i in $(seq 0 $((n - 1))); do
    local name=h$i
    rm -f "$WORK/$name.port" "$WORK/$name.sock"
    "$ALLREDUCED" --cluster_address=127.0.0.1:0 --host_name=$name \
        --local_socket="$WORK/$name.sock" --port_file="$WORK/$name.port" \
        ${coordinator:+--coordinator=$coordinator} >"$LOGS/$case_name.$name.log" 2>&1 &
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

# Runs one case: its table goes to the terminal and $LOGS/<case>.out, stderr to <case>.err,
# its exit status to <case>.rc.
run_case() {
  local case_name=$1
  shift
  echo
  echo "=== $case_name: $*"
  local start=$SECONDS
  timeout -k 5 "${CASE_TIMEOUT_S:-420}" "$@" 2> >(tee "$LOGS/$case_name.err" >&2) \
      | tee "$LOGS/$case_name.out"
  local rc=$?
  echo "$rc" >"$LOGS/$case_name.rc"
  echo "=== $case_name: exit status $rc, $((SECONDS - start)) s"
}

# One daemon topology: $1 hosts x $2 processes per host. A failed attempt is retried once (other
# sessions on this machine have been seen to SIGTERM every allreduced mid-run); its files are kept
# as <case>.try1.* and make_results.py reports them.
run_daemon_case() {
  local hosts=$1 per_host=$2 case_name=daemon_${1}x${2} attempt f
  for attempt in 1 2; do
    if start_daemons "$hosts" "$case_name" 2>"$LOGS/$case_name.err"; then
      run_case "$case_name" "$CTL" bench --sockets "$SOCKETS" --np "$per_host" --sizes "$SIZES" \
          --warmup "$WARMUP" --iters "$ITERS" --check
    else
      cat "$LOGS/$case_name.err" >&2
      : >"$LOGS/$case_name.out"
      echo 1 >"$LOGS/$case_name.rc"
    fi
    stop_daemons
    if [ "$(cat "$LOGS/$case_name.rc")" = 0 ] || [ "$attempt" = 2 ]; then
      return
    fi
    for f in "$LOGS/$case_name".*; do mv "$f" "${f/$case_name./$case_name.try1.}"; done
    echo "=== $case_name failed; retrying once (first attempt: $LOGS/$case_name.try1.*)"
  done
}

MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NP_TOTAL")
COMMON=(--sizes "$SIZES" --warmup "$WARMUP" --iters "$ITERS" --check)
echo "# run_peers: $NP_TOTAL processes per case, sizes $SIZES, warmup $WARMUP, iters $ITERS;" \
     "logs in $LOGS"
# What is measured, recorded before the run (others may commit or rebuild meanwhile).
SOURCE="commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')"
# --no-optional-locks: a read-only status, not even an index refresh.
if [ -n "$(git -C "$REPO" --no-optional-locks status --porcelain -- daemon client proto \
           2>/dev/null)" ]; then
  SOURCE="$SOURCE with uncommitted changes in daemon/ client/ proto/"
fi
SOURCE="$SOURCE; allreduced binary built $(date -r "$ALLREDUCED" '+%F %T')"
T0=$SECONDS
run_daemon_case 1 4
run_daemon_case 2 2
run_daemon_case 4 1
run_case gloo "$GLOO" --np "$NP_TOTAL" "${COMMON[@]}"
run_case mpi_tcp "${MPIRUN[@]}" --mca btl tcp,self --mca btl_tcp_if_include lo "$MPI" \
    "${COMMON[@]}"
run_case mpi_vader "${MPIRUN[@]}" --mca btl vader,self "$MPI" "${COMMON[@]}"
ELAPSED=$((SECONDS - T0))

MAKE_RESULTS=$(dirname "$0")/make_results.py
[ -f "$MAKE_RESULTS" ] || MAKE_RESULTS=$REPO/bench/make_results.py
python3 "$MAKE_RESULTS" --logs "$LOGS" --out "$OUT" --sizes "$SIZES" \
    --warmup "$WARMUP" --iters "$ITERS" --elapsed_s "$ELAPSED" --source "$SOURCE"
echo
cat "$OUT"
echo "# run_peers: wrote $OUT in $ELAPSED s (logs in $LOGS)"
