#include "daemon/jobs/local_negotiator.h"

#include <algorithm>
#include <climits>
#include <numeric>

#include "daemon/gpu/device.h"
#include "daemon/negotiation/rank_assignment.h"

namespace ard::jobs {

void LocalNegotiator::FormAsync(const std::vector<MemberInfo>& members,
                                std::function<void(absl::StatusOr<Formation>)> done) {
  // Ranks the launcher gave are kept; the rest follow local rank, then arrival order.
  std::vector<size_t> order(members.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = members[a].local_rank < 0 ? INT_MAX : members[a].local_rank;
    const int lb = members[b].local_rank < 0 ? INT_MAX : members[b].local_rank;
    return la < lb;
  });
  std::vector<int> requested;
  for (size_t i : order) requested.push_back(members[i].rank);
  auto assigned = negotiation::AssignRanks(requested, size_);
  if (!assigned.ok()) return done(assigned.status());
  Formation f;
  f.ranks.resize(members.size());
  for (size_t k = 0; k < order.size(); ++k) f.ranks[order[k]] = (*assigned)[k];
  f.local_ranks = f.ranks;  // one host: local rank = rank
  f.local_size = size_;
  f.hosts.size = size_;
  f.hosts.host_of_rank.assign(size_, 0);
  f.hosts.ranks_of_host.resize(1);
  for (int r = 0; r < size_; ++r) f.hosts.ranks_of_host[0].push_back(r);
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
