// gloo_allreduce_bench: Gloo's (Debian libgloo-dev) allreduce over its TCP transport on loopback,
// float32 sum, timed like nccl-tests and `allreducectl bench`, as a peer to compare the daemon
// with. Uses the older algorithm classes (AllreduceRing, AllreduceRingChunked,
// AllreduceHalvingDoubling); the newer gloo::allreduce(AllreduceOptions) stalls on loopback
// (shared/MEASUREMENTS.md). Each row reports the best of the three; their times follow it.
//
//   gloo_allreduce_bench --np 4 [--sizes 4:256M] [--warmup 5] [--iters 20] [--check]
//       [--teardown exit|destroy|naive] [--timeout_s 900]
//
// The process given --np is the launcher (bench/rank_launcher.h); ranks rendezvous through
// gloo::rendezvous::FileStore in the launcher's temp directory. Per size and algorithm: the
// algorithm object is built (untimed: it registers buffers), warmup runs, a barrier, iters timed
// runs; time = the slowest rank's mean run. Allreduce runs in place, so unlike MPI's and the
// daemon's numbers these include no input copy. --check fills the inputs with ArdBenchPattern
// before the first warm-up run of each algorithm and checks that run's result (later runs sum
// sums, so only the first is checked). Teardown: see EndRank() below.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_common.h"
#include "bench/rank_launcher.h"
#include "gloo/allreduce_halving_doubling.h"
#include "gloo/allreduce_ring.h"
#include "gloo/allreduce_ring_chunked.h"
#include "gloo/barrier_all_to_one.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/transport/tcp/device.h"

namespace ard::bench {
namespace {

// How a rank ends (see EndRank).
enum class Teardown { kExit, kDestroy, kNaive };

struct Options {
  ArdBenchOptions common;
  int np = 0;  // > 0: this process is the launcher
  Teardown teardown = Teardown::kExit;
  int timeout_s = 900;  // launcher's deadline for the whole run
};

enum Algo { kRing, kRingChunked, kHalvingDoubling, kNumAlgos };
constexpr const char* kAlgoNames[kNumAlgos] = {"ring", "chunked", "hd"};

std::unique_ptr<gloo::Algorithm> MakeAlgo(Algo algo, const std::shared_ptr<gloo::Context>& ctx,
                                          float* data, int count) {
  std::vector<float*> ptrs = {data};
  switch (algo) {
    case kRing:
      return std::make_unique<gloo::AllreduceRing<float>>(ctx, ptrs, count);
    case kRingChunked:
      return std::make_unique<gloo::AllreduceRingChunked<float>>(ctx, ptrs, count);
    default:
      return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(ctx, ptrs, count);
  }
}

// One rank's view of the job: its connected context, plus the barrier before each timed loop and
// the max-reduction of the timings (both built once and reused). Main thread only.
class Rank {
 public:
  Rank(const RankEnv& env, std::shared_ptr<gloo::Context> ctx)
      : env_(env),
        ctx_(std::move(ctx)),
        barrier_(ctx_),
        slowest_(ctx_, {&reduce_value_}, 1, gloo::ReductionFunction<double>::max) {}

  // Times `algo` at `count` elements: returns the slowest rank's mean run (us) and adds this
  // rank's wrong elements to *wrong.
  double TimeAlgo(const Options& o, Algo algo, std::vector<float>& data, int count,
                  uint64_t* wrong) {
    auto run = MakeAlgo(algo, ctx_, data.data(), count);
    if (o.common.check) {
      for (int i = 0; i < count; ++i) data[i] = ArdBenchPattern(env_.rank, i);
    }
    for (int w = 0; w < o.common.warmup; ++w) {
      run->run();
      if (o.common.check && w == 0) *wrong += ArdBenchCountWrong(data.data(), count, env_.size);
    }
    barrier_.run();
    const double start = ArdBenchNowUs();
    for (int it = 0; it < o.common.iters; ++it) run->run();
    reduce_value_ = (ArdBenchNowUs() - start) / o.common.iters;
    slowest_.run();
    return reduce_value_;
  }

  // Sums a count over ranks (as a double: exact far beyond any element count here).
  uint64_t SumOverRanks(uint64_t value) {
    std::vector<double> v = {static_cast<double>(value)};
    gloo::AllreduceRing<double> sum(ctx_, {v.data()}, 1);
    sum.run();
    return static_cast<uint64_t>(v[0]);
  }

  void Barrier() { barrier_.run(); }

 private:
  const RankEnv env_;
  std::shared_ptr<gloo::Context> ctx_;
  gloo::BarrierAllToOne barrier_;
  double reduce_value_ = 0;
  gloo::AllreduceRing<double> slowest_;
};

// Rank 0 prints a row per size. Returns the total number of wrong elements (all ranks).
uint64_t RunSizes(const Options& o, const RankEnv& env, Rank& rank) {
  uint64_t max_size = 0;
  for (int s = 0; s < o.common.num_sizes; ++s) max_size = std::max(max_size, o.common.sizes[s]);
  std::vector<float> data(max_size / sizeof(float) + 1, 0.0f);
  uint64_t total_wrong = 0;
  for (int s = 0; s < o.common.num_sizes; ++s) {
    const int count = static_cast<int>(o.common.sizes[s] / sizeof(float));
    if (count == 0) continue;
    double best_us = 0, times[kNumAlgos];
    int best = 0;
    uint64_t wrong = 0;
    for (int a = 0; a < kNumAlgos; ++a) {
      if (!o.common.check) std::fill(data.begin(), data.begin() + count, 0.0f);
      times[a] = rank.TimeAlgo(o, static_cast<Algo>(a), data, count, &wrong);
      if (a == 0 || times[a] < best_us) best_us = times[a], best = a;
    }
    wrong = o.common.check ? rank.SumOverRanks(wrong) : 0;
    total_wrong += wrong;
    if (env.rank == 0) {
      char extra[128];
      snprintf(extra, sizeof(extra), "%10.1f %10.1f %10.1f %8s", times[kRing], times[kRingChunked],
               times[kHalvingDoubling], kAlgoNames[best]);
      ArdBenchPrintRow(stdout, count * sizeof(float), best_us, env.size, o.common.check, wrong,
                       extra);
    }
  }
  return total_wrong;
}

// Ends a rank once its output is complete. `exit` (the default): every rank passes a Gloo barrier,
// flushes, reports done, then waits in the file store until every rank has left that barrier, and
// leaves with _exit(); without that last wait a rank that exits first closes its sockets while
// peers still wait for the barrier's release, and they fail with "Connection closed by peer".
// `destroy`: the same Gloo barrier, then the algorithms, the context and the device (whose loop
// thread owns the sockets) are released in that order and main returns. `naive`: no barrier,
// destructors as soon as this rank's own work is done. README.md says what each did here.
int EndRank(const Options& o, const RankEnv& env, gloo::rendezvous::Store& store,
            std::unique_ptr<Rank> rank, std::shared_ptr<gloo::Context> ctx,
            std::shared_ptr<gloo::transport::Device> dev, int status) {
  if (o.teardown != Teardown::kNaive) rank->Barrier();
  fflush(stdout);
  fflush(stderr);
  ReportDone(env);
  if (o.teardown == Teardown::kExit) {
    store.set("left-barrier-" + std::to_string(env.rank), {'1'});
    std::vector<std::string> keys;
    for (int r = 0; r < env.size; ++r) keys.push_back("left-barrier-" + std::to_string(r));
    store.wait(keys, std::chrono::seconds(60));
    _exit(status);
  }
  rank.reset();
  ctx.reset();
  dev.reset();
  return status;
}

int RunRank(const Options& o, const RankEnv& env) {
  gloo::transport::tcp::attr attr("127.0.0.1");
  std::shared_ptr<gloo::transport::Device> dev = gloo::transport::tcp::CreateDevice(attr);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(env.rank, env.size);
  ctx->setTimeout(std::chrono::seconds(120));
  gloo::rendezvous::FileStore store(env.store_dir);
  ctx->connectFullMesh(store, dev);
  auto rank = std::make_unique<Rank>(env, ctx);
  if (env.rank == 0) {
    printf(
        "# gloo_allreduce_bench: gloo 0.5.0 (libgloo-dev) tcp on 127.0.0.1, float32 sum (in "
        "place), %d ranks, warmup %d, iters %d; time = best of ring, chunked, hd\n",
        env.size, o.common.warmup, o.common.iters);
    ArdBenchPrintColumns(stdout, o.common.check, "    ring_us chunked_us      hd_us     best");
  }
  const uint64_t wrong = RunSizes(o, env, *rank);
  if (env.rank == 0 && o.common.check) {
    printf("# Out of bounds values : %llu %s\n", static_cast<unsigned long long>(wrong),
           wrong == 0 ? "OK" : "FAILED");
  }
  return EndRank(o, env, store, std::move(rank), std::move(ctx), std::move(dev),
                 wrong == 0 ? 0 : 1);
}

bool ParseArgs(int argc, char** argv, Options* o) {
  ArdBenchDefaults(&o->common);
  for (int i = 1; i < argc; ++i) {
    const int r = ArdBenchParseFlag(argc, argv, &i, &o->common);
    if (r < 0) return false;
    if (r > 0) continue;
    const std::string arg = argv[i];
    const bool has_next = i + 1 < argc;
    if (arg == "--np" && has_next) {
      o->np = atoi(argv[++i]);
    } else if (arg == "--timeout_s" && has_next) {
      o->timeout_s = atoi(argv[++i]);
    } else if (arg == "--teardown" && has_next) {
      const std::string mode = argv[++i];
      if (mode == "exit") {
        o->teardown = Teardown::kExit;
      } else if (mode == "destroy") {
        o->teardown = Teardown::kDestroy;
      } else if (mode == "naive") {
        o->teardown = Teardown::kNaive;
      } else {
        return false;
      }
    } else {
      fprintf(stderr, "unknown flag: %s\n", arg.c_str());
      return false;
    }
  }
  return true;
}

}  // namespace
}  // namespace ard::bench

int main(int argc, char** argv) {
  using namespace ard::bench;
  Options o;
  RankEnv env;
  const bool is_rank = ReadRankEnv(&env);
  if (!ParseArgs(argc, argv, &o) || (!is_rank && o.np < 2) || o.timeout_s <= 0) {
    fprintf(stderr,
            "usage: gloo_allreduce_bench --np N (>= 2) [--sizes 4:256M] [--warmup 5] "
            "[--iters 20] [--check] [--teardown exit|destroy|naive] [--timeout_s 900]\n");
    return 2;
  }
  if (!is_rank) return LaunchRanks(o.np, argv, o.timeout_s);
  // Gloo reports failures (peer gone, timeout, bad argument) by throwing; this is the boundary.
  try {
    return RunRank(o, env);
  } catch (const std::exception& e) {
    fprintf(stderr, "gloo bench: rank %d: %s\n", env.rank, e.what());
    fflush(stderr);
    _exit(1);
  }
}
