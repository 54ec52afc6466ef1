#!/usr/bin/env bash
# Builds local_frame_fuzzer with Debian's clang (libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer; Bazel's toolchain is gcc, so it is compiled here directly) and runs
# it over the committed seed corpus. Any crash, sanitizer report or broken decoder promise fails.
#
#   CI (bazel test //tests/fuzz:local_frame_fuzz_test): a bounded run, fixed seed.
#   Long run from the repository root (new inputs go to /tmp/ard-fuzz/corpus, crashes to
#   /tmp/ard-fuzz/crash-*):
#     tests/fuzz/run_local_frame_fuzzer.sh -max_total_time=3600 -jobs=4 -workers=4
#   Reproduce a crash: tests/fuzz/run_local_frame_fuzzer.sh /tmp/ard-fuzz/crash-<hash>
# Arguments are passed to libFuzzer; with none, the bounded CI run: -runs=${FUZZ_RUNS:-200000},
# at most ${FUZZ_SECONDS:-45} s, inputs up to 16 KiB, seed ${FUZZ_SEED:-1}.
set -euo pipefail

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-__main__}"
  work="$TEST_TMPDIR/fuzz"
  artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-$work}/"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  work="${FUZZ_WORKDIR:-/tmp/ard-fuzz}"
  artifacts="$work/"
fi
mkdir -p "$work/corpus"
cxx="${FUZZ_CXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "FAIL: $cxx not found (tools/bootstrap.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi

sources=(
  tests/fuzz/local_frame_fuzzer.cc
  daemon/local/frame_codec.cc
  daemon/negotiation/readiness_table.cc
  daemon/negotiation/validation.cc
  daemon/negotiation/tensor_request.cc
  daemon/shm/mapped_segment.cc
)
bin="$work/local_frame_fuzzer"
(
  cd "$root"
  # shellcheck disable=SC2046  # pkg-config prints several flags
  "$cxx" -std=c++17 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I. "${sources[@]}" \
    $(pkg-config --cflags --libs absl_status absl_statusor absl_strings absl_time absl_str_format) \
    -o "$bin"
)

if (($# == 0)); then
  set -- -runs="${FUZZ_RUNS:-200000}" -max_total_time="${FUZZ_SECONDS:-45}" \
    -max_len=16384 -seed="${FUZZ_SEED:-1}"
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
# A single file argument (a crash to reproduce) runs just that input.
if (($# == 1)) && [[ -f "$1" ]]; then
  exec "$bin" "$1"
fi
# New inputs go to the first (writable) corpus directory; the committed seeds are read only.
"$bin" -artifact_prefix="$artifacts" -timeout=10 -rss_limit_mb=2048 "$@" \
  "$work/corpus" "$root/tests/fuzz/corpus/local_frames"
echo "PASS: local_frame_fuzzer ($*) found nothing"
