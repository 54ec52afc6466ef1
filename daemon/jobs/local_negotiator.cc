#include "daemon/jobs/local_negotiator.h"

#include <climits>

#include "daemon/gpu/device.h"
#include "daemon/negotiation/rank_assignment.h"

namespace ard::jobs {

void LocalNegotiator::FormAsync(const std::vector<MemberInfo>& members,
                                std::function<void(absl::StatusOr<Formation>)> done) {
  // Ranks the launcher gave are kept; the rest follow local rank, then arrival order. An elastic
  // job (size 0) numbers those present densely in the order of their `rank` (then arrival).
  const int size = size_ > 0 ? size_ : static_cast<int>(members.size());
  std::vector<negotiation::RankRequest> entries;
  for (const MemberInfo& m : members) {
    if (size_ == 0) {
      entries.push_back({-1, (m.rank < 0 ? int64_t{INT_MAX} : m.rank) * (int64_t{1} << 24) +
                                 static_cast<int64_t>(entries.size())});
    } else {
      entries.push_back({m.rank, m.local_rank < 0 ? INT_MAX : m.local_rank});
    }
  }
  auto ranks = negotiation::AssignRanks(entries, size);
  if (!ranks.ok()) return done(ranks.status());
  Formation f;
  f.ranks = *std::move(ranks);
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
