#!/usr/bin/env bash
# The main job: a real three-host cluster on loopback. Builds allreduced and allreducectl, starts
# three daemons (each one "host": own port, own local socket), waits until all are UP, prints
# `allreducectl status` as a table and as JSON, then stops them with SIGTERM and checks each exits
# 0. Installs what is missing first. Later issues extend this to real training.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh

trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
bazel build //daemon:allreduced //client/cli:allreducectl
bin=$(bazel info bazel-bin 2>/dev/null)
daemon="$bin/daemon/allreduced"
ctl="$bin/client/cli/allreducectl"

work=$(mktemp -d /tmp/ard-main.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  rm -rf "$work"
  bazel shutdown >/dev/null 2>&1 || true
}
trap cleanup EXIT

start_host() {  # name [coordinator]
  local name=$1 coordinator=${2:-}
  "$daemon" --cluster_address=127.0.0.1:0 --host_name="$name" \
    --local_socket="$work/$name.sock" --port_file="$work/$name.port" \
    --heartbeat_ms=200 --host_timeout_ms=2000 \
    ${coordinator:+--coordinator=$coordinator} >"$work/$name.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 100); do
    [ -s "$work/$name.port" ] && return 0
    sleep 0.1
  done
  echo "main_job: $name did not start:" >&2
  cat "$work/$name.log" >&2
  exit 1
}

start_host node-0
coord="127.0.0.1:$(cat "$work/node-0.port")"
start_host node-1 "$coord"
start_host node-2 "$coord"

# Ask a follower (it forwards to the coordinator) until all three are UP.
for _ in $(seq 1 100); do
  up=$("$ctl" --daemon "127.0.0.1:$(cat "$work/node-2.port")" status --json 2>/dev/null |
       grep -o '"state":"UP"' | wc -l || true)
  [ "$up" -eq 3 ] && break
  sleep 0.1
done
echo "== allreducectl status (asked node-2, a follower)"
"$ctl" --daemon "127.0.0.1:$(cat "$work/node-2.port")" status
echo
echo "== allreducectl status --json (asked node-0, the coordinator)"
"$ctl" --daemon "$coord" status --json
echo

# Followers first, then the coordinator; each must exit 0.
status=0
for i in 2 1 0; do
  kill -TERM "${pids[$i]}"
  if wait "${pids[$i]}"; then
    echo "node-$i stopped cleanly (exit 0)"
  else
    echo "node-$i exited with $?" >&2
    status=1
  fi
done
pids=()
[ "$up" -eq 3 ] || { echo "main_job: only $up of 3 hosts came UP" >&2; status=1; }
echo "== daemon logs"
cat "$work"/node-*.log
exit "$status"
