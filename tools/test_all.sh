#!/usr/bin/env bash
# Runs every test: installs what is missing, then `bazel test //...` (unit tests, integration tests
# with real daemons on loopback, the systemd unit check). GPU tests skip cleanly without a GPU.
# Ends with a line "N passed, N failed" (one per Bazel test target) and never leaves a Bazel
# server running.
set -euo pipefail
cd "$(dirname "$0")/.."
tools/bootstrap.sh

trap 'bazel shutdown >/dev/null 2>&1 || true' EXIT
log=$(mktemp /tmp/ard-test.XXXXXX.log)
set +e
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
passed=$(grep -cE '^//[^ ]+ +(\(cached\) )?PASSED in' "$log" || true)
failed=$(grep -cE '^//[^ ]+ +(\(cached\) )?(FAILED|TIMEOUT|FLAKY|INCOMPLETE|NO STATUS|FAILED TO BUILD)' "$log" || true)
rm -f "$log"
if [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1  # the build itself failed before any test ran
fi
echo "${passed} passed, ${failed} failed"
exit "$rc"
