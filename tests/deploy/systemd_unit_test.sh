#!/usr/bin/env bash
# Checks the deploy/ files: the systemd unit passes `systemd-analyze verify`, rates below 3.0 in
# `systemd-analyze security` and has the settings the daemon relies on, and the example config
# only sets fields of ard.DaemonConfig.
#
# Usage: systemd_unit_test.sh ALLREDUCED_BINARY UNIT_FILE CONFIG_EXAMPLE CONFIG_PROTO
# (Bazel passes the runfiles-relative paths of //daemon:allreduced, deploy/allreduced.service,
# deploy/allreduced.conf.example and proto/config.proto; run by hand from the repo root with
# /bin/true as the binary.)
set -euo pipefail

if [[ $# -ne 4 ]]; then
  echo "usage: $0 ALLREDUCED_BINARY UNIT_FILE CONFIG_EXAMPLE CONFIG_PROTO" >&2
  exit 2
fi
binary=$1 unit=$2 conf=$3 proto=$4
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# --- 1. Settings the daemon depends on (sd_notify, watchdog pings, socket directory, SIGHUP reload).
for want in '^Type=notify$' '^Restart=on-failure$' '^WatchdogSec=[0-9]' '^RuntimeDirectory=allreduced$' \
  '^ExecStart=/usr/local/bin/allreduced ' '^ExecReload=/bin/kill -HUP \$MAINPID$' \
  '^RestartPreventExitStatus=2$' '^CapabilityBoundingSet=$' '^SystemCallArchitectures=native$'; do
  grep -Eq "$want" "$unit" || fail "$unit has no line matching $want"
done

# --- 2. The example config sets only fields of DaemonConfig, each at most once. Fields are the
# "type name = N;" lines of proto/config.proto; commented-out examples ("# name: value") count too.
fields=$(sed -nE 's/^[[:space:]]*(optional[[:space:]]+|repeated[[:space:]]+)?[A-Za-z_.0-9]+[[:space:]]+([a-z_][a-z0-9_]*)[[:space:]]*=[[:space:]]*[0-9]+.*;.*/\2/p' "$proto")
if [[ $(wc -w <<<"$fields") -lt 5 ]]; then
  fail "found only [$fields] as fields in $proto: the field parser is out of date"
fi
set_names=$(sed -nE 's/^[[:space:]]*([a-z_][a-z0-9_]*)[[:space:]]*[:{].*/\1/p' "$conf")
example_names=$(sed -nE 's/^#[[:space:]]*([a-z_][a-z0-9_]*):[[:space:]]*["0-9].*/\1/p' "$conf")
[[ -n $set_names ]] || fail "$conf sets no fields"
for name in $set_names $example_names; do
  grep -qxF "$name" <<<"$fields" || fail "$conf uses '$name', which is not a field of $proto"
done
for dup in $(sort <<<"$set_names" | uniq -d); do fail "$conf sets '$dup' more than once"; done
# Every other line must be blank or a comment, so nothing slips past the name check above.
if bad=$(grep -nEv '^[[:space:]]*(#.*)?$|^[[:space:]]*[a-z_][a-z0-9_]*[[:space:]]*:' "$conf"); then
  fail "$conf has lines that are neither comments nor 'field: value':"$'\n'"$bad"
fi
# Where protoc is installed, also parse it for real (value types, syntax).
if command -v protoc >/dev/null; then
  package=$(sed -nE 's/^package[[:space:]]+([A-Za-z0-9_.]+);.*/\1/p' "$proto")
  if ! err=$(protoc -I"$(dirname "$proto")" --encode="${package:+$package.}DaemonConfig" \
    "$(basename "$proto")" <"$conf" 2>&1 >/dev/null); then
    fail "protoc cannot parse $conf as DaemonConfig: $err"
  fi
else
  echo "note: protoc not found; $conf checked by field names only"
fi

# --- 3. systemd-analyze verify on a copy whose ExecStart names the real binary.
if ! command -v systemd-analyze >/dev/null; then
  echo "SKIP: systemd-analyze not found; static checks only"
  [[ $failures -eq 0 ]] && exit 0 || exit 1
fi
binary_abs=$(readlink -f "$binary" || true)
if [[ ! -f $binary_abs || ! -x $binary_abs ]]; then
  fail "$binary is not an executable file"
  exit 1
fi
if [[ $binary_abs =~ [[:space:]%\\\"\'] ]]; then
  fail "binary path '$binary_abs' has characters systemd would interpret in ExecStart"
  exit 1
fi

tmp=${TEST_TMPDIR:-}
if [[ -z $tmp ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
fi
copy=$tmp/allreduced.service  # same name: messages about our unit say "allreduced.service"
while IFS= read -r line || [[ -n $line ]]; do
  if [[ $line == ExecStart=/usr/local/bin/allreduced* ]]; then
    line="ExecStart=$binary_abs${line#ExecStart=/usr/local/bin/allreduced}"
  fi
  printf '%s\n' "$line"
done <"$unit" >"$copy"

# systemd 252 prints nothing for a good unit, and even "Unknown key" or "Failed to parse" warnings
# may exit 0, so every output line naming our unit (file path or unit name) is an error. Lines
# about other units (the host's units reached through Wants=/After=) are environmental: shown, not
# fatal. Options: --man=no (Documentation= man pages need not be installed here), --generators=no
# (the host's generators are not ours).
verify() {  # verify CHECK_EXIT [extra options...]
  local check_exit=$1 rc=0 output line
  shift
  output=$(systemd-analyze verify --man=no --generators=no "$@" "$copy" 2>&1) || rc=$?
  echo "systemd-analyze verify --man=no --generators=no $* $copy -> exit $rc"
  while IFS= read -r line; do
    [[ -z $line ]] && continue
    if [[ $line == *allreduced.service* ]]; then
      fail "systemd-analyze: $line"
    else
      echo "note (not about our unit, ignored): $line"
    fi
  done <<<"$output"
  if [[ $check_exit == yes && $rc -ne 0 ]]; then fail "systemd-analyze verify exited $rc"; fi
}
if systemd-analyze --help 2>&1 | grep -q -- '--recursive-errors'; then
  # systemd >= 250. The exit status is trusted only with --recursive-errors=no (ours alone), but
  # that mode also hides our own dependency errors (a Requires= on a missing unit), so a second,
  # recursive run is judged by its lines only.
  verify yes --recursive-errors=no
  verify no --recursive-errors=yes
else
  verify yes  # older systemd: errors in the host's units fail the exit status too
fi

# --- 4. Exposure below 3.0 (`systemd-analyze security`, offline: no running systemd needed).
if systemd-analyze --help 2>&1 | grep -q -- '--offline'; then
  report=$(systemd-analyze security --offline=true --no-pager "$copy" 2>&1 || true)
  exposure=$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9]+\.[0-9]+).*/\1/p' <<<"$report")
  if [[ -z $exposure ]]; then
    fail "systemd-analyze security printed no exposure level:"$'\n'"$report"
  elif awk -v e="$exposure" 'BEGIN { exit !(e >= 3.0) }'; then
    fail "systemd-analyze security exposure $exposure, want below 3.0:"$'\n'"$(grep '✗' <<<"$report")"
  else
    echo "systemd-analyze security: exposure $exposure (below 3.0)"
  fi
else
  echo "note: this systemd-analyze has no --offline; exposure not checked"
fi

if [[ $failures -ne 0 ]]; then
  echo "$failures failure(s)" >&2
  exit 1
fi
echo "PASS"
