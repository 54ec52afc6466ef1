# Sourced by bench scripts: starts H allreduced daemons on loopback, each one "host" (h0
# coordinates), as run_peers.sh and tests/integration/harness.py do, and stops them on exit.
#   start_loopback_daemons BIN_DIR HOSTS WORK_DIR [daemon flags...]
# sets PIDS (the daemons), SOCKETS (their local sockets, comma-separated, h0 first) and
# COORDINATOR (h0's address); returns once every host is UP. Logs: WORK_DIR/h<i>.log.
# stop_loopback_daemons: SIGTERM to each and waits for it.
PIDS=()
SOCKETS=""
COORDINATOR=""

start_loopback_daemons() {
  local bin=$1 hosts=$2 work=$3 i up
  shift 3
  for i in $(seq 0 $((hosts - 1))); do
    "$bin/daemon/allreduced" --cluster_address=127.0.0.1:0 --host_name=h$i \
        --local_socket="$work/h$i.sock" --port_file="$work/h$i.port" \
        ${COORDINATOR:+--coordinator=$COORDINATOR} "$@" >"$work/h$i.log" 2>&1 &
    PIDS+=($!)
    for _ in $(seq 1 300); do
      [ "$(tail -c 1 "$work/h$i.port" 2>/dev/null | od -An -c | tr -d ' ')" = '\n' ] && break
      sleep 0.05
    done
    [ -n "$COORDINATOR" ] || COORDINATOR=127.0.0.1:$(tr -d '\n' <"$work/h$i.port")
    SOCKETS=${SOCKETS:+$SOCKETS,}$work/h$i.sock
  done
  for _ in $(seq 1 200); do
    up=$("$bin/ctl/allreducectl" --daemon "$COORDINATOR" --timeout_ms 2000 status --json \
        2>/dev/null | python3 -c '
import json, sys
try:
    print(sum(h["state"] == "UP" for h in json.load(sys.stdin)["hosts"]))
except Exception:
    print(0)')
    [ "$up" = "$hosts" ] && return 0
    sleep 0.1
  done
  echo "not every daemon came UP; logs in $work" >&2
  return 1
}

stop_loopback_daemons() {
  local p
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null; done
  PIDS=()
}
