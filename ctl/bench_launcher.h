// The parent side of `allreducectl bench`: starts --np `bench-worker` processes per daemon socket
// (this binary, re-executed through /proc/self/exe), reads their line reports
// (bench_worker_lines.h) from one pipe each, aggregates every size over the ranks (time = the
// slowest rank's mean) and prints the table (row by row as sizes finish) or, at the end, the JSON
// object.
//
// Lifecycle of a run:
//   1. Layouts are computed once here; the workers get the resulting sizes as an explicit list.
//   2. Ranks are socket_index * np + local_rank; each worker gets ALLREDUCED_SOCKET, _JOB (one
//      name per run), _RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (ctl/launch/socket_ranks.h).
//   3. The first failure (an ERROR line, or a worker exiting without DONE) ends the run: the other
//      workers are killed (SIGKILL, by pid), and the failing rank's message is printed as one
//      line on stderr. Past --timeout_ms (plus a short grace for the workers' own timeout
//      message) everything is killed the same way. Every child is reaped before returning.
//      ctl/launch/rank_group.h starts, watches and ends the workers; this file judges them.
// Single-threaded.
#pragma once

#include "ctl/bench_options.h"

namespace ard::ctl {

// Runs the benchmark; returns the exit code (0; 1 on a failure or wrong results; 2 when no size
// is left after rounding).
int RunBenchLauncher(const BenchOptions& options);

}  // namespace ard::ctl
