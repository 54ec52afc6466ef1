// The `bench-worker` side of `allreducectl bench`: one client process of the benchmark job. It
// is the allreducectl binary re-executed by the parent (bench_launcher.h) with ALLREDUCED_SOCKET,
// ALLREDUCED_JOB, ALLREDUCED_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE} set; it connects through the real
// client library (client/allreduced_client.h), runs every size and reports to the parent on
// stdout in the line protocol of bench_worker_lines.h.
//
// Per size: --warmup iterations, a barrier, then --iters timed iterations; one iteration =
// ard_submit (copies the input into the arena) + ard_wait + memcpy of the result into a private
// buffer + ard_release, on one tensor name per size (as a training loop reuses its names).
// With --device gpu the input and output live on CUDA device local_rank mod GPUs (bench_cuda.h)
// and one iteration = ard_submit_device on the worker's own stream + ard_wait +
// cuStreamSynchronize (the client enqueued the copy-out on that stream) + ard_release; results
// are copied to the host only to check them.
// Single-threaded (the client library runs its own receiver thread).
#pragma once

#include "ctl/bench_options.h"

namespace ard::ctl {

// Runs the worker to completion; returns its exit code (0 after DONE, 1 after an ERROR line).
// Dies with the parent (PR_SET_PDEATHSIG) and gives up at --timeout_ms from its start.
int RunBenchWorker(const BenchOptions& options);

}  // namespace ard::ctl
