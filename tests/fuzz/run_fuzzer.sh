#!/usr/bin/env bash
# Builds one libFuzzer target with Debian's clang (libFuzzer + AddressSanitizer +
# UndefinedBehaviorSanitizer; Bazel's toolchain is gcc, so it is compiled here directly) and runs
# it over its committed seed corpus. Any crash, sanitizer report or broken promise fails.
#   TARGET: local_frame (hostile local client frames) or data_handshake (the data plane's
#   handshake as a stranger on the data port sends it).
#
#   CI (bazel test //tests/fuzz:local_frame_fuzz_test, :data_handshake_fuzz_test): a bounded run,
#   fixed seed.
#   Long run from the repository root (new inputs go to /tmp/ard-fuzz/TARGET/corpus, crashes to
#   /tmp/ard-fuzz/TARGET/crash-*):
#     tests/fuzz/run_fuzzer.sh local_frame -max_total_time=3600 -jobs=4 -workers=4
#   Reproduce a crash: tests/fuzz/run_fuzzer.sh local_frame /tmp/ard-fuzz/local_frame/crash-<hash>
# Arguments after TARGET are passed to libFuzzer; with none, the bounded CI run:
# -runs=${FUZZ_RUNS:-200000}, at most ${FUZZ_SECONDS:-45} s, inputs up to 16 KiB, seed
# ${FUZZ_SEED:-1}.
set -euo pipefail

target="${1:?usage: run_fuzzer.sh local_frame|data_handshake [libFuzzer args...]}"
shift
case "$target" in
  local_frame)
    sources=(
      tests/fuzz/local_frame_fuzzer.cc
      daemon/local/frame_codec.cc
      proto/submit_check.cc
      daemon/negotiation/readiness_table.cc
      daemon/negotiation/validation.cc
      daemon/negotiation/tensor_request.cc
      daemon/shm/mapped_segment.cc
    )
    libs=()
    corpus=local_frames
    ;;
  data_handshake)
    sources=(
      tests/fuzz/data_handshake_fuzzer.cc
      daemon/dataplane/tcp/data_auth.cc
    )
    libs=(libcrypto)
    corpus=data_handshakes
    ;;
  *)
    echo "FAIL: unknown fuzz target $target" >&2
    exit 2
    ;;
esac

if [[ -n "${TEST_SRCDIR:-}" ]]; then
  root="$TEST_SRCDIR/${TEST_WORKSPACE:-__main__}"
  work="$TEST_TMPDIR/fuzz/$target"
  artifacts="${TEST_UNDECLARED_OUTPUTS_DIR:-$work}/"
else
  root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
  work="${FUZZ_WORKDIR:-/tmp/ard-fuzz}/$target"
  artifacts="$work/"
fi
mkdir -p "$work/corpus"
cxx="${FUZZ_CXX:-clang++}"
if ! command -v "$cxx" >/dev/null; then
  echo "FAIL: $cxx not found (tools/bootstrap.sh installs clang and libclang-rt-14-dev)" >&2
  exit 1
fi

bin="$work/${target}_fuzzer"
(
  cd "$root"
  # shellcheck disable=SC2046  # pkg-config prints several flags
  "$cxx" -std=c++17 -g -O1 -fno-omit-frame-pointer \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I. "${sources[@]}" \
    $(pkg-config --cflags --libs absl_status absl_statusor absl_strings absl_time absl_str_format \
      "${libs[@]}") \
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
  "$work/corpus" "$root/tests/fuzz/corpus/$corpus"
echo "PASS: ${target}_fuzzer ($*) found nothing"
