// cold_start_bench: the first steps of a new model against the steady state (issue 28 item 4).
// Every rank of one job submits the same `--tensors` float32 allreduces per step (names
// "layer.<i>", `--elements` each, all submitted before any is waited for, as a framework's
// backward pass does), waits for all of them and releases them; a step's time is the slowest
// rank's. The first steps meet tensors the daemons have not seen (negotiation through the
// coordinator, the response cache and the steady state's slots filling); later ones run from the
// cache. Prints each of the first `--report` steps' time and its ratio to the steady state (the
// median of the steps after them).
//
//   cold_start_bench --sockets /run/a.sock,/run/b.sock [--np 1] [--tensors 100]
//       [--elements 1024] [--steps 40] [--report 10] [--timeout_s 600]
//
// The process is the launcher (bench/rank_launcher.h) of sockets x np ranks: rank r talks to
// socket r / np as local rank r % np, in job "coldstart-<launcher pid>". Each rank writes its step
// times into the launcher's directory; rank 0 prints the table after a final barrier.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "bench/rank_launcher.h"
#include "client/allreduced_client.h"

namespace ard::bench {
namespace {

struct Options {
  std::vector<std::string> sockets;
  int np = 1;
  int tensors = 100;
  int elements = 1024;
  int steps = 40;
  int report = 10;
  int timeout_s = 600;
};

void Usage() {
  std::fprintf(stderr,
               "usage: cold_start_bench --sockets A,B[,...] [--np 1] [--tensors 100] "
               "[--elements 1024] [--steps 40] [--report 10] [--timeout_s 600]\n");
  std::exit(2);
}

std::vector<std::string> Split(const std::string& list) {
  std::vector<std::string> out;
  size_t begin = 0;
  while (begin <= list.size()) {
    size_t end = list.find(',', begin);
    if (end == std::string::npos) end = list.size();
    if (end > begin) out.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return out;
}

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc) Usage();
    std::string v = argv[++i];
    int* number = a == "--np"          ? &o.np
                  : a == "--tensors"   ? &o.tensors
                  : a == "--elements"  ? &o.elements
                  : a == "--steps"     ? &o.steps
                  : a == "--report"    ? &o.report
                  : a == "--timeout_s" ? &o.timeout_s
                                       : nullptr;
    if (a == "--sockets") {
      o.sockets = Split(v);
    } else if (number != nullptr) {
      *number = std::atoi(v.c_str());
      if (*number < 1) Usage();
    } else {
      Usage();
    }
  }
  if (o.sockets.empty() || o.report >= o.steps) Usage();
  return o;
}

[[noreturn]] void Fail(const char* what, const char* err) {
  std::fprintf(stderr, "cold_start_bench: %s: %s\n", what, err);
  std::exit(1);
}

// One step: every tensor submitted, then each waited for and released. Returns microseconds.
double Step(ard_client* client, const std::vector<std::string>& names,
            const std::vector<float>& data, int64_t* shape) {
  char err[512];
  std::vector<uint64_t> handles(names.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < names.size(); ++i) {
    ard_request r;
    ard_request_init(&r);
    r.collective = ARD_ALLREDUCE;
    r.dtype = ARD_FLOAT32;
    r.reduce_op = ARD_SUM;
    r.name = names[i].c_str();
    r.ndims = 1;
    r.shape = shape;
    r.data = data.data();
    r.bytes = data.size() * sizeof(float);
    if (ard_submit(client, &r, nullptr, nullptr, &handles[i], err, sizeof(err)) != ARD_OK) {
      Fail("submit", err);
    }
  }
  for (uint64_t h : handles) {
    ard_result result;
    if (ard_wait(client, h, -1, &result) != ARD_OK) Fail("wait", result.message);
    ard_release(client, h);
  }
  const std::chrono::duration<double, std::micro> spent = std::chrono::steady_clock::now() - start;
  return spent.count();
}

void Barrier(ard_client* client) {
  char err[512];
  ard_request r;
  ard_request_init(&r);
  r.collective = ARD_BARRIER;
  r.name = "cold_start.done";
  uint64_t h = 0;
  if (ard_submit(client, &r, nullptr, nullptr, &h, err, sizeof(err)) != ARD_OK) {
    Fail("barrier", err);
  }
  ard_result result;
  if (ard_wait(client, h, -1, &result) != ARD_OK) Fail("barrier", result.message);
  ard_release(client, h);
}

// Rank 0, after the barrier: every rank's step times, the slowest per step, and the table.
void Print(const Options& o, const RankEnv& env) {
  std::vector<double> slowest(o.steps, 0.0);
  for (int r = 0; r < env.size; ++r) {
    std::ifstream in(env.store_dir + "/rank" + std::to_string(r));
    for (int s = 0; s < o.steps; ++s) {
      double t = 0;
      if (!(in >> t)) Fail("reading step times of rank", std::to_string(r).c_str());
      slowest[s] = std::max(slowest[s], t);
    }
  }
  std::vector<double> steady(slowest.begin() + o.report, slowest.end());
  std::nth_element(steady.begin(), steady.begin() + steady.size() / 2, steady.end());
  const double median = steady[steady.size() / 2];
  std::printf(
      "# cold_start_bench: %zu sockets x %d ranks, %d float32 tensors of %d elements "
      "per step, %d steps\n",
      o.sockets.size(), o.np, o.tensors, o.elements, o.steps);
  std::printf("# step time = the slowest rank's; steady state = median of steps %d..%d\n",
              o.report + 1, o.steps);
  std::printf("#  step      time_us   x_steady\n");
  for (int s = 0; s < o.report; ++s) {
    std::printf("%7d %12.1f %10.2f\n", s + 1, slowest[s], slowest[s] / median);
  }
  std::printf("steady %12.1f %10.2f\n", median, 1.0);
}

int RunRank(const Options& o, const RankEnv& env) {
  const int host = env.rank / o.np;
  ard_options options;
  ard_options_init(&options);
  options.socket_path = o.sockets[host].c_str();
  options.rank = env.rank;
  options.size = env.size;
  options.local_rank = env.rank % o.np;
  options.local_size = o.np;
  ard_client* client = nullptr;
  char err[512];
  if (ard_client_create(&options, &client, err, sizeof(err)) != ARD_OK) Fail("connect", err);
  std::vector<std::string> names;
  for (int i = 0; i < o.tensors; ++i) names.push_back("layer." + std::to_string(i));
  std::vector<float> data(o.elements, 1.0f);
  int64_t shape = o.elements;
  std::vector<double> times;
  for (int s = 0; s < o.steps; ++s) times.push_back(Step(client, names, data, &shape));
  {
    std::ofstream out(env.store_dir + "/rank" + std::to_string(env.rank));
    for (double t : times) out << t << "\n";
  }
  Barrier(client);  // every rank's file is complete
  if (env.rank == 0) Print(o, env);
  std::fflush(stdout);
  ard_client_destroy(client);
  ReportDone(env);
  return 0;
}

}  // namespace
}  // namespace ard::bench

int main(int argc, char** argv) {
  using namespace ard::bench;
  const Options o = Parse(argc, argv);
  RankEnv env;
  if (ReadRankEnv(&env)) return RunRank(o, env);
  if (std::getenv("ALLREDUCED_JOB") == nullptr) {
    setenv("ALLREDUCED_JOB", ("coldstart-" + std::to_string(getpid())).c_str(), 1);
  }
  return LaunchRanks(static_cast<int>(o.sockets.size()) * o.np, argv, o.timeout_s);
}
