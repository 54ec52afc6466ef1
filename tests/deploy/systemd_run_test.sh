#!/usr/bin/env bash
# Runs the daemon under the [Service] properties of deploy/allreduced.service (every hardening
# setting, through `systemd-run -p`), then checks that it still does its job: READY=1 reaches
# systemd, `allreducectl status` answers, a 2-rank benchmark checks its allreduce results through
# the local socket, and SIGTERM ends it with status 0. A second unit given a bad flag must exit 2
# and not be restarted (RestartPreventExitStatus=2).
#
# Needs systemd as PID 1 and root; elsewhere (containers, CI runners without systemd) it prints
# SKIP with the reason and passes. The static checks stay in systemd_unit_test.sh.
#
# Usage: systemd_run_test.sh ALLREDUCED ALLREDUCECTL UNIT_FILE
set -euo pipefail

if [[ $# -ne 3 ]]; then
  echo "usage: $0 ALLREDUCED ALLREDUCECTL UNIT_FILE" >&2
  exit 2
fi
daemon_bin=$(readlink -f "$1") ctl=$(readlink -f "$2") unit=$3

pid1=$(cat /proc/1/comm 2>/dev/null || echo unknown)
if [[ $pid1 != systemd ]]; then
  echo "SKIP: systemd is not PID 1 here (PID 1 is '$pid1'); the daemon was not run under the" \
    "unit's properties (systemd_unit_test still checks the unit statically)"
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "SKIP: not root; systemd-run of a system service needs root"
  exit 0
fi

name=ard-systemd-run-test-$$
dir=/run/$name  # visible under ProtectSystem=strict/ProtectHome/PrivateTmp, unlike bazel's paths
install -d -m 0755 "$dir"
install -m 0755 "$daemon_bin" "$dir/allreduced"
cleanup() {
  systemctl stop "$name.service" "$name-bad.service" >/dev/null 2>&1 || true
  systemctl reset-failed "$name.service" "$name-bad.service" >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

# The unit's [Service] settings as -p options, minus those that name installed paths: the command
# (ours is below), and the runtime/cache directories (a test must not touch a real install's).
# Without an allreduced account the daemon runs as nobody.
props=()
section=
while IFS= read -r line; do
  [[ $line =~ ^\[(.*)\]$ ]] && section=${BASH_REMATCH[1]} && continue
  [[ $section == Service && $line =~ ^[A-Za-z]+= ]] || continue
  key=${line%%=*}
  case $key in
    ExecStart | ExecReload | RuntimeDirectory | CacheDirectory | Environment) continue ;;
    User | Group) id allreduced >/dev/null 2>&1 || continue ;;
  esac
  props+=(-p "$line")
done <"$unit"
id allreduced >/dev/null 2>&1 || props+=(-p User=nobody -p Group=nogroup)
props+=(-p "RuntimeDirectory=$name/rt" -p "Environment=CUDA_CACHE_PATH=$dir/rt/cuda")
echo "properties: ${props[*]}"

sock=/run/$name/rt/a.sock
port_file=/run/$name/rt/port
# Type=notify: systemd-run returns once the daemon sent READY=1 (or fails).
systemd-run --quiet --unit="$name" "${props[@]}" "$dir/allreduced" \
  --cluster_address=127.0.0.1:0 --host_name=sd-test --local_socket="$sock" \
  --port_file="$port_file" --peer_policy=any
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

port=$(cat "$port_file")
if ! "$ctl" --daemon "127.0.0.1:$port" status; then fail "allreducectl status failed"; fi
if ! "$ctl" bench --sockets "$sock" --np 2 --iters 3 --warmup 1 --sizes 4K,1M --check; then
  fail "a 2-rank allreduce through the hardened daemon failed"
fi
systemctl stop "$name.service"
result=$(systemctl show -p Result --value "$name.service")
status=$(systemctl show -p ExecMainStatus --value "$name.service")
[[ $result == success && $status == 0 ]] || fail "stop: Result=$result ExecMainStatus=$status"
if journalctl -u "$name.service" --no-pager 2>/dev/null | grep -E "Operation not permitted|EPERM"; then
  fail "a system call was refused under the unit's filter (see the lines above)"
fi

# A bad flag: exit 2, failed, never restarted.
systemd-run --quiet --unit="$name-bad" "${props[@]}" "$dir/allreduced" --no_such_flag=1 || true
for _ in $(seq 50); do
  state=$(systemctl show -p ActiveState --value "$name-bad.service")
  [[ $state == failed || $state == inactive ]] && break
  sleep 0.1
done
status=$(systemctl show -p ExecMainStatus --value "$name-bad.service")
restarts=$(systemctl show -p NRestarts --value "$name-bad.service")
[[ $status == 2 && $restarts == 0 ]] ||
  fail "bad config: ExecMainStatus=$status NRestarts=$restarts (want 2 and 0)"

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo PASS
