#include "ctl/bench_main.h"

#include <cstdio>
#include <string>

#include "ctl/bench_launcher.h"
#include "ctl/bench_nccl.h"
#include "ctl/bench_options.h"
#include "ctl/bench_worker.h"

namespace ard::ctl {
namespace {

// Returns -1 when `options` is ready to run, else the exit code.
int Parse(const std::vector<std::string>& args, bool worker, BenchOptions* options) {
  bool help = false;
  absl::Status st = ParseBenchArgs(args, worker, options, &help);
  if (help) {
    std::fputs(kBenchUsage, stdout);
    return 0;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "allreducectl: bench: %s (see allreducectl bench --help)\n",
                 std::string(st.message()).c_str());
    return 2;
  }
  return -1;
}

}  // namespace

int BenchMain(const std::vector<std::string>& args) {
  BenchOptions options;
  const int rc = Parse(args, /*worker=*/false, &options);
  return rc >= 0 ? rc : RunBenchLauncher(options);
}

int BenchWorkerMain(const std::vector<std::string>& args) {
  BenchOptions options;
  const int rc = Parse(args, /*worker=*/true, &options);
  return rc >= 0 ? rc : RunBenchWorker(options);
}

int BenchNcclMain(const std::vector<std::string>& args) {
  BenchOptions options;
  const int rc = Parse(args, /*worker=*/true, &options);
  return rc >= 0 ? rc : RunNcclPeer(options);
}

}  // namespace ard::ctl
