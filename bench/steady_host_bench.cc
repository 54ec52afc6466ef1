// steady_host_bench: one host's own cost in the coordinator-free steady state (DESIGN.md "Steady
// state without the coordinator") at any job size, without the network: the daemon's
// SteadyRounds for a host with one rank of a job of --ranks ranks, --tensors cached float32
// allreduces (bench/sim_tensors.h). bench/scale_sim runs the same code between real meshes, but
// holds every simulated host in one process, which caps the job's size; this measures the host
// side alone where scale_sim cannot go (1,000 ranks x 200 tensors).
//
// Phases: the coordinator's first list (every tensor committed and cached, encoded as the
// coordinator sends it and decoded as JobChannel does) is released by a round; then --steps
// steps, each: offer every tensor (a ReadyTensor with one entry per rank of the job, as the
// readiness table hands it over), a round (Vote; this host's vote is the combined result, as if
// every host voted the same; Agreed; TakeOutcome) that must agree every tensor, and the release
// of what it ran. Prints one JSON object: per-step CPU (this thread's) and heap bytes in use
// (mallinfo2) once the first list is decoded (every rank's entry of every tensor), while
// SteadyRounds holds it (from a first step's commit until the round that releases it), after the
// first round (the slot templates) and while a step's tensors are held.
//
// Usage: steady_host_bench [--ranks=1000] [--tensors=200] [--steps=50]
#include <malloc.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bench/sim_tensors.h"
#include "daemon/negotiation/meta_convert.h"
#include "daemon/negotiation/response_codec.h"
#include "daemon/negotiation/steady_rounds.h"

namespace ard::bench {
namespace {

using negotiation::RankEntry;
using negotiation::ReadyTensor;
using negotiation::Response;
using negotiation::TensorRequest;

constexpr uint64_t kFusion = 128ull << 20;  // DaemonConfig's default

double CpuSeconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

double HeapBytes() { return static_cast<double>(mallinfo2().uordblks); }

// One round in which this host's vote stands for every host's. Returns what it ran.
std::vector<Response> Round(negotiation::SteadyRounds& rounds, size_t* agreed) {
  negotiation::RoundVote vote = rounds.Vote(kFusion);
  if (!rounds.Agreed(vote).ok()) std::abort();
  std::optional<negotiation::RoundOutcome> out = rounds.TakeOutcome();
  if (!out) std::abort();
  *agreed = out->agreed_tensors;
  return std::move(out->run);
}

int Main(int ranks, int tensors, int steps) {
  const int rank = 0;
  std::vector<bool> here(ranks, false);
  here[rank] = true;
  const double heap_start = HeapBytes();
  negotiation::SteadyRounds rounds(here);
  double heap_decoded = 0, heap_first_list = 0;
  {
    negotiation::CommittedList list;
    for (int t = 0; t < tensors; ++t) {
      ReadyTensor committed{SimTensorName(t), std::vector<RankEntry>(ranks)};
      for (int r = 0; r < ranks; ++r) {
        committed.ranks[r] = *negotiation::FromMeta(SimTensorMeta(r), committed.name, ranks);
      }
      CollectiveResponse cr;
      cr.set_collective(static_cast<uint32_t>(wire::Collective::kAllreduce));
      negotiation::EncodeTensor(committed, cr.add_tensors());
      list.responses.push_back(*negotiation::DecodeResponse(cr, ranks));
      list.cache_put.push_back({static_cast<uint32_t>(t + 1), committed.name});
    }
    heap_decoded = HeapBytes() - heap_start;
    rounds.Received(std::move(list));
    heap_first_list = HeapBytes() - heap_start;
  }
  size_t agreed = 0;
  if (Round(rounds, &agreed).size() != static_cast<size_t>(tensors)) std::abort();
  const double heap_templates = HeapBytes() - heap_start;
  std::vector<TensorRequest> requests;
  for (int t = 0; t < tensors; ++t) {
    requests.push_back(*negotiation::FromMeta(SimTensorMeta(rank), SimTensorName(t), ranks));
  }
  double offer_s = 0, round_s = 0, free_s = 0, heap_held = 0;
  for (int k = 0; k < steps; ++k) {
    double cpu = CpuSeconds();
    for (const TensorRequest& request : requests) {
      ReadyTensor tensor{request.name(), std::vector<RankEntry>(ranks)};
      tensor.ranks[rank] = request;
      if (!rounds.Offer(tensor)) std::abort();
    }
    offer_s += CpuSeconds() - cpu;
    heap_held = HeapBytes() - heap_start - heap_templates;
    cpu = CpuSeconds();
    std::vector<Response> run = Round(rounds, &agreed);
    round_s += CpuSeconds() - cpu;
    if (agreed != static_cast<size_t>(tensors)) std::abort();
    cpu = CpuSeconds();
    run.clear();
    free_s += CpuSeconds() - cpu;
  }
  std::printf(
      "{\"ranks\": %d, \"tensors\": %d, \"steps\": %d, \"offer_cpu_us_per_step\": %.1f, "
      "\"round_cpu_us_per_step\": %.1f, \"free_cpu_us_per_step\": %.1f, "
      "\"decoded_list_heap_mb\": %.3f, \"first_list_heap_mb\": %.3f, \"template_heap_mb\": %.3f, "
      "\"held_heap_mb\": %.3f}\n",
      ranks, tensors, steps, 1e6 * offer_s / steps, 1e6 * round_s / steps, 1e6 * free_s / steps,
      heap_decoded / 1e6, heap_first_list / 1e6, heap_templates / 1e6, heap_held / 1e6);
  return 0;
}

}  // namespace
}  // namespace ard::bench

int main(int argc, char** argv) {
  int ranks = 1000, tensors = 200, steps = 50;
  for (int i = 1; i < argc; ++i) {
    if (std::sscanf(argv[i], "--ranks=%d", &ranks) == 1 ||
        std::sscanf(argv[i], "--tensors=%d", &tensors) == 1 ||
        std::sscanf(argv[i], "--steps=%d", &steps) == 1) {
      continue;
    }
    std::fprintf(stderr, "usage: steady_host_bench [--ranks=N] [--tensors=T] [--steps=S]\n");
    return 2;
  }
  if (ranks < 1 || tensors < 1 || steps < 1) return 2;
  return ard::bench::Main(ranks, tensors, steps);
}
