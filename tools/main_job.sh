#!/usr/bin/env bash
# The main job: a real three-host cluster on loopback. Builds allreduced and allreducectl, starts
# three daemons (each one "host": own port, own local socket), waits until all are UP, runs real
# collective jobs through the client library (`allreducectl bench --check`, every result verified):
# single-host jobs on two hosts at once (4 processes on node-0, 2 on node-1), then one job across
# all three hosts (2 processes each); then trains a Keras model with allreduced's
# DistributedOptimizer on 2 hosts x 2 processes, then a PyTorch model the same way with
# allreduced.torch (rank 0 prints each epoch; each end checks every rank holds identical
# weights); prints `allreducectl status` as a table and as JSON, then
# stops the daemons with SIGTERM and checks each exits 0. Installs what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh

trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
bazel build //daemon:allreduced //ctl:allreducectl //tfplugin:_allreduced_ops.so \
  //client:libard_client.so
bin=$(bazel info bazel-bin 2>/dev/null)
daemon="$bin/daemon/allreduced"
ctl="$bin/ctl/allreducectl"

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
echo "== real jobs: allreduce on node-0 (4 processes) and allgather on node-1 (2), results checked"
"$ctl" bench --sockets "$work/node-0.sock" --np 4 --op allreduce --sizes 4:16M --iters 10 \
  --check --job main-allreduce >"$work/bench0.txt" 2>&1 &
b0=$!
"$ctl" bench --sockets "$work/node-1.sock" --np 2 --op allgather --sizes 1K:4M --iters 10 \
  --check --job main-allgather >"$work/bench1.txt" 2>&1 &
b1=$!
bench_status=0
wait "$b0" || bench_status=1
wait "$b1" || bench_status=1
cat "$work/bench0.txt" "$work/bench1.txt"
echo
echo "== one job across all three hosts (2 processes per host, 6 ranks), results checked"
"$ctl" bench --sockets "$work/node-0.sock,$work/node-1.sock,$work/node-2.sock" --np 2 \
  --op allreduce --sizes 4:16M --iters 10 --check --job main-cross-host || bench_status=1
echo
echo "== training: a Keras model with allreduced's DistributedOptimizer, 2 hosts x 2 processes"
PYTHONPATH="$PWD/python" ALLREDUCED_TF_OPS="$bin/tfplugin/_allreduced_ops.so" \
  TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python -m allreduced.launch \
  --sockets "$work/node-0.sock,$work/node-1.sock" -np 4 --job main-keras -- \
  .venv/bin/python tfplugin/examples/train_keras.py || bench_status=1
echo
echo "== training: a PyTorch model with allreduced.torch's DistributedOptimizer, 2 hosts x 2" \
  "processes"
PYTHONPATH="$PWD/python" ALLREDUCED_CLIENT_LIB="$bin/client/libard_client.so" OMP_NUM_THREADS=1 \
  .venv/bin/python -m allreduced.launch \
  --sockets "$work/node-0.sock,$work/node-1.sock" -np 4 --job main-torch -- \
  .venv/bin/python tests/torch/train_torch.py || bench_status=1
echo
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
[ "$bench_status" -eq 0 ] || { echo "main_job: a collective job failed (see above)" >&2; status=1; }
echo "== daemon logs"
cat "$work"/node-*.log
exit "$status"
