#include "daemon/jobs/local_negotiator.h"

#include <algorithm>
#include <climits>

#include "daemon/gpu/device.h"
#include "daemon/negotiation/rank_assignment.h"

namespace ard::jobs {

void LocalNegotiator::FormAsync(const std::vector<MemberInfo>& members,
                                std::function<void(absl::StatusOr<Formation>)> done) {
  // Ranks the launcher gave are kept; the rest follow local rank, then arrival order. An elastic
  // job (size 0) numbers those present densely in the order of their `rank` (then arrival), at
  // most max_np of them (the others get rank -1: the job refuses them).
  std::vector<negotiation::RankRequest> entries;
  for (const MemberInfo& m : members) {
    entries.push_back({m.rank, m.local_rank < 0 ? INT_MAX : m.local_rank});
  }
  const bool elastic = size_ == 0;
  auto assigned = negotiation::FormationRanks(entries, elastic ? max_np_ : size_, elastic);
  if (!assigned.ok()) return done(assigned.status());
  std::vector<int> ranks = *std::move(assigned);
  const int size = size_ > 0 ? size_
                             : static_cast<int>(std::count_if(ranks.begin(), ranks.end(),
                                                              [](int r) { return r >= 0; }));
  Formation f;
  f.ranks = std::move(ranks);
  f.local_ranks = f.ranks;  // one host: local rank = rank
  f.local_size = size;
  f.hosts.size = size;
  f.hosts.host_of_rank.assign(size, 0);
  f.hosts.ranks_of_host.resize(1);
  for (int r = 0; r < size; ++r) f.hosts.ranks_of_host[0].push_back(r);
  f.hosts.host_names = {options_.host_name};
  done(std::move(f));
}

void LocalNegotiator::HostReady(std::vector<negotiation::Response> ready) {
  for (auto& response : ready) sink_->OnCommitted(std::move(response));
}

void LocalNegotiator::PlanGpusAsync(
    const gpu::HostGpus& host, std::function<void(absl::StatusOr<gpu::CrossHostGpuPlan>)> done) {
  auto plan = gpu::PlanGpuJob(options_.gpu_mode, {host}, 0);
  if (!plan.ok()) return done(plan.status());
  plan->mode = gpu::GpuMode::kNccl;  // one host: hierarchical would add nothing
  auto id = options_.gpu_device->NewUniqueId();
  if (!id.ok()) return done(id.status());
  gpu::CrossHostGpuPlan out;
  out.plan = *std::move(plan);
  out.id = *id;
  done(std::move(out));
}

}  // namespace ard::jobs
