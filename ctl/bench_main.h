// Entry points of `allreducectl bench` and of its hidden `bench-worker` subcommand (the same
// binary re-executed by the bench parent): parse the arguments after the command word and run
// the launcher (bench_launcher.h) or the worker (bench_worker.h). Called once from CtlMain on the
// main thread.
#pragma once

#include <string>
#include <vector>

namespace ard::ctl {

// Exit codes: 0 ok, 1 the run failed or found wrong results, 2 usage error (one line on stderr).
int BenchMain(const std::vector<std::string>& args);
int BenchWorkerMain(const std::vector<std::string>& args);
// The hidden `bench-nccl` subcommand: the NCCL peer of --device gpu (bench_nccl.h).
int BenchNcclMain(const std::vector<std::string>& args);

}  // namespace ard::ctl
