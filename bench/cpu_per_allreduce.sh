#!/usr/bin/env bash
# CPU spent per allreduce by the daemons and by the client (bench/PROFILE.md's method): starts H
# daemons on loopback as run_peers.sh does, runs `allreducectl bench` once to warm up, then reads
# utime+stime of every daemon (/proc/<pid>/stat) and of the client (/usr/bin/time) around a timed
# run, and prints them per allreduce with the wall time and the bench's own row. Robust under
# load, unlike busbw. Also wake-ups per allreduce: voluntary context switches (a thread blocked
# and was woken) summed over every daemon thread (/proc/<pid>/task/*/status) and over the client
# processes (/usr/bin/time %w), also robust under load. BENCH_ARGS, if set, is added to both bench
# runs (e.g. BENCH_ARGS='--device shm'). PROFILE_CMD, if set, runs (exec'd, with @PIDS@ replaced
# by the daemons' comma-separated pids) during the timed run and gets SIGINT after it, e.g.
#   PROFILE_CMD='perf record -e cpu-clock -g -p @PIDS@ -o /tmp/d.perf'
#
#   bench/cpu_per_allreduce.sh BIN_DIR HOSTS RANKS_PER_HOST SIZE ITERS [daemon flags...]
#   bench/cpu_per_allreduce.sh bazel-bin 2 1 64M 10 --cross_host_chunk_bytes=1048576
set -u
[ $# -ge 5 ] || { sed -n 2,14p "$0" >&2; exit 2; }
BIN=$1 HOSTS=$2 PER_HOST=$3 SIZE=$4 ITERS=$5
shift 5
CTL=$BIN/ctl/allreducectl
WORK=$(mktemp -d /tmp/ardc.XXXXXX)
. "$(dirname "$0")/loopback_daemons.sh"
trap 'stop_loopback_daemons; rm -rf "$WORK"' EXIT
start_loopback_daemons "$BIN" "$HOSTS" "$WORK" "$@" || exit 1

daemon_wakeups() {
  local t=0 p
  for p in "${PIDS[@]}"; do
    t=$((t + $(cat /proc/"$p"/task/*/status 2>/dev/null |
      awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}')))
  done
  echo $t
}
daemon_ticks() {
  local t=0 p
  for p in "${PIDS[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo $t
}
"$CTL" bench --sockets "$SOCKETS" --np "$PER_HOST" --sizes "$SIZE" --warmup 1 --iters 2 \
    ${BENCH_ARGS:-} >"$WORK/warmup.out" 2>&1 || {
  echo "warm-up bench failed:" >&2
  tail -n 5 "$WORK/warmup.out" "$WORK"/h*.log >&2
  exit 1
}
if [ -n "${PROFILE_CMD:-}" ]; then
  DPIDS=$(IFS=,; echo "${PIDS[*]}")
  eval "exec ${PROFILE_CMD//@PIDS@/$DPIDS}" &
  PROFILER=$!
  sleep 1
fi
c0=$(daemon_ticks)
w0=$(daemon_wakeups)
t0=$(date +%s.%N)
/usr/bin/time -f "%U %S %w" -o "$WORK/client.time" "$CTL" bench --sockets "$SOCKETS" \
    --np "$PER_HOST" --sizes "$SIZE" --warmup 0 --iters "$ITERS" ${BENCH_ARGS:-} \
    >"$WORK/bench.out" 2>&1
t1=$(date +%s.%N)
c1=$(daemon_ticks)
w1=$(daemon_wakeups)
if [ -n "${PROFILE_CMD:-}" ]; then
  kill -INT "$PROFILER"
  wait "$PROFILER"
fi
python3 - "$c0" "$c1" "$(getconf CLK_TCK)" "$ITERS" "$t0" "$t1" "$(tail -1 "$WORK/client.time")" \
    "$w0" "$w1" <<'PY'
import sys
c0, c1, tck, iters = (int(v) for v in sys.argv[1:5])
t0, t1 = float(sys.argv[5]), float(sys.argv[6])
user, system, client_wakeups = sys.argv[7].split()
user, system = float(user), float(system)
w0, w1 = int(sys.argv[8]), int(sys.argv[9])
load = open("/proc/loadavg").read().split()[0]
print(f"daemon_cpu_ms={(c1 - c0) * 1000 / tck / iters:.1f} "
      f"client_cpu_ms={(user + system) * 1000 / iters:.1f} "
      f"wall_ms={(t1 - t0) * 1000 / iters:.1f} load={load}  (per allreduce)")
print(f"daemon_wakeups={(w1 - w0) / iters:.1f} client_wakeups={int(client_wakeups) / iters:.1f}"
      "  (voluntary context switches per allreduce, all hosts)")
PY
grep -v '^#' "$WORK/bench.out" | tail -1
