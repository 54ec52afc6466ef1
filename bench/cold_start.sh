#!/usr/bin/env bash
# The first steps of a new model against the steady state (issue 28 item 4): starts H daemons on
# loopback (loopback_daemons.sh), runs bench/cold_start_bench with P ranks per daemon (100 float32
# tensors per step by default), and prints its table (each of the first 10 steps' time and its
# ratio to the steady state) with the daemons' CPU over the whole run. COLD_ARGS is added to
# cold_start_bench (e.g. COLD_ARGS='--tensors 200 --steps 60').
#
#   bench/cold_start.sh BIN_DIR HOSTS RANKS_PER_HOST [daemon flags...]
#   bench/cold_start.sh bazel-bin 2 2
set -u
[ $# -ge 3 ] || { sed -n 2,10p "$0" >&2; exit 2; }
BIN=$1 HOSTS=$2 PER_HOST=$3
shift 3
WORK=$(mktemp -d /tmp/ardcs.XXXXXX)
. "$(dirname "$0")/loopback_daemons.sh"
trap 'stop_loopback_daemons; rm -rf "$WORK"' EXIT
start_loopback_daemons "$BIN" "$HOSTS" "$WORK" "$@" || exit 1
ticks() {
  local t=0 p
  for p in "${PIDS[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
  echo $t
}
c0=$(ticks)
"$BIN/bench/cold_start_bench" --sockets "$SOCKETS" --np "$PER_HOST" ${COLD_ARGS:-} || {
  tail -n 5 "$WORK"/h*.log >&2
  exit 1
}
c1=$(ticks)
echo "# daemons' CPU over the run: $(( (c1 - c0) * 1000 / $(getconf CLK_TCK) )) ms"
