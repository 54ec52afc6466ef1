// The peer of `allreducectl bench --device gpu`: NCCL itself, measured in the same run on the
// same sizes. The hidden `bench-nccl` subcommand (this binary, re-executed by the bench parent)
// runs every rank in one process, one per GPU 0..peer_gpus-1 (ncclCommInitAll), and per
// iteration issues one ncclAllReduce per GPU inside ncclGroupStart/End and waits for every
// stream, timed with the host clock like the daemon's workers. libnccl.so.2 is loaded with
// dlopen (it carries its own CUDA runtime), so allreducectl links neither NCCL nor libcudart.
// It reports to the parent in the worker line protocol (bench_worker_lines.h) as one "rank".
#pragma once

#include <string>

#include "absl/status/status.h"
#include "ctl/bench_options.h"

namespace ard::ctl {

// Whether libnccl.so.2 loads (from the library path, else $CUDA_PATH/lib64, else
// /usr/local/cuda/lib64) and has the entry points the peer uses; on success *version is e.g.
// "2.28.3" and *path where it was found. FailedPrecondition naming what failed otherwise.
absl::Status ProbeNccl(std::string* version, std::string* path);

// Whether NCCL can reduce (dtype, reduce_op) (wire values); the message names what cannot.
absl::Status NcclSupports(int dtype, int reduce_op);

// Runs the peer to completion; returns its exit code (0 after DONE, 1 after an ERROR line).
// Dies with the parent (PR_SET_PDEATHSIG) and gives up at --timeout_ms from its start (a hung
// NCCL call is ended by the parent's kill).
int RunNcclPeer(const BenchOptions& options);

}  // namespace ard::ctl
