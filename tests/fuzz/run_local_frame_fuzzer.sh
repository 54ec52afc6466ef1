#!/usr/bin/env bash
# The local-frame fuzzer (docs/operator-guide.md "Fuzzing"): run_fuzzer.sh local_frame with these
# arguments.
exec "$(dirname "${BASH_SOURCE[0]}")/run_fuzzer.sh" local_frame "$@"
